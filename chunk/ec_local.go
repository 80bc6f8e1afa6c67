package chunk

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"cairn/ec"
	"cairn/errors"
	"cairn/volume"
)

// Local reads of erasure-coded volumes (local.go has the protocol). A
// needle whose record (data and block checksums) lies in one cell of the
// one shard of its volume this server holds is, in that shard file, laid
// out as in a .dat: the server locates it there and hands out the shard
// file, and a client on this host reads and verifies it as it does a
// replicated needle. Any other needle (in another shard, across cells, a
// server holding several shards of the volume) is located as Unavailable:
// the client reads it over HTTP, where the server fetches or rebuilds
// what is not here. Packing keeps most records within a cell
// (packRecords).
//
// A shard file's instance, for the client's cache of files, is its inode
// number: a compaction's switch renames a new file over it.

// shardHeaderSize is where a shard file's cells begin (package ec).
const shardHeaderSize = 32

// shardInstance is the instance local readers know shard file fi by.
func shardInstance(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// ecLocal is the only local shard of ev, or nil. Called with s.ec.mu.
func ecLocal(ev *ecVol) (int, *localShard) {
	if len(ev.shards) != 1 {
		return 0, nil
	}
	for i, ls := range ev.shards {
		return i, ls
	}
	return 0, nil
}

// ecLocateLocal is locate for a needle of erasure-coded volume ev.
func (s *Store) ecLocateLocal(ev *ecVol, key uint64) (volume.Location, error) {
	const op errors.Op = "chunk.Locate"
	s.ec.mu.RLock()
	defer s.ec.mu.RUnlock()
	loc, ok := ev.locate(key)
	if !ok {
		return loc, errors.E(op, errors.NotExist, volPath(ev.vid), "no such needle")
	}
	rec := loc.Size + 4*((loc.Size+volume.BlockSize-1)/volume.BlockSize)
	i, ls := ecLocal(ev)
	pcs := ev.layout.Pieces(loc.Data, rec)
	if ls == nil || len(pcs) != 1 || pcs[0].Shard != i || shardInstance(ls.fi) == 0 {
		return loc, errors.E(op, errors.Unavailable, volPath(ev.vid), "erasure-coded needle not in a local cell: read it over HTTP")
	}
	at, err := ls.s.FileOffset(pcs[0].Off, rec)
	if err != nil {
		return loc, errors.E(op, errors.Unavailable, volPath(ev.vid), err)
	}
	return volume.Location{Instance: shardInstance(ls.fi), Data: at, Size: loc.Size}, nil
}

// ecShare is share for an erasure-coded volume: its local shard file.
func (s *Store) ecShare(ev *ecVol) (*os.File, uint64, func(), error) {
	s.ec.mu.RLock()
	_, ls := ecLocal(ev)
	s.ec.mu.RUnlock()
	if ls == nil {
		return nil, 0, nil, errors.E(errors.Op("chunk.Share"), errors.Unavailable, volPath(ev.vid), "no single local shard: read it over HTTP")
	}
	// The file may be closed by a drop meanwhile: the client checks what
	// it receives (checkSharedShard), and falls back to HTTP.
	return ls.f, shardInstance(ls.fi), func() {}, nil
}

// checkShared verifies that f, received from the server, is the file of
// volume vid and instance it said: a .dat (its superblock), or a shard
// file (its header, and its inode). shard says which.
func checkShared(f *os.File, vid uint32, instance uint64) (shard bool, err error) {
	const op errors.Op = "chunk.checkShared"
	b := make([]byte, shardHeaderSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		return false, errors.E(op, errors.IO, err)
	}
	h, err := ec.ParseHeader(b)
	if err != nil {
		return false, volume.CheckShared(f, vid, instance)
	}
	fi, err := f.Stat()
	if err != nil {
		return true, errors.E(op, errors.IO, err)
	}
	if h.Volume != vid || shardInstance(fi) != instance {
		return true, errors.Errorf(op, errors.Stale, "shard file of volume %d (inode %d), want volume %d (inode %d)", h.Volume, shardInstance(fi), vid, instance)
	}
	return true, nil
}

// readShardRecord reads the record of needle key at loc in shard file f
// whole (one pread) and writes bytes [off, off+length) of it to w once
// the blocks they lie in verify. A record that fails is Unavailable with
// nothing written: the caller reads it over HTTP, where the server
// rebuilds it from the other shards (and scrubs this one).
func readShardRecord(f io.ReaderAt, key uint64, loc volume.Location, off, length int64, w io.Writer) (int64, error) {
	const op errors.Op = "chunk.readShardRecord"
	// A location from the server, checked as volume.Location.Validate
	// does for a .dat, except that a record may begin right after the
	// shard file's header (a cell's first record).
	if start, _ := volume.RecordSpan(loc.Data, loc.Size); start < shardHeaderSize || start%8 != 0 || loc.Size < 0 {
		return 0, errors.E(op, errors.Invalid, fmt.Sprintf("impossible needle location in a shard: data at %d, %d bytes", loc.Data, loc.Size))
	}
	rec := loc.Size + 4*((loc.Size+volume.BlockSize-1)/volume.BlockSize)
	if rec > prefetchMax {
		return 0, errors.E(op, errors.Unavailable, "record too large to read whole: read it over HTTP")
	}
	bp := getECBuf(rec)
	defer putECBuf(bp)
	if _, err := f.ReadAt(*bp, loc.Data); err != nil {
		return 0, errors.E(op, errors.Unavailable, err)
	}
	n, err := volume.WriteRecord(*bp, key, loc.Size, off, length, w)
	if errors.Is(errors.Corrupt, err) {
		return 0, errors.E(op, errors.Unavailable, err)
	}
	return n, err
}

// sliceWriter writes into p from its start.
type sliceWriter struct{ p []byte }

func (w *sliceWriter) Write(b []byte) (int, error) {
	n := copy(w.p, b)
	w.p = w.p[n:]
	if n < len(b) {
		return n, io.ErrShortWrite
	}
	return n, nil
}
