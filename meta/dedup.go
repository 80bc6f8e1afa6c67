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

// recallOutcome looks id up in the table: ok reports a command applied
// before with it, res and cmdErr what it answered.
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

// rememberOutcome records in b that the command with id answered res or
// cmdErr, and forgets the id requestWindow older.
func rememberOutcome(b *pebble.Batch, id []byte, res *result, cmdErr error) error {
	const op = errors.Op("meta.dedup")
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
		return errors.E(op, errors.Invalid, err)
	}
	n := uint64(0)
	if v, c, err := b.Get(keyRequestSlots); err == nil {
		n = u64(v)
		c.Close()
	} else if err != pebble.ErrNotFound {
		return errors.E(op, errors.IO, err)
	}
	if n >= requestWindow {
		oldKey := reqOrderKey(n - requestWindow)
		old, c, err := b.Get(oldKey)
		switch {
		case err == nil:
			oldReq := requestKey(old)
			c.Close()
			if err := b.Delete(oldReq, nil); err != nil {
				return errors.E(op, errors.IO, err)
			}
			if err := b.Delete(oldKey, nil); err != nil {
				return errors.E(op, errors.IO, err)
			}
		case err != pebble.ErrNotFound:
			return errors.E(op, errors.IO, err)
		}
	}
	for _, kv := range [][2][]byte{{requestKey(id), val}, {reqOrderKey(n), id}, {keyRequestSlots, be64(n + 1)}} {
		if err := b.Set(kv[0], kv[1], nil); err != nil {
			return errors.E(op, errors.IO, err)
		}
	}
	return nil
}
