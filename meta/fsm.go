package meta

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// keyApplied holds the index of the last Raft log entry applied to the
// store, written in the same batch as the entry's changes: a replica that
// restarts skips the entries its store already holds, so that no command
// is applied twice (an append twice is two appends).
var keyApplied = []byte("c/applied")

// The state machine is applyCommand (apply.go): one command against one
// indexed batch, reading nothing but the batch and the command. The
// functions below are what every replica does around it: apply an entry
// with its index, publish what it changed, snapshot and restore the whole
// store, and rebuild the caches from the store.

// appliedIndex reads the index of the last entry applied (0: none).
func appliedIndex(db *pebble.DB) (uint64, error) {
	val, c, err := db.Get(keyApplied)
	if err == pebble.ErrNotFound {
		return 0, nil
	}
	if err != nil {
		return 0, errors.E(errors.Op("meta.applied"), errors.IO, err)
	}
	defer c.Close()
	return u64(val), nil
}

// entry is a command to apply as one log entry (index 0: no log, a meta
// alone).
type entry struct {
	cmd   *metapb.Command
	index uint64
}

// applyEntry applies cmd as log entry index and makes it visible, durable
// when sync is set. The command's own error (a name taken, a file
// missing) is the entry's answer, returned in cmdErr; the entry is
// applied either way, and err reports a store that could not take it.
// Called with s.mu held.
func (s *Service) applyEntry(cmd *metapb.Command, index uint64, sync bool) (res *result, cmdErr, err error) {
	a, err := s.applyEntries([]entry{{cmd, index}}, sync)
	if err != nil {
		return nil, nil, err
	}
	return a[0].res, a[0].err, nil
}

// applyEntries applies entries, in order, in one Pebble batch with one
// commit (a Raft batch of committed entries: the commit pipeline, the
// write-ahead log record and the read cache's update are paid once per
// batch, not per entry), and answers each. The applied index written is
// the last entry's. Called with s.mu held.
//
// A command whose request id the store remembers (dedup.go) changes
// nothing: its answer is the one remembered, and nothing is published
// again. A command that fails must leave nothing of its own in the
// batch; one that failed after writing part of its changes cannot be
// taken out of a shared batch, so then the whole batch is dropped and
// it is applied again without that command, whose answer is its error
// (the state one by one would give, in one batch still: the commands of
// one log entry are applied together or not at all).
func (s *Service) applyEntries(es []entry, sync bool) ([]applyAnswer, error) {
	ev, err := s.evaluate(es)
	if err != nil {
		return nil, err
	}
	b := ev.b
	if ev.last != 0 {
		if err := b.Set(keyApplied, be64(ev.last), nil); err != nil {
			ev.discard()
			return nil, errors.E(errors.Op("meta.apply"), errors.IO, err)
		}
	}
	if b.Empty() {
		b.Close()
		return ev.answers, nil
	}
	opts := pebble.NoSync
	if sync {
		opts = pebble.Sync
	}
	s.rc.beginWrite()
	err = s.db.Apply(b, opts)
	s.rc.endWrite(b)
	b.Close()
	if err != nil {
		ev.undo.revert()
		return nil, errors.E(errors.Op("meta.apply"), diskKind(err), err)
	}
	for i, a := range ev.answers {
		if a.res != nil && !ev.dups[i] {
			s.published(a.res)
			if es[i].index != 0 || sync {
				s.kickGC(a.res)
			}
		}
	}
	return ev.answers, nil
}

// evaluation is commands run against the applied state into one indexed
// batch that is not applied yet: applyEntries applies it, a group's
// leader sends it to the members as a write set (writeset.go).
type evaluation struct {
	b       *pebble.Batch
	answers []applyAnswer
	dups    []bool // answered from the request table: nothing to publish
	// undo reverts what the commands changed in the request table's
	// index (s.reqs), should b not be applied.
	undo reqUndo
	last uint64 // the highest index of the entries
}

// discard drops an evaluation that is not applied.
func (ev *evaluation) discard() {
	ev.undo.revert()
	ev.b.Close()
}

// evaluate runs es, in order, against the applied state in one batch
// (see applyEntries for a command that fails partway). Called with s.mu
// held.
func (s *Service) evaluate(es []entry) (*evaluation, error) {
	var failed map[int]error
	for {
		ev, partial, partialErr, err := s.evaluateOnce(es, failed)
		if err != nil || partial < 0 {
			return ev, err
		}
		if failed == nil {
			failed = map[int]error{}
		}
		failed[partial] = partialErr
	}
}

