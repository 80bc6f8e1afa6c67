package meta

import (
	"bytes"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Write sets. A group's leader evaluates the commands of an entry itself,
// against the state it applied, and the log entry carries what they
// wrote (a Pebble batch's repr) and what each member does beyond the
// store (a WriteEffect per command: events, the volume and draining
// caches, orphans, reloads of revocations and secrets, the collector's
// wake-up), rather than the commands: the members, leader included,
// apply the batch with the applied index and publish the effects, and
// run no command. On two shared cores the followers' re-running of every
// command was about two thirds of their CPU, the largest part of what a
// group costs beyond a meta alone.
//
// A write set is only right on the state it was evaluated on, so the
// entry names it: base, the applied index then (the last command entry
// applied, fsm.go). A member applies the batch only if its own applied
// index is still base when it reaches the entry; otherwise the entry
// changes nothing but the applied index, on every member alike (they
// apply the same log), and its answer, errStaleWriteSet, makes the
// leader evaluate the commands again. With one entry in flight
// (maxInflight, propose.go) the leader proposes an entry only once it
// applied the last, so its base matches: a stale one comes from a leader
// deposed after it evaluated (a new leader's entries came first) or one
// that evaluated before applying what an earlier term left in its log.
// Nothing of an evaluation reaches memory before its entry is applied:
// the request table's index (dedup.go) takes the ids a write set records
// from the batch, when it is applied (requestTable.absorb), and an
// evaluation never applied leaves no trace.
//
// An entry of commands (propose.go) is still applied by running them:
// logs written before write sets, a write set that would be larger than
// maxWriteSetBytes, groups with a member that does not say it reads
// write sets (raftlevel.go: a member of an older version), and groups
// started with more than one entry in flight (whose second entry cannot
// know the state the first leaves). An entry
// of commands is correct wherever the log places it; with one entry in
// flight the leader sends one only once the last is applied, as it does
// write sets.

// writeSetMarker starts a log entry that holds a WriteSet. No encoded
// Command starts with it (a protobuf tag of field 0 is invalid), nor
// does a batch of commands (batchMarker).
const writeSetMarker = 1

// writeSetsOff makes groups started after it is set propose commands
// rather than write sets (a benchmark compares).
var writeSetsOff = false

// errStaleWriteSet answers a write set whose base was not the applied
// index where the log placed it: it changed nothing.
var errStaleWriteSet = errors.E(errors.Op("meta.apply"), errors.Unavailable, "the state changed under the leader's write set; it was not applied")

// maxWriteSetBytes bounds a write set. A command's changes are mostly
// a few records, but a recursive delete of a large tree writes one or
// more per file: the entry then holds the commands, which each member
// runs, rather than megabytes that each member stores in its log and
// receives. A variable so that a test can send some entries so.
var maxWriteSetBytes = 4 << 20

// staleRetries is how often the leader evaluates an entry's commands
// again after its write set came back stale.
const staleRetries = 3

// proposeWriteSet evaluates ps, appends their write set as one entry and
// returns the evaluation's answers once the entry is applied here.
func (g *group) proposeWriteSet(ps []*proposal) ([]applyAnswer, error) {
	for attempt := 1; ; attempt++ {
		data, answers, err := g.evaluate(ps)
		if err != nil {
			return nil, err
		}
		if data == nil { // too large to send: each member runs the commands
			return g.proposeCommands(ps)
		}
		f := g.r.Apply(data, 10*time.Second)
		if err := f.Error(); err != nil {
			return nil, g.appendError(err)
		}
		a, ok := f.Response().(applyAnswer)
		switch {
		case !ok:
			return nil, errors.E(errors.Op("meta.propose"), errors.IO, "no answer from the state machine")
		case a.err == errStaleWriteSet && attempt < staleRetries:
			continue // nothing applied: evaluate on what is now
		case a.err != nil:
			return nil, a.err
		}
		return answers, nil
	}
}

// evaluate runs the commands of ps against the applied state and encodes
// the entry: their write set, on the applied index (nil data: larger than
// maxWriteSetBytes). The evaluation is not applied here; the entry is,
// once committed (applyWriteSets).
func (g *group) evaluate(ps []*proposal) ([]byte, []applyAnswer, error) {
	const op = errors.Op("meta.propose")
	s := g.s
	es := make([]entry, len(ps))
	for i, p := range ps {
		es[i] = entry{cmd: p.cmd}
	}
	s.mu.Lock()
	base := g.applied.Load()
	ev, err := s.evaluate(es)
	if err == nil {
		// The index of request ids takes this batch's when it is
		// applied, on every member alike.
		ev.undo.revert()
	}
	s.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	defer ev.b.Close()
	if len(ev.b.Repr()) > maxWriteSetBytes {
		return nil, nil, nil
	}
	ws := &metapb.WriteSet{Base: base}
	if !ev.b.Empty() {
		ws.Batch = ev.b.Repr()
	}
	for i, a := range ev.answers {
		if a.res == nil || ev.dups[i] {
			continue
		}
		if a.res.inode != nil && len(a.res.events) > 0 {
			a.res.inode.Seq = a.res.events[len(a.res.events)-1].Seq // stored already; only the answer carries it
		}
		if e := effectOf(a.res); e != nil {
			ws.Effects = append(ws.Effects, e)
		}
	}
	buf := make([]byte, 1, 1+proto.Size(ws))
	buf[0] = writeSetMarker
	data, err := proto.MarshalOptions{}.MarshalAppend(buf, ws)
	if err != nil {
		return nil, nil, errors.E(op, errors.Invalid, err)
	}
	return data, ev.answers, nil
}

// effectOf is what a command's result asks of every member beyond the
// store (published, kickGC); nil: nothing.
func effectOf(res *result) *metapb.WriteEffect {
	if len(res.events) == 0 && len(res.orphans) == 0 && res.volume == nil && res.server == nil &&
		!res.garbage && !res.revoked && !res.secrets {
		return nil
	}
	return &metapb.WriteEffect{
		Events: res.events, Orphans: res.orphans, Volume: res.volume, Server: res.server,
		Garbage: res.garbage, Revoked: res.revoked, Secrets: res.secrets,
	}
}

// isWriteSet reports whether a log entry holds a write set.
func isWriteSet(data []byte) bool { return len(data) > 0 && data[0] == writeSetMarker }

// decodeWriteSet reads a write set entry and checks its batch: records
// of the kinds a command writes, nothing cut short.
func decodeWriteSet(data []byte) (*metapb.WriteSet, error) {
	const op = errors.Op("meta.decodeWriteSet")
	ws := &metapb.WriteSet{}
	if err := proto.Unmarshal(data[1:], ws); err != nil {
		return nil, errors.E(op, errors.Corrupt, err)
	}
	if len(ws.Batch) == 0 {
		return ws, nil
	}
	h, ok := batchrepr.ReadHeader(ws.Batch)
	if !ok {
		return nil, errors.E(op, errors.Corrupt, "write set batch shorter than its header")
	}
	n := uint32(0)
	for r := batchrepr.Read(ws.Batch); ; n++ {
		kind, k, _, ok, err := r.Next()
		if err != nil {
			return nil, errors.E(op, errors.Corrupt, err)
		}
		if !ok {
			break
		}
		switch kind {
		case pebble.InternalKeyKindSet, pebble.InternalKeyKindDelete, pebble.InternalKeyKindRangeDelete:
		default:
			return nil, errors.E(op, errors.Corrupt, "write set batch holds a record of kind "+kind.String())
		}
		if bytes.Equal(k, keyApplied) {
			return nil, errors.E(op, errors.Corrupt, "write set batch writes the applied index")
		}
	}
	if n != h.Count {
		return nil, errors.E(op, errors.Corrupt, "write set batch's count does not match its records")
	}
	return ws, nil
}

// writeSetLog is a committed write set entry: logs[i] of a Raft batch.
type writeSetLog struct {
	i     int
	index uint64
	ws    *metapb.WriteSet
}

// applyWriteSets applies committed write set entries in one Pebble batch
// with the last one's index, publishes their effects, and answers each
// in out (applyAnswer{}, or errStaleWriteSet for one whose base is not
// the applied index it meets). An error is the store's: nothing was
// applied.
func (g *group) applyWriteSets(sets []writeSetLog, out []any) error {
	s := g.s
	s.mu.Lock()
	defer s.mu.Unlock()
	applied := g.applied.Load()
	b := s.db.NewBatch()
	var effects []*metapb.WriteEffect
	for _, w := range sets {
		if w.ws.Base != applied {
			out[w.i] = applyAnswer{err: errStaleWriteSet}
		} else {
			if err := appendRecords(b, w.ws.Batch); err != nil {
				b.Close()
				return err
			}
			out[w.i] = applyAnswer{}
			effects = append(effects, w.ws.Effects...)
		}
		applied = w.index
	}
	err := b.Set(keyApplied, be64(applied), nil)
	if err == nil {
		s.rc.beginWrite()
		err = s.db.Apply(b, pebble.NoSync)
		s.rc.endWrite(b)
	}
	if err == nil {
		s.reqs.absorb(b)
	}
	b.Close()
	if err != nil {
		return errors.E(errors.Op("meta.apply"), diskKind(err), err)
	}
	for _, e := range effects {
		res := &result{events: e.Events, orphans: e.Orphans, volume: e.Volume, server: e.Server,
			garbage: e.Garbage, revoked: e.Revoked, secrets: e.Secrets}
		s.published(res)
		s.kickGC(res)
	}
	g.noteApplied(applied)
	return nil
}

// appendRecords adds the records of repr (checked by decodeWriteSet) to b.
func appendRecords(b *pebble.Batch, repr []byte) error {
	if len(repr) == 0 {
		return nil
	}
	for r := batchrepr.Read(repr); ; {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			return errors.E(errors.Op("meta.apply"), errors.Corrupt, err)
		}
		if !ok {
			return nil
		}
		switch kind {
		case pebble.InternalKeyKindSet:
			err = b.Set(k, v, nil)
		case pebble.InternalKeyKindDelete:
			err = b.Delete(k, nil)
		case pebble.InternalKeyKindRangeDelete:
			err = b.DeleteRange(k, v, nil)
		}
		if err != nil {
			return errors.E(errors.Op("meta.apply"), errors.IO, err)
		}
	}
}

// absorb brings the index up to date with the request table's records a
// write set applied (those remember wrote on the member that evaluated
// it). An index not loaded yet is read from the store, which holds them.
// Called with Service.mu held.
func (t *requestTable) absorb(b *pebble.Batch) {
	if !t.loaded {
		return
	}
	for r := b.Reader(); ; {
		kind, k, v, ok, err := r.Next()
		if err != nil {
			t.forget() // cannot tell: read it again from the store
			return
		}
		if !ok {
			return
		}
		switch {
		case bytes.Equal(k, keyRequestSlots) && kind == pebble.InternalKeyKindSet:
			t.next = u64(v)
		case len(k) == len(prefixReqOrder)+8 && bytes.HasPrefix(k, prefixReqOrder):
			n := u64(k[len(prefixReqOrder):])
			switch kind {
			case pebble.InternalKeyKindSet:
				id := string(v)
				t.slot[id], t.id[n] = n, id
			case pebble.InternalKeyKindDelete:
				if id, ok := t.id[n]; ok {
					delete(t.slot, id)
					delete(t.id, n)
				}
			}
		}
	}
}
