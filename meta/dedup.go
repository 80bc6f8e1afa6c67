package meta

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Request ids make a command safe to send twice. A client of a group
// (failover.go) gives each call of a dedupMethods method an id of 16
// random bytes, the same on every attempt, in the gRPC metadata
// RequestIDHeader; the leader puts it on the command it proposes; and the
// state machine, applying a command whose id it remembers, changes
// nothing and answers with the outcome it remembered. So a call whose
// leader died after the commit, before the answer, is sent again to the
// next leader and applied once.
//
// The table is part of the replicated state, written in the same batch as
// the command (a snapshot carries it, a restart keeps it): under
// c/req/ID the outcome, under c/reqo/SLOT the id, SLOT counting the
// commands that carried an id (c/reqn). It holds the last requestWindow
// ids; the one requestWindow older is forgotten as each new one comes, so
// a retry must come within requestWindow identified commands of its
// first attempt (a client gives up after failoverWait, 15 s: at 8,000
// commands a second that is 120,000).

// RequestIDHeader is the gRPC metadata key of a call's request id (32 hex
// digits).
const RequestIDHeader = "cairn-request-id"

// requestWindow is how many request ids the state machine remembers. A
// variable only so that a test can see one forgotten; every member of a
// group must use the same value.
var requestWindow uint64 = 1 << 17

var (
	keyRequestSlots = []byte("c/reqn")
	prefixRequest   = []byte("c/req/")
	prefixReqOrder  = []byte("c/reqo/")
)

func requestKey(id []byte) []byte { return append(append([]byte(nil), prefixRequest...), id...) }

func reqOrderKey(slot uint64) []byte {
	return append(append([]byte(nil), prefixReqOrder...), be64(slot)...)
}

// dedupMethods are the calls whose one command carries the caller's
// request id, and whose answer is made of the command's result alone (a
// call that also answers with something it made before proposing, a new
// key's secret, cannot be answered again from the result).
var dedupMethods = map[string]bool{
	"CreateNamespace": true, "DeleteNamespace": true, "SetVisibility": true,
	"Mkdir": true, "Commit": true, "CommitBatch": true, "Append": true,
	"Delete": true, "Rename": true, "SetAttr": true,
	"Symlink": true, "Link": true, "SetXattr": true, "Mknod": true, "MountReserve": true,
	"S3Copy": true, "S3SetTags": true, "S3PutPart": true, "S3CompleteUpload": true, "S3AbortUpload": true,
	"S3SetVersioning": true, "S3DeleteVersion": true, "S3Delete": true, "S3SetLock": true,
}

// newRequestID returns a fresh id in its header form.
func newRequestID() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ParseRequestID reads a request id header: exactly 32 hex digits.
func ParseRequestID(s string) ([]byte, error) {
	if len(s) != 32 {
		return nil, errors.E(errors.Op("meta.ParseRequestID"), errors.Invalid, "a request id is 32 hex digits")
	}
	id, err := hex.DecodeString(s)
	if err != nil {
		return nil, errors.E(errors.Op("meta.ParseRequestID"), errors.Invalid, "a request id is 32 hex digits", err)
	}
	return id, nil
}

// requestSlot carries a call's request id from its metadata to the one
// command it proposes (withRequest).
type requestSlot struct{ id []byte }

type requestKeyCtx struct{}

// withRequestID reads the request id of an incoming call of method into
// ctx. A malformed id is refused: the caller meant the call to be safe to
// retry and it would not be.
func withRequestID(ctx context.Context, method string) (context.Context, error) {
	if !dedupMethods[method] {
		return ctx, nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(RequestIDHeader)
	if len(v) == 0 {
		return ctx, nil
	}
	id, err := ParseRequestID(v[0])
	if err != nil {
		return ctx, err
	}
	return context.WithValue(ctx, requestKeyCtx{}, &requestSlot{id: id}), nil
}

// withRequest gives cmd the request id of the call ctx belongs to, once:
// a second command of the same call would otherwise be taken for a retry
// of the first.
func withRequest(ctx context.Context, cmd *metapb.Command) *metapb.Command {
	if r, ok := ctx.Value(requestKeyCtx{}).(*requestSlot); ok && r.id != nil {
		cmd.RequestId, r.id = r.id, nil
	}
	return cmd
}

// requestTable is the table's index in memory: the ids it holds and the
// slot each fills. Applying a command then reads nothing from Pebble
// unless its id is a repeat (the rare case): the lookup and the slot
// bookkeeping were two thirds of the table's cost per command. Pebble
// keeps the table itself (outcomes and order) in the command's batch as
// before; the index is read from it by the first command applied after
// Open or a restore (forget). Used under Service.mu.
type requestTable struct {
	loaded bool
	next   uint64            // c/reqn: the slot the next id fills
	slot   map[string]uint64 // id -> slot
	id     map[uint64]string // slot -> id, for the ids still held
}

// reqUndo reverts changes to a requestTable whose batch was dropped.
type reqUndo []func()

func (u *reqUndo) revert() {
	for i := len(*u) - 1; i >= 0; i-- {
		(*u)[i]()
	}
	*u = (*u)[:0]
}

// forget drops the index: the store changed under it (a restore).
func (t *requestTable) forget() { *t = requestTable{} }

// load reads the index from the store, once.
func (t *requestTable) load(r pebble.Reader) error {
	if t.loaded {
		return nil
	}
	const op = errors.Op("meta.dedup")
	nt := requestTable{loaded: true, slot: map[string]uint64{}, id: map[uint64]string{}}
	if v, c, err := r.Get(keyRequestSlots); err == nil {
		nt.next = u64(v)
		c.Close()
	} else if err != pebble.ErrNotFound {
		return errors.E(op, errors.IO, err)
	}
	upper := append(append([]byte(nil), prefixReqOrder[:len(prefixReqOrder)-1]...), prefixReqOrder[len(prefixReqOrder)-1]+1)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefixReqOrder, UpperBound: upper})
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()[len(prefixReqOrder):]
		if len(k) != 8 {
			continue
		}
		n, id := u64(k), string(it.Value())
		nt.slot[id], nt.id[n] = n, id
	}
	err = it.Error()
	it.Close()
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	*t = nt
	return nil
}

