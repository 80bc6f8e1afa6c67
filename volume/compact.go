package volume

import (
	"bufio"
	"fmt"
	"io"
	"os"

	"cairn/errors"
	"cairn/vfs"
)

// Compact rewrites the volume without deleted and replaced needles.
// Readers are never blocked: they keep reading the old file, which stays
// open until the last of them is done. Writers are blocked only for the
// final step, which copies what was appended during the copy and swaps
// the files.
func (v *Volume) Compact() error {
	const op errors.Op = "volume.Compact"
	v.compactMu.Lock()
	defer v.compactMu.Unlock()

	// Phase 1: a durable, indexed snapshot up to e0, copied without locks.
	v.appendMu.Lock()
	if v.closed {
		v.appendMu.Unlock()
		return errors.E(op, errors.IO, v.path(), "volume is closed")
	}
	e0, s0 := v.end, v.seq
	v.appendMu.Unlock()
	if err := v.waitSync(s0); err != nil {
		return errors.E(op, v.path(), err)
	}
	v.mu.RLock()
	live := v.idx.byOffset(e0)
	old := v.df
	old.ref()
	v.mu.RUnlock()
	defer old.unref()

	tmpDat, tmpIdx := v.datPath+".compact", v.idxPath+".compact"
	fs := v.opts.FS
	nf, err := fs.OpenFile(tmpDat, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	c := &copier{old: old.f, nf: nf, w: bufio.NewWriterSize(io.NewOffsetWriter(nf, superSize), 1<<20), pos: superSize}
	ok := false
	defer func() {
		if !ok {
			nf.Close()
			fs.Remove(tmpDat)
			fs.Remove(tmpIdx)
		}
	}()
	for _, s := range live {
		if err := c.copyRecord(int64(s.off)*8, recordSize(int64(s.size))); err != nil {
			return errors.E(op, v.path(), err)
		}
	}

	// Phase 2: writers wait while the tail written since e0 is copied.
	v.appendMu.Lock()
	defer v.appendMu.Unlock()
	if v.closed {
		return errors.E(op, errors.IO, v.path(), "volume is closed")
	}
	if err := v.waitSync(v.seq); err != nil {
		return errors.E(op, v.path(), err)
	}
	for pos := e0; pos < v.end; {
		hb := make([]byte, headerSize)
		if _, err := old.f.ReadAt(hb, pos); err != nil {
			return errors.E(op, errors.IO, v.path(), err)
		}
		h, err := parseHeader(hb)
		if err != nil {
			return errors.E(op, errors.Corrupt, v.path(), fmt.Errorf("record at %d: %w", pos, err))
		}
		rs := h.recordSize()
		// A tombstone is kept only if the needle it kills was copied;
		// otherwise nothing in the new file needs killing.
		if h.flags == flagData || c.has(h.key) {
			if err := c.copyRecord(pos, rs); err != nil {
				return errors.E(op, v.path(), err)
			}
		}
		pos += rs
	}
	if err := c.w.Flush(); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	sb := v.sb
	sb.instance = randUint64()
	sb.keyFloor = v.nextKey // keys of dropped needles are never reused
	if _, err := nf.WriteAt(sb.encode(), 0); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	if err := nf.Sync(); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	if err := vfs.WriteFileSync(fs, tmpIdx, append(idxHeader(sb.instance), c.ents...), 0o644); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	// The .dat is renamed first. A crash between the renames leaves an
	// .idx whose instance does not match: Open then rebuilds it by scan.
	if err := fs.Rename(tmpDat, v.datPath); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	if err := fs.Rename(tmpIdx, v.idxPath); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	if err := fs.SyncDir(v.dir); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	ok = true
	idxf, err := fs.OpenFile(v.idxPath, os.O_RDWR, 0)
	if err != nil {
		// The volume is complete on disk; only this process lost its
		// .idx handle. Stop writes rather than lose index entries.
		v.closed = true
		return errors.E(op, errors.IO, v.path(), err)
	}

	v.mu.Lock()
	v.df = newDataFile(nf, sb.instance)
	v.idx = c.idx
	v.garbage = c.garbage
	oldIdx := v.idxf
	v.idxf = idxf
	v.idxEnd = int64(idxHdrSize + len(c.ents))
	v.mu.Unlock()
	oldIdx.Close()
	old.unref() // the volume's reference; readers still holding one finish first
	v.sb = sb
	v.end = c.pos
	v.size.Store(c.pos)
	return nil
}

// copier appends verified records to the new file of a compaction and
// builds its index.
type copier struct {
	old, nf vfs.File
	w       *bufio.Writer
	pos     int64
	buf     []byte
	idx     index
	garbage int64
	ents    []byte
}

func (c *copier) has(key uint64) bool {
	_, ok := c.idx.get(key)
	return ok
}

func (c *copier) copyRecord(off, rs int64) error {
	if int64(cap(c.buf)) < rs {
		c.buf = make([]byte, rs)
	}
	rec := c.buf[:rs]
	if _, err := c.old.ReadAt(rec, off); err != nil {
		return errors.E(errors.IO, err)
	}
	// Verify on the way, so that a damaged needle stops compaction (and is
	// reported for repair) instead of being carried silently into a file
	// that looks freshly written.
	h, _, err := verifyRecord(rec)
	if err != nil {
		return errors.E(errors.Corrupt, fmt.Errorf("record at %d: %w", off, err))
	}
	if _, err := c.w.Write(rec); err != nil {
		return errors.E(errors.IO, err)
	}
	var e [idxEntrySize]byte
	size := h.size
	if h.flags == flagTomb {
		size = idxTombLen
		c.garbage += headerSize
		if old, ok := c.idx.del(h.key); ok {
			c.garbage += recordSize(int64(old.size))
		}
	} else if old, ok := c.idx.put(newSlot(h.key, c.pos, h.size)); ok {
		c.garbage += recordSize(int64(old.size))
	}
	putIdxEntry(e[:], h.key, c.pos, size)
	c.ents = append(c.ents, e[:]...)
	c.pos += rs
	return nil
}
