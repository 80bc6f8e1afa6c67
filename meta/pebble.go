package meta

import (
	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// storeOptions tunes Pebble for meta's load: many small point reads inside
// every mutation (is the name taken, the parent inode, the next inode
// number) and whole-path resolutions.
//
// Pebble's defaults are an 8 MiB block cache and no filters. Measured under
// a 4 KiB PUT load, a third of meta's CPU went to Batch.Get descending
// every L0 table and snappy-decoding blocks it had just evicted. Bloom
// filters on every level let a point read of a missing key (each create
// asks whether the name exists) skip tables without reading them, and a
// larger cache keeps the hot blocks decoded. A 64 MiB memtable (the default
// MemTableSize) makes fewer, larger L0 flushes.
func storeOptions(cfg Config) *pebble.Options {
	o := &pebble.Options{
		Logger:       quietLogger{cfg.Logger},
		CacheSize:    cfg.BlockCacheSize,
		MemTableSize: uint64(cfg.MemTableSize),
		FS:           cfg.space.fs(), // a reserve against a full disk (storespace.go)
	}
	// A member of a group writes no write-ahead log of its own: the Raft
	// log (raftstore.go) is the synced copy of every command, and the
	// applied index, written in each command's batch, tells a store that
	// lost its memtable in a crash which entries to apply again (see
	// raftFSM.ApplyBatch). The store's WAL only wrote every command a
	// second time, on the same disk as the log's fsyncs.
	o.DisableWAL = cfg.Group != nil
	if cfg.wrapStoreFS != nil {
		o.FS = cfg.wrapStoreFS(o.FS)
	}
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	return o
}
