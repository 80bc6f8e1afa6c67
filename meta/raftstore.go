package meta

import (
	"bytes"
	"encoding/binary"
	stderrors "errors"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"cairn/errors"
)

// raftStore is the Raft log and the Raft stable store (term, vote) in a
// Pebble of their own, beside the state machine's. Pebble rather than
// raft-boltdb: raft-boltdb/v2 v2.3.1 does not build against raft v1.8.0
// (it imports go-metrics/compat, which go-metrics v0.7.0 dropped), and
// Pebble's write-ahead log already gives what a log needs: appends in one
// synced batch, and truncation of either end as one range delete.
//
// Keys: 'l' + the big-endian index for entries, 's' + the name for the
// stable store's values.
type raftStore struct {
	db *pebble.DB
}

var (
	_ raft.LogStore    = (*raftStore)(nil)
	_ raft.StableStore = (*raftStore)(nil)
)

// errStableNotFound is what raft expects of a stable store's missing key:
// it compares the message, "not found".
var errStableNotFound = stderrors.New("not found")

func openRaftStore(dir string, log *slog.Logger) (*raftStore, error) {
	db, err := pebble.Open(filepath.Join(dir, "log"), &pebble.Options{Logger: quietLogger{log}})
	if err != nil {
		return nil, errors.E(errors.Op("meta.openRaftStore"), errors.IO, errors.Path(dir), err)
	}
	return &raftStore{db: db}, nil
}

func (s *raftStore) Close() error { return s.db.Close() }

func logKey(i uint64) []byte { return binary.BigEndian.AppendUint64([]byte{'l'}, i) }

func stableKey(k []byte) []byte { return append([]byte{'s'}, k...) }

// edge returns the first (last false) or last index of the log, 0 when
// it is empty.
func (s *raftStore) edge(last bool) (uint64, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{'l'}, UpperBound: []byte{'l' + 1}})
	if err != nil {
		return 0, err
	}
	defer it.Close()
	ok := it.First()
	if last {
		ok = it.Last()
	}
	if !ok {
		return 0, it.Error()
	}
	return binary.BigEndian.Uint64(it.Key()[1:]), nil
}

func (s *raftStore) FirstIndex() (uint64, error) { return s.edge(false) }
func (s *raftStore) LastIndex() (uint64, error)  { return s.edge(true) }

// An entry is encoded as term, type, appended-at (Unix ns) and the
// lengths of data and extensions as uvarints, then data and extensions.
func encodeLog(l *raft.Log) []byte {
	b := make([]byte, 0, 32+len(l.Data)+len(l.Extensions))
	b = binary.AppendUvarint(b, l.Term)
	b = binary.AppendUvarint(b, uint64(l.Type))
	var at int64
	if !l.AppendedAt.IsZero() {
		at = l.AppendedAt.UnixNano()
	}
	b = binary.AppendVarint(b, at)
	b = binary.AppendUvarint(b, uint64(len(l.Data)))
	b = binary.AppendUvarint(b, uint64(len(l.Extensions)))
	b = append(b, l.Data...)
	return append(b, l.Extensions...)
}

func decodeLog(index uint64, b []byte, l *raft.Log) error {
	r := bytes.NewReader(b)
	var f [5]uint64
	for i := range f {
		var err error
		if i == 2 {
			var v int64
			v, err = binary.ReadVarint(r)
			f[i] = uint64(v)
		} else {
			f[i], err = binary.ReadUvarint(r)
		}
		if err != nil {
			return errors.E(errors.Op("meta.raftLog"), errors.Corrupt, "bad log entry", err)
		}
	}
	rest := b[len(b)-r.Len():]
	if f[3] > uint64(len(rest)) || f[4] != uint64(len(rest))-f[3] {
		return errors.E(errors.Op("meta.raftLog"), errors.Corrupt, "bad log entry length")
	}
	*l = raft.Log{Index: index, Term: f[0], Type: raft.LogType(f[1])}
	if at := int64(f[2]); at != 0 {
		l.AppendedAt = time.Unix(0, at)
	}
	if f[3] > 0 {
		l.Data = bytes.Clone(rest[:f[3]])
	}
	if f[4] > 0 {
		l.Extensions = bytes.Clone(rest[f[3]:])
	}
	return nil
}

func (s *raftStore) GetLog(index uint64, l *raft.Log) error {
	val, c, err := s.db.Get(logKey(index))
	if err == pebble.ErrNotFound {
		return raft.ErrLogNotFound
	}
	if err != nil {
		return err
	}
	defer c.Close()
	return decodeLog(index, val, l)
}

func (s *raftStore) StoreLog(l *raft.Log) error { return s.StoreLogs([]*raft.Log{l}) }

// StoreLogs appends entries in one synced batch: Raft acknowledges them
// to the leader only once they are durable.
func (s *raftStore) StoreLogs(logs []*raft.Log) error {
	b := s.db.NewBatch()
	defer b.Close()
	for _, l := range logs {
		if err := b.Set(logKey(l.Index), encodeLog(l), nil); err != nil {
			return err
		}
	}
	return s.db.Apply(b, pebble.Sync)
}

func (s *raftStore) DeleteRange(min, max uint64) error {
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(logKey(min), logKey(max+1), nil); err != nil {
		return err
	}
	return s.db.Apply(b, pebble.Sync)
}

func (s *raftStore) Set(key, val []byte) error {
	return s.db.Set(stableKey(key), val, pebble.Sync)
}

func (s *raftStore) Get(key []byte) ([]byte, error) {
	val, c, err := s.db.Get(stableKey(key))
	if err == pebble.ErrNotFound {
		return nil, errStableNotFound
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return bytes.Clone(val), nil
}

func (s *raftStore) SetUint64(key []byte, val uint64) error { return s.Set(key, be64(val)) }

func (s *raftStore) GetUint64(key []byte) (uint64, error) {
	val, err := s.Get(key)
	if err != nil {
		return 0, err
	}
	if len(val) != 8 {
		return 0, errors.E(errors.Op("meta.raftStable"), errors.Corrupt, "bad uint64 value")
	}
	return u64(val), nil
}