// recall looks id up: ok reports a command applied before with it, res
// and cmdErr what it answered. Only a repeat reads the store.
func (t *requestTable) recall(r pebble.Reader, id []byte) (res *result, cmdErr error, ok bool, err error) {
	if _, held := t.slot[string(id)]; !held {
		return nil, nil, false, nil
	}
	return recallOutcome(r, id)
}

// remember records in b, and in the index, that the command with id
// answered res or cmdErr, and forgets the id requestWindow older; undo
// gets what reverts the index should b be dropped.
func (t *requestTable) remember(b *pebble.Batch, id []byte, res *result, cmdErr error, undo *reqUndo) error {
	const op = errors.Op("meta.dedup")
	val, err := outcomeBytes(res, cmdErr)
	if err != nil {
		return err
	}
	n := t.next
	if n >= requestWindow {
		oldSlot := n - requestWindow
		if old, ok := t.id[oldSlot]; ok {
			if err := b.Delete(requestKey([]byte(old)), nil); err != nil {
				return errors.E(op, errors.IO, err)
			}
			if err := b.Delete(reqOrderKey(oldSlot), nil); err != nil {
				return errors.E(op, errors.IO, err)
			}
			delete(t.id, oldSlot)
			delete(t.slot, old)
			*undo = append(*undo, func() { t.id[oldSlot], t.slot[old] = old, oldSlot })
		}
	}
	for _, kv := range [][2][]byte{{requestKey(id), val}, {reqOrderKey(n), id}, {keyRequestSlots, be64(n + 1)}} {
		if err := b.Set(kv[0], kv[1], nil); err != nil {
			return errors.E(op, errors.IO, err)
		}
	}
	sid := string(id)
	t.slot[sid], t.id[n], t.next = n, sid, n+1
	*undo = append(*undo, func() { delete(t.slot, sid); delete(t.id, n); t.next = n })
	return nil
}

// recallOutcome reads the outcome remembered for id: ok reports a command
// applied before with it, res and cmdErr what it answered.
func recallOutcome(r pebble.Reader, id []byte) (res *result, cmdErr error, ok bool, err error) {
	val, c, err := r.Get(requestKey(id))
	if err == pebble.ErrNotFound {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, errors.E(errors.Op("meta.dedup"), errors.IO, err)
	}
	o := &metapb.CommandOutcome{}
	err = proto.Unmarshal(val, o)
	c.Close()
	if err != nil {
		return nil, nil, false, errors.E(errors.Op("meta.dedup"), errors.Corrupt, err)
	}
	if o.Error != nil {
		return nil, fromProtoError(o.Error), true, nil
	}
	res = &result{ns: o.Ns, inode: o.Inode, volume: o.Volume, first: o.First, inodes: o.Inodes,
		joinRole: o.JoinRole, version: o.Version, server: o.Server}
	for _, s := range o.Seqs {
		res.seqs = append(res.seqs, &metapb.Event{Seq: s})
	}
	if o.LastSeq != 0 {
		res.events = []*metapb.Event{{Seq: o.LastSeq}}
		if res.inode != nil {
			res.inode.Seq = o.LastSeq
		}
	}
	return res, nil, true, nil
}

// outcomeBytes is the record of what a command answered.
func outcomeBytes(res *result, cmdErr error) ([]byte, error) {
	o := &metapb.CommandOutcome{}
	if cmdErr != nil {
		o.Error = protoError(cmdErr)
	} else if res != nil {
		o.Ns, o.Inode, o.Volume, o.First, o.Inodes = res.ns, res.inode, res.volume, res.first, res.inodes
		o.JoinRole, o.Version, o.Server = res.joinRole, res.version, res.server
		for _, e := range res.seqs {
			o.Seqs = append(o.Seqs, e.Seq)
		}
		if len(res.events) > 0 {
			o.LastSeq = res.events[len(res.events)-1].Seq
		}
	}
	val, err := proto.Marshal(o)
	if err != nil {
		return nil, errors.E(errors.Op("meta.dedup"), errors.Invalid, err)
	}
	return val, nil
}