// evaluateOnce is evaluate's one batch. partial >= 0 names an entry that
// failed, with partialErr, after writing (the batch is dropped). failed
// holds the entries known to fail, with their errors: they are not run
// again, only their outcomes recorded.
func (s *Service) evaluateOnce(es []entry, failed map[int]error) (ev *evaluation, partial int, partialErr, err error) {
	if err := s.reqs.load(s.db); err != nil {
		return nil, -1, nil, err
	}
	ev = &evaluation{b: s.db.NewIndexedBatch(), answers: make([]applyAnswer, len(es)), dups: make([]bool, len(es))}
	b := ev.b
	shared := newSharedBatch()
	defer shared.close()
	fail := func(err error) (*evaluation, int, error, error) {
		ev.discard()
		return nil, -1, nil, err
	}
	for i, e := range es {
		var res *result
		var cmdErr error
		dup := false
		off := len(b.Repr())
		if id := e.cmd.RequestId; len(id) > 0 {
			if res, cmdErr, dup, err = s.reqs.recall(b, id); err != nil {
				return fail(err)
			}
		}
		if !dup {
			if ferr, ok := failed[i]; ok {
				cmdErr = ferr
			} else {
				n0 := b.Count()
				res, cmdErr = applyCommand(s.db, b, e.cmd, s.rc, shared)
				if cmdErr != nil && b.Count() != n0 {
					ev.discard()
					return nil, i, cmdErr, nil
				}
			}
			if cmdErr != nil {
				res = nil
			}
			if id := e.cmd.RequestId; len(id) > 0 {
				if err := s.reqs.remember(b, id, res, cmdErr, &ev.undo); err != nil {
					return fail(err)
				}
			}
			if i < len(es)-1 { // what the next commands read
				shared.absorb(b, off)
			}
		}
		ev.answers[i], ev.dups[i] = applyAnswer{res: res, err: cmdErr}, dup
		ev.last = max(ev.last, e.index)
	}
	return ev, -1, nil, nil
}

// published does what follows a visible command on every replica: its
// events go to watchers and the caches of applied state (volumes, cluster
// membership) take its changes.
func (s *Service) published(res *result) {
	s.hub.publish(res.events)
	if len(res.orphans) > 0 { // on every member: the one that leads next reclaims them
		s.openFiles().orphaned(res.orphans, res.events[len(res.events)-1].Seq)
	}
	if res.inode != nil && len(res.events) > 0 {
		res.inode.Seq = res.events[len(res.events)-1].Seq // stored already; only the answer carries it
	}
	if res.volume != nil {
		s.pmu.Lock()
		s.volumes[res.volume.Id] = res.volume
		s.pmu.Unlock()
	}
	s.clusterApplied(res)
	if res.revoked { // on every member: a follower that leads next refuses the same certificates
		if _, err := s.loadRevoked(); err != nil {
			s.log.Error("meta: reloading the revocation list", "err", err)
		}
	}
	if res.secrets { // on every member: any may lead next (secrets.go)
		if err := s.loadSecrets(); err != nil {
			s.log.Error("meta: loading the shared secrets", "err", err)
		}
	}
}

// kickGC wakes the collector when res queued garbage. Only once the
// command is durable: the collector deletes the needles it names.
func (s *Service) kickGC(res *result) {
	if res.garbage {
		select {
		case s.gcKick <- struct{}{}:
		default:
		}
	}
}

