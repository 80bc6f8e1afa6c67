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

// applyEntry applies cmd as log entry index (0: no log, a meta alone) and
// makes it visible, durable when sync is set. The command's own error
// (a name taken, a file missing) is the entry's answer, returned in
// cmdErr; the entry is applied either way, and err reports a store that
// could not take it. Called with s.mu held.
//
// A command whose request id the store remembers (dedup.go) changes
// nothing but the applied index: its answer is the one remembered, and
// nothing is published again.
func (s *Service) applyEntry(cmd *metapb.Command, index uint64, sync bool) (res *result, cmdErr, err error) {
	b := s.db.NewIndexedBatch()
	dup := false
	if len(cmd.RequestId) > 0 {
		if res, cmdErr, dup, err = recallOutcome(b, cmd.RequestId); err != nil {
			b.Close()
			return nil, nil, err
		}
	}
	if !dup {
		res, cmdErr = applyCommand(s.db, b, cmd, s.rc)
	}
	if cmdErr != nil && !dup {
		b.Close()
		if index == 0 {
			return nil, cmdErr, nil
		}
		b = s.db.NewIndexedBatch() // only the index moves, and the outcome
		res = nil
	}
	if len(cmd.RequestId) > 0 && !dup {
		if err := rememberOutcome(b, cmd.RequestId, res, cmdErr); err != nil {
			b.Close()
			return nil, nil, err
		}
	}
	if index != 0 {
		if err := b.Set(keyApplied, be64(index), nil); err != nil {
			b.Close()
			return nil, nil, errors.E(errors.Op("meta.apply"), errors.IO, err)
		}
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
		return nil, nil, errors.E(errors.Op("meta.apply"), diskKind(err), err)
	}
	if res != nil && !dup {
		s.published(res)
		if index != 0 || sync {
			s.kickGC(res)
		}
	}
	return res, cmdErr, nil
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
	err := db.Apply(b, pebble.Sync)
	b.Close()
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