// rebuild replaces every cache of applied state with what the store
// holds: after a restore, the store changed under them wholesale.
// Watchers are cut off and reset when they reconnect.
func (s *Service) rebuild() error {
	s.rc.clear()
	s.reqs.forget()
	v, err := s.readView()
	if err != nil {
		return err
	}
	defer v.close()
	seq, _, err := v.get(keySeq)
	if err != nil {
		return err
	}
	s.hub.restart(u64(seq))
	vols, err := readVolumes(v)
	if err != nil {
		return err
	}
	if _, err := s.loadRevoked(); err != nil {
		return err
	}
	if err := s.loadSecrets(); err != nil {
		return err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	s.volumes = vols
	s.cl.draining = map[string]bool{}
	return s.loadCluster(v)
}

// restart forgets the ring and every watcher (each resets when it
// reconnects): the events held no longer lead to the state.
func (h *hub) restart(last uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.watchers {
		delete(h.watchers, w)
		close(w.ch)
	}
	h.head, h.n, h.last = 0, 0, last
	clear(h.ring)
}

// The snapshot format: the magic line, the applied index (8 bytes, big
// endian), then records of uvarint key length, key, uvarint value length,
// value, in key order, and a zero key length to end. The applied index is
// in the header rather than among the records so that a restore writes it
// last, once every record is in.
const snapshotMagic = "cairn meta snapshot 1\n"

// writeSnapshot writes every key of snap (a Pebble snapshot, or the DB)
// to w with the applied index it was taken at.
func writeSnapshot(w io.Writer, snap pebble.Reader, applied uint64) error {
	const op = errors.Op("meta.snapshot")
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.WriteString(snapshotMagic)
	bw.Write(be64(applied))
	it, err := snap.NewIter(nil)
	if err != nil {
		return errors.E(op, errors.IO, err)
	}
	defer it.Close()
	var lb [binary.MaxVarintLen64]byte
	for it.First(); it.Valid(); it.Next() {
		if bytes.Equal(it.Key(), keyApplied) {
			continue
		}
		bw.Write(binary.AppendUvarint(lb[:0], uint64(len(it.Key()))))
		bw.Write(it.Key())
		bw.Write(binary.AppendUvarint(lb[:0], uint64(len(it.Value()))))
		if _, err := bw.Write(it.Value()); err != nil {
			return errors.E(op, errors.IO, err)
		}
	}
	if err := it.Error(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	bw.WriteByte(0)
	if err := bw.Flush(); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// readSnapshotHeader reads the magic line and the applied index.
func readSnapshotHeader(r *bufio.Reader) (uint64, error) {
	const op = errors.Op("meta.restore")
	head := make([]byte, len(snapshotMagic)+8)
	if _, err := io.ReadFull(r, head); err != nil {
		return 0, errors.E(op, errors.Corrupt, "short snapshot header", err)
	}
	if string(head[:len(snapshotMagic)]) != snapshotMagic {
		return 0, errors.E(op, errors.Corrupt, "not a meta snapshot")
	}
	return u64(head[len(snapshotMagic):]), nil
}

// maxSnapshotRecord bounds one key or value of a snapshot: meta's records
// are small (an inode, an extent list entry); a length past it is damage.
const maxSnapshotRecord = 64 << 20

// loadSnapshot replaces the whole store with the records of r (after its
// header) and writes applied last. The store is not one batch: a crash
// midway leaves no applied index, so the next start restores again.
func loadSnapshot(db *pebble.DB, r *bufio.Reader, applied uint64) error {
	const op = errors.Op("meta.restore")
	b := db.NewBatch()
	if err := b.DeleteRange([]byte{}, []byte{0xff, 0xff, 0xff, 0xff}, nil); err != nil {
		b.Close()
		return errors.E(op, errors.IO, err)
	}
	readField := func() ([]byte, error) {
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, err
		}
		if n > maxSnapshotRecord {
			return nil, errors.E(errors.Corrupt, "snapshot record too long")
		}
		buf := make([]byte, n)
		_, err = io.ReadFull(r, buf)
		return buf, err
	}
	for {
		k, err := readField()
		if err != nil {
			b.Close()
			return errors.E(op, errors.Corrupt, "truncated snapshot", err)
		}
		if len(k) == 0 {
			break
		}
		v, err := readField()
		if err != nil {
			b.Close()
			return errors.E(op, errors.Corrupt, "truncated snapshot", err)
		}
		if bytes.Equal(k, keyApplied) {
			continue
		}
		b.Set(k, v, nil)
		if b.Len() > 8<<20 {
			if err := db.Apply(b, pebble.NoSync); err != nil {
				b.Close()
				return errors.E(op, diskKind(err), err)
			}
			b.Close()
			b = db.NewBatch()
		}
	}
	b.Set(keyApplied, be64(applied), nil)
	err := db.Apply(b, pebble.NoSync)
	b.Close()
	if err == nil {
		// Durable as tables, with or without a write-ahead log (a group
		// member's store has none).
		err = db.Flush()
	}
	if err != nil {
		return errors.E(op, diskKind(err), err)
	}
	return nil
}

// setupStateOrGroup prepares the replicated state at Open. Alone, meta
// sets up what a new store needs (a cluster id, the root user, its S3
// key) at once; in a group only the leader may propose, so each member
// that takes the lead does it then (group.takeOver).
func (s *Service) setupStateOrGroup() error {
	if s.cfg.Group == nil {
		return s.setupState()
	}
	return s.startGroup(*s.cfg.Group)
}

func (s *Service) setupState() error {
	if err := s.seedSecrets(); err != nil { // first: setupS3 seals with the group's key
		return err
	}
	if err := s.setupClusterID(); err != nil {
		return err
	}
	if err := s.setupRoot(); err != nil {
		return err
	}
	return s.setupS3()
}

// readVolumes reads the volumes (v/), which meta keeps in memory.
func readVolumes(v *view) (map[uint32]*metapb.Volume, error) {
	vols := map[uint32]*metapb.Volume{}
	it, err := v.newIter([]byte{pVolume, '/'}, []byte{pVolume, '/' + 1})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		vol := &metapb.Volume{}
		if err := proto.Unmarshal(it.Value(), vol); err != nil {
			return nil, errors.E(errors.Op("meta.load"), errors.Corrupt, err)
		}
		vols[vol.Id] = vol
	}
	return vols, it.Error()
}
