package volume

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"cairn/errors"
	"cairn/vfs"
)

// Defaults of Options.
const (
	DefaultMaxSize   = int64(8) << 30
	DefaultMaxNeedle = int64(64) << 20
)

// Options tune one volume. The zero value means the defaults.
type Options struct {
	// MaxSize is the size past which Append refuses new needles with
	// errors.ReadOnly. Default 8 GiB; at most 32 GiB (offsets are kept in
	// 8-byte units in 32 bits).
	MaxSize int64
	// MaxNeedle bounds one needle's data. Default 64 MiB; at most 1 GiB.
	MaxNeedle int64
	// FS is the file system the volume's files live on. Default
	// vfs.Default, the operating system's; tests put a failing disk here.
	FS vfs.FS
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.MaxSize == 0 {
		o.MaxSize = DefaultMaxSize
	}
	if o.MaxNeedle == 0 {
		o.MaxNeedle = DefaultMaxNeedle
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
}

// Validate reports options that cannot work.
func (o Options) Validate() error {
	const op errors.Op = "volume.Options"
	switch {
	case o.MaxSize <= superSize || o.MaxSize > maxAddressable-hardMaxNeedle:
		return errors.E(op, errors.Invalid, fmt.Sprintf("MaxSize %d out of range (%d..%d]", o.MaxSize, superSize, maxAddressable-hardMaxNeedle))
	case o.MaxNeedle <= 0 || o.MaxNeedle > hardMaxNeedle:
		return errors.E(op, errors.Invalid, fmt.Sprintf("MaxNeedle %d out of range (0..%d]", o.MaxNeedle, hardMaxNeedle))
	}
	return nil
}

// Stats describes a volume at one moment.
type Stats struct {
	ID        uint32
	Gen       uint64
	Size      int64  // bytes in the .dat file
	Garbage   int64  // bytes of deleted or replaced records (reclaimed by Compact)
	Needles   int64  // live needles
	ReadOnly  bool   // marked read-only (a full volume is not marked: it still takes deletes)
	Full      bool   // Size has reached MaxSize
	Syncs     uint64 // fdatasync calls since open (group commit makes this < writes)
	Corrupt   uint64 // reads refused because a checksum did not match
	Truncated int64  // bytes of torn tail cut off when the volume was opened
	Damaged   int64  // damaged records found inside the file at open (kept; reads say Corrupt)
	// NoSpace: the disk refused a write (ENOSPC) within the last
	// noSpaceHold; new needles go elsewhere until then.
	NoSpace bool
	// Failed: an fdatasync failed. What it covered may not be on disk, so
	// the volume takes no more writes until it is opened again (reads of
	// what was synced before go on).
	Failed bool
}

// GarbageRatio is Garbage over the bytes of records in the file.
func (s Stats) GarbageRatio() float64 {
	if s.Size <= superSize {
		return 0
	}
	return float64(s.Garbage) / float64(s.Size-superSize)
}

// dataFile is a reference-counted .dat handle: compaction swaps in a new
// file while reads on the old one finish; the last reader closes it.
type dataFile struct {
	f        vfs.File
	instance uint64 // the superblock's: tells this file from its compacted successor
	refs     atomic.Int64
}

func newDataFile(f vfs.File, instance uint64) *dataFile {
	d := &dataFile{f: f, instance: instance}
	d.refs.Store(1) // the volume's own reference
	return d
}

func (d *dataFile) ref() { d.refs.Add(1) }

func (d *dataFile) unref() {
	if d.refs.Add(-1) == 0 {
		d.f.Close()
	}
}

// pendingRec is a record written to the .dat file but not yet covered by
// an fdatasync; it is published to the index after the sync.
type pendingRec struct {
	seq   uint64
	key   uint64
	off   int64
	size  uint32
	flags byte
}

// Volume is one open volume. All methods are safe for concurrent use.
type Volume struct {
	id      uint32
	dir     string
	datPath string
	idxPath string
	opts    Options

	// appendMu orders writes: key assignment, offset, the pwrite itself.
	appendMu sync.Mutex
	end      int64 // next record offset
	nextKey  uint64
	seq      uint64 // records written
	sb       superblock
	closed   bool

	// pendMu guards the group-commit state. Lock order: appendMu, pendMu, mu.
	pendMu  sync.Mutex
	cond    *sync.Cond
	pending []pendingRec
	syncing bool   // a leader is syncing; others wait on cond
	synced  uint64 // records durable and published
	syncErr error  // a failed fdatasync: the volume takes no more writes
	waiters int    // goroutines in waitSync waiting on a leader (tests watch it)

	// mu guards what readers look at: the file and the index.
	mu      sync.RWMutex
	df      *dataFile
	idx     index
	garbage int64

	// The .idx file is written only by the sync leader, or by compaction
	// and Close once no sync can be running.
	idxf   vfs.File
	idxEnd int64

	compactMu sync.Mutex

	size      atomic.Int64
	maxSize   atomic.Int64 // opts.MaxSize until SetMaxSize
	gen       atomic.Uint64
	readOnly  atomic.Bool
	noSpace   atomic.Int64 // unix nanoseconds until which new needles are refused (ENOSPC)
	failed    atomic.Bool  // syncErr is set
	syncs     atomic.Uint64
	corrupt   atomic.Uint64
	truncated int64
	damaged   int64
}

// FileNames returns the .dat and .idx paths of volume id in dir.
func FileNames(dir string, id uint32) (dat, idx string) {
	base := filepath.Join(dir, strconv.FormatUint(uint64(id), 10))
	return base + ".dat", base + ".idx"
}

func (v *Volume) path() errors.Path { return errors.Path(strconv.FormatUint(uint64(v.id), 10)) }

func (v *Volume) keyPath(key uint64) errors.Path {
	return errors.Path(strconv.FormatUint(uint64(v.id), 10) + "/" + strconv.FormatUint(key, 10))
}

func randUint64() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}

// Create makes a new empty volume id of generation gen in dir and opens it.
// It is errors.Exist if the volume is already there.
func Create(dir string, id uint32, gen uint64, opts Options) (*Volume, error) {
	const op errors.Op = "volume.Create"
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, errors.E(op, err)
	}
	dat, idx := FileNames(dir, id)
	fs := opts.FS
	if _, err := fs.Stat(dat); err == nil {
		return nil, errors.E(op, errors.Exist, errors.Path(strconv.FormatUint(uint64(id), 10)))
	}
	sb := superblock{version: superVersion, id: id, gen: gen, keyFloor: 1, instance: randUint64(), created: time.Now().UnixNano()}
	// Write the .idx first and the .dat by rename last: a crash leaves
	// either no volume or a complete empty one.
	if err := vfs.WriteFileSync(fs, idx, idxHeader(sb.instance), 0o644); err != nil {
		return nil, errors.E(op, ioKind(err), err)
	}
	if err := vfs.WriteFileSync(fs, dat+".tmp", sb.encode(), 0o644); err != nil {
		return nil, errors.E(op, ioKind(err), err)
	}
	if err := fs.Rename(dat+".tmp", dat); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	if err := fs.SyncDir(dir); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return Open(dir, id, opts)
}

// Open opens volume id in dir: it loads the .idx, then verifies every
// record after the last indexed one and cuts the file at the first that
// does not verify (the torn tail of a crash).
func Open(dir string, id uint32, opts Options) (*Volume, error) {
	const op errors.Op = "volume.Open"
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, errors.E(op, err)
	}
	dat, idx := FileNames(dir, id)
	// Leftovers of a compaction that did not finish.
	opts.FS.Remove(dat + ".compact")
	opts.FS.Remove(idx + ".compact")
	v := &Volume{id: id, dir: dir, datPath: dat, idxPath: idx, opts: opts}
	v.maxSize.Store(opts.MaxSize)
	v.cond = sync.NewCond(&v.pendMu)
	f, err := opts.FS.OpenFile(dat, os.O_RDWR, 0)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, errors.E(op, errors.NotExist, v.path(), err)
		}
		return nil, errors.E(op, errors.IO, v.path(), err)
	}
	if err := v.load(f); err != nil {
		f.Close()
		if v.idxf != nil {
			v.idxf.Close()
		}
		return nil, errors.E(op, v.path(), err)
	}
	return v, nil
}

func (v *Volume) load(f vfs.File) error {
	sbuf := make([]byte, superSize)
	if _, err := f.ReadAt(sbuf, 0); err != nil {
		return errors.E(errors.Corrupt, fmt.Errorf("reading superblock: %w", err))
	}
	sb, err := parseSuperblock(sbuf)
	if err != nil {
		return errors.E(errors.Corrupt, err)
	}
	if sb.id != v.id {
		return errors.E(errors.Corrupt, fmt.Sprintf("file holds volume %d", sb.id))
	}
	fi, err := f.Stat()
	if err != nil {
		return errors.E(errors.IO, err)
	}
	datSize := fi.Size()
	v.sb = sb
	v.df = newDataFile(f, sb.instance)
	maxKey := uint64(0) // the largest sequence number seen
	apply := func(key uint64, off int64, size uint32, flags byte) {
		v.apply(key, off, size, flags)
		seq, _ := splitKey(key)
		maxKey = max(maxKey, uint64(seq))
	}

	// The .idx is a hint that saves reading the .dat: each entry must lie
	// after the previous one and inside the file, and the last one's header
	// must match, or the index is rebuilt from the .dat.
	end := int64(superSize)
	keep := int64(idxHdrSize)
	raw, err := vfs.ReadFile(v.opts.FS, v.idxPath)
	idxOK := err == nil && len(raw) >= idxHdrSize && [8]byte(raw[:8]) == idxMagic &&
		binary.LittleEndian.Uint64(raw[8:]) == sb.instance
	if idxOK {
		var last pendingRec
		for b := raw[idxHdrSize:]; len(b) >= idxEntrySize; b = b[idxEntrySize:] {
			key := binary.LittleEndian.Uint64(b)
			off := int64(binary.LittleEndian.Uint32(b[8:])) * 8
			size := binary.LittleEndian.Uint32(b[12:])
			flags, rs := flagData, int64(0)
			if size == idxTombLen {
				flags, size, rs = flagTomb, 0, headerSize
			} else if int64(size) > hardMaxNeedle {
				break
			} else {
				rs = recordSize(int64(size))
			}
			if uint32(key) == 0 || off < end || off+rs > datSize {
				break
			}
			apply(key, off, size, flags)
			last = pendingRec{key: key, off: off, size: size, flags: flags}
			end = off + rs
			keep += idxEntrySize
		}
		if end > superSize {
			hb := make([]byte, headerSize)
			_, err := f.ReadAt(hb, last.off)
			h, perr := parseHeader(hb)
			if err != nil || perr != nil || h.key != last.key || h.size != last.size || h.flags != last.flags {
				idxOK = false
			}
		}
	}
	if !idxOK {
		v.idx, v.garbage, maxKey = index{}, 0, 0
		end, keep = superSize, 0
	}

	// Verify everything after the indexed part, record by record. A record
	// whose header is good but whose data is not is kept (reads of it will
	// say Corrupt, and repair can fix it) if a good record follows: that is
	// bit rot in the middle, and cutting there would lose every needle after
	// it. Otherwise it is the torn tail of a crash and is cut off.
	var scanned []byte
	addScanned := func(h header, at int64) {
		apply(h.key, at, h.size, h.flags)
		var e [idxEntrySize]byte
		size := h.size
		if h.flags == flagTomb {
			size = idxTombLen
		}
		putIdxEntry(e[:], h.key, at, size)
		scanned = append(scanned, e[:]...)
	}
	br := bufio.NewReaderSize(io.NewSectionReader(f, end, datSize-end), 1<<20)
	buf := make([]byte, 0, 1<<20)
	pos := end
	var suspect *pendingRec // a damaged record waiting for a good successor
	for datSize-pos >= headerSize {
		buf = buf[:headerSize]
		if _, err := io.ReadFull(br, buf); err != nil {
			break
		}
		h, err := parseHeader(buf)
		if err != nil {
			break
		}
		rs := h.recordSize()
		if pos+rs > datSize {
			break
		}
		if int64(cap(buf)) < rs {
			nb := make([]byte, rs)
			copy(nb, buf)
			buf = nb
		}
		buf = buf[:rs]
		if _, err := io.ReadFull(br, buf[headerSize:]); err != nil {
			break
		}
		if _, _, err := verifyRecord(buf); err != nil {
			if suspect != nil {
				break
			}
			suspect = &pendingRec{key: h.key, off: pos, size: h.size, flags: h.flags}
			pos += rs
			continue
		}
		if suspect != nil {
			addScanned(header{flags: suspect.flags, key: suspect.key, size: suspect.size}, suspect.off)
			v.damaged++
			suspect = nil
		}
		addScanned(h, pos)
		pos += rs
	}
	if suspect != nil {
		pos = suspect.off
	}
	if pos < datSize {
		if err := f.Truncate(pos); err != nil {
			return errors.E(errors.IO, err)
		}
		if err := f.Datasync(); err != nil {
			return errors.E(errors.IO, err)
		}
		v.truncated = datSize - pos
	}

	idxf, err := v.opts.FS.OpenFile(v.idxPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return errors.E(errors.IO, err)
	}
	v.idxf = idxf
	if keep == 0 {
		scanned = append(idxHeader(sb.instance), scanned...)
	}
	if err := idxf.Truncate(keep); err != nil {
		return errors.E(errors.IO, err)
	}
	if len(scanned) > 0 {
		if _, err := idxf.WriteAt(scanned, keep); err != nil {
			return errors.E(errors.IO, err)
		}
		if err := idxf.Sync(); err != nil {
			return errors.E(errors.IO, err)
		}
	}
	v.idxEnd = keep + int64(len(scanned))
	v.end = pos
	v.nextKey = max(sb.keyFloor, maxKey+1, 1)
	v.size.Store(pos)
	v.gen.Store(sb.gen)
	v.readOnly.Store(sb.readOnly)
	return nil
}

// apply records a durable record in the index and garbage count. The
// caller holds mu (or owns v exclusively).
func (v *Volume) apply(key uint64, off int64, size uint32, flags byte) {
	if flags == flagTomb {
		v.garbage += headerSize
		if old, ok := v.idx.del(key); ok {
			v.garbage += recordSize(int64(old.size))
		}
		return
	}
	if old, ok := v.idx.put(newSlot(key, off, size)); ok {
		v.garbage += recordSize(int64(old.size))
	}
}

// ID is the volume's id.
func (v *Volume) ID() uint32 { return v.id }

// Gen is the volume's generation.
func (v *Volume) Gen() uint64 { return v.gen.Load() }

// Stats returns the volume's current figures.
func (v *Volume) Stats() Stats {
	v.mu.RLock()
	garbage, live := v.garbage, v.idx.live
	v.mu.RUnlock()
	size := v.size.Load()
	return Stats{
		ID: v.id, Gen: v.gen.Load(), Size: size, Garbage: garbage, Needles: int64(live),
		ReadOnly: v.readOnly.Load(), Full: size >= v.maxSize.Load(),
		Syncs: v.syncs.Load(), Corrupt: v.corrupt.Load(), Truncated: v.truncated, Damaged: v.damaged,
		NoSpace: time.Now().UnixNano() < v.noSpace.Load(), Failed: v.failed.Load(),
	}
}

// Append stores data as a new needle and returns its key, the next in this
// volume's sequence. It returns once the needle is durable.
func (v *Volume) Append(gen uint64, data []byte) (uint64, error) {
	return v.write("volume.Append", gen, 0, flagData, data, writeOpts{})
}

// AppendKey stores data under a key the caller chose (a replica writes the
// primary's key); an existing needle with that key is replaced.
func (v *Volume) AppendKey(gen, key uint64, data []byte) error {
	if uint32(key) == 0 {
		return errors.E(errors.Op("volume.AppendKey"), errors.Invalid, v.path(), "key 0 is reserved")
	}
	_, err := v.write("volume.AppendKey", gen, key, flagData, data, writeOpts{})
	return err
}

// Delete removes needle key by appending a tombstone; it returns once the
// tombstone is durable. Deleting a missing needle is not an error.
func (v *Volume) Delete(gen, key uint64) error {
	_, err := v.write("volume.Delete", gen, key, flagTomb, nil, writeOpts{})
	return err
}

// smallRecord is the size up to which a record is assembled in one buffer
// and written with one pwrite; larger ones are written in three pieces
// straight from the caller's data rather than copied.
const smallRecord = 1 << 20

var recPool = sync.Pool{New: func() any { b := make([]byte, smallRecord); return &b }}

// writeOpts are the variations of write used by replication (replica.go).
type writeOpts struct {
	// started is called with the key once the record is written, before
	// the fdatasync: a primary starts its replicas' writes then.
	started func(key uint64)
	// force writes past the read-only mark and MaxSize: a repair restores
	// a needle the volume already held.
	force bool
}

func (v *Volume) write(op errors.Op, gen, key uint64, flags byte, data []byte, o writeOpts) (uint64, error) {
	n := int64(len(data))
	if n > v.opts.MaxNeedle {
		return 0, errors.E(op, errors.TooLarge, v.keyPath(key), fmt.Sprintf("needle of %d bytes over the limit of %d", n, v.opts.MaxNeedle))
	}
	rs := recordSize(n)
	sumsLen := 4 * nblocks(n)

	// Everything proportional to the data happens before the lock: the
	// copy into the record buffer and the block checksums (without the key,
	// which is folded in under the lock).
	var rec, tail []byte
	var bp *[]byte
	if rs <= smallRecord {
		bp = recPool.Get().(*[]byte)
		defer recPool.Put(bp)
		rec = (*bp)[:rs]
		copy(rec[headerSize:], data)
		tail = rec[headerSize+n:]
	} else {
		tail = make([]byte, rs-headerSize-n)
	}
	for i := int64(0); i < nblocks(n); i++ {
		blk := data[i*BlockSize : min((i+1)*BlockSize, n)]
		binary.LittleEndian.PutUint32(tail[4*i:], crc32.Checksum(blk, castagnoli))
	}
	clear(tail[sumsLen:])

	var cookie uint32
	if key == 0 {
		cookie = newCookie()
	}

	v.appendMu.Lock()
	if err := v.checkWritable(op, gen, key, flags, rs, o.force); err != nil {
		v.appendMu.Unlock()
		if err == errNoop {
			return key, nil
		}
		return 0, err
	}
	if key == 0 {
		if v.nextKey > math.MaxUint32 {
			v.appendMu.Unlock()
			return 0, errors.E(op, errors.ReadOnly, v.path(), "volume has used every sequence number")
		}
		key = joinKey(uint32(v.nextKey), cookie)
	}
	if _, c := splitKey(key); c != 0 && v.sb.version < superVersion {
		// The first needle with a cookie in a version 1 volume: mark the
		// file version 2 first, so that no older binary misreads it.
		if err := v.writeSuper(op, func(sb *superblock) error { sb.version = superVersion; return nil }); err != nil {
			v.appendMu.Unlock()
			return 0, err
		}
	}
	for i := int64(0); i < nblocks(n); i++ {
		binary.LittleEndian.PutUint32(tail[4*i:], blockSum(binary.LittleEndian.Uint32(tail[4*i:]), key, uint32(i)))
	}
	var hdr [headerSize]byte
	putHeader(hdr[:], header{flags: flags, key: key, size: uint32(n)})
	off := v.end
	f := v.df.f
	var err error
	if rec != nil {
		copy(rec, hdr[:])
		_, err = f.WriteAt(rec, off)
	} else if _, err = f.WriteAt(hdr[:], off); err == nil {
		if _, err = f.WriteAt(data, off+headerSize); err == nil {
			_, err = f.WriteAt(tail, off+headerSize+n)
		}
	}
	if err != nil {
		// Nothing is published; the next write overwrites whatever part of
		// this record reached the file.
		v.appendMu.Unlock()
		k := ioKind(err)
		if k == errors.NoSpace {
			v.noSpace.Store(time.Now().Add(noSpaceHold).UnixNano())
		}
		return 0, errors.E(op, k, v.keyPath(key), err)
	}
	v.end += rs
	v.size.Store(v.end)
	keySeq, _ := splitKey(key)
	v.nextKey = max(v.nextKey, uint64(keySeq)+1)
	v.seq++
	seq := v.seq
	v.pendMu.Lock()
	v.pending = append(v.pending, pendingRec{seq: seq, key: key, off: off, size: uint32(n), flags: flags})
	v.pendMu.Unlock()
	v.appendMu.Unlock()
	if o.started != nil {
		o.started(key)
	}

	if err := v.waitSync(seq); err != nil {
		return 0, errors.E(op, v.keyPath(key), err)
	}
	return key, nil
}

var errNoop = errors.New("nothing to do")

// noSpaceHold is how long a volume whose disk said ENOSPC refuses new
// needles before it tries again: long enough that writers move to other
// servers (the heartbeat tells meta), short enough that freed space is used.
const noSpaceHold = 30 * time.Second

// ioKind classifies a failed disk call: a full disk is NoSpace (the writer
// goes elsewhere, the user is told the store is full), anything else IO.
func ioKind(err error) errors.Kind {
	if errors.IsErr(err, syscall.ENOSPC) {
		return errors.NoSpace
	}
	return errors.IO
}

// checkWritable is called with appendMu held.
func (v *Volume) checkWritable(op errors.Op, gen, key uint64, flags byte, rs int64, force bool) error {
	if v.closed {
		return errors.E(op, errors.IO, v.path(), "volume is closed")
	}
	v.pendMu.Lock()
	serr := v.syncErr
	v.pendMu.Unlock()
	if serr != nil {
		return errors.E(op, errors.ReadOnly, v.path(), "read-only after a failed fdatasync", serr)
	}
	if gen != v.sb.gen {
		return errors.E(op, errors.Stale, v.path(), fmt.Sprintf("generation %d, volume is at %d", gen, v.sb.gen))
	}
	if v.sb.readOnly && !force && flags != flagTomb {
		// Read-only means no new data; deletes still land, or a replica
		// that turned read-only would keep deleted needles' space forever.
		return errors.E(op, errors.ReadOnly, v.path(), "volume is marked read-only")
	}
	if flags == flagTomb {
		if !v.has(key) {
			return errNoop
		}
		// Deletes are taken past MaxSize (they are how a full volume gets
		// its space back), up to what the index can address.
		if v.end+rs > maxAddressable {
			return errors.E(op, errors.ReadOnly, v.path(), "volume is at its hard size limit")
		}
		return nil
	}
	if !force && time.Now().UnixNano() < v.noSpace.Load() {
		return errors.E(op, errors.NoSpace, v.path(), "the disk is full")
	}
	if v.end+rs > v.maxSize.Load() && !(force && v.end+rs <= maxAddressable) {
		return errors.E(op, errors.ReadOnly, v.path(), fmt.Sprintf("volume is full (%d bytes)", v.end))
	}
	return nil
}

// has reports whether key is live or about to be (written, sync pending).
// Called with appendMu held.
func (v *Volume) has(key uint64) bool {
	v.pendMu.Lock()
	found, live := false, false
	for _, p := range v.pending {
		if p.key == key {
			found, live = true, p.flags == flagData
		}
	}
	v.pendMu.Unlock()
	if found {
		return live
	}
	v.mu.RLock()
	_, ok := v.idx.get(key)
	v.mu.RUnlock()
	return ok
}

// waitSync returns once record seq is durable and published. Group commit:
// the first waiter to find no sync running becomes the leader, takes every
// pending record, fdatasyncs once for all of them and wakes the rest.
func (v *Volume) waitSync(seq uint64) error {
	v.pendMu.Lock()
	defer v.pendMu.Unlock()
	for {
		switch {
		case v.synced >= seq:
			return nil
		case v.syncErr != nil:
			return v.syncErr
		case v.syncing:
			v.waiters++
			v.cond.Wait()
			v.waiters--
		default:
			v.lead()
		}
	}
}

// lead runs one group commit. Called with pendMu held; returns with it held.
func (v *Volume) lead() {
	batch := v.pending
	v.pending = nil
	v.syncing = true
	v.pendMu.Unlock()

	v.mu.RLock()
	df := v.df
	v.mu.RUnlock()
	err := df.f.Datasync()
	v.syncs.Add(1)
	if err == nil {
		v.publish(batch)
	}

	v.pendMu.Lock()
	v.syncing = false
	if err != nil {
		// After a failed fdatasync the page cache may have dropped the
		// dirty pages: nothing written since the last good sync can be
		// trusted, so the volume stops taking writes.
		v.syncErr = errors.E(errors.Op("volume.sync"), ioKind(err), v.path(), err)
		v.failed.Store(true)
	} else if len(batch) > 0 {
		v.synced = batch[len(batch)-1].seq
	}
	v.cond.Broadcast()
}

// publish appends a synced batch to the .idx and the in-memory index. The
// .idx is not synced here: it is a hint that Open checks and repairs from
// the .dat, so its loss costs open time, never data.
func (v *Volume) publish(batch []pendingRec) {
	ents := make([]byte, 0, len(batch)*idxEntrySize)
	for _, p := range batch {
		var e [idxEntrySize]byte
		size := p.size
		if p.flags == flagTomb {
			size = idxTombLen
		}
		putIdxEntry(e[:], p.key, p.off, size)
		ents = append(ents, e[:]...)
	}
	if _, err := v.idxf.WriteAt(ents, v.idxEnd); err == nil {
		v.idxEnd += int64(len(ents))
	}
	v.mu.Lock()
	for _, p := range batch {
		v.apply(p.key, p.off, p.size, p.flags)
	}
	v.mu.Unlock()
}

// SetGen moves the volume to a new generation (meta bumps it when the
// replica set changes). A gen below the current one is errors.Stale.
func (v *Volume) SetGen(gen uint64) error {
	return v.rewriteSuper("volume.SetGen", func(sb *superblock) error {
		if gen < sb.gen {
			return errors.E(errors.Stale, fmt.Sprintf("generation %d is below the volume's %d", gen, sb.gen))
		}
		sb.gen = gen
		return nil
	})
}

// SetMaxSize changes the size past which Append refuses new needles: a
// cluster's meta sets it for every data server. A volume already past it
// is full from then on; nothing written is touched.
func (v *Volume) SetMaxSize(n int64) error {
	o := v.opts
	o.MaxSize = n
	if err := o.Validate(); err != nil {
		return errors.E(errors.Op("volume.SetMaxSize"), v.path(), err)
	}
	v.maxSize.Store(n)
	return nil
}

// SetReadOnly marks the volume read-only (or writable again); the mark is
// kept in the superblock.
func (v *Volume) SetReadOnly(ro bool) error {
	return v.rewriteSuper("volume.SetReadOnly", func(sb *superblock) error { sb.readOnly = ro; return nil })
}

// Seal marks the volume read-only, as SetReadOnly(true) does, and returns
// once every needle written before the mark is durable and in the index: a
// write that had its place in the file but still waited for its fdatasync
// is published first. The index then holds every needle the volume will
// acknowledge (Restore's repairs aside), which an encode needs: it takes
// the index right after (chunk.Store.EncodeVolume). With SetReadOnly a
// needle acknowledged a moment after the index was taken was left out of
// the shards, and lost once the replicas were dropped.
func (v *Volume) Seal() error {
	const op errors.Op = "volume.Seal"
	v.appendMu.Lock()
	defer v.appendMu.Unlock()
	if v.closed {
		return errors.E(op, errors.IO, v.path(), "volume is closed")
	}
	if err := v.writeSuper(op, func(sb *superblock) error { sb.readOnly = true; return nil }); err != nil {
		return err
	}
	// appendMu is held: no record is added meanwhile, and the group
	// commit's leader does not take appendMu.
	if err := v.waitSync(v.seq); err != nil {
		return errors.E(op, v.path(), err)
	}
	return nil
}

func (v *Volume) rewriteSuper(op errors.Op, change func(*superblock) error) error {
	v.appendMu.Lock()
	defer v.appendMu.Unlock()
	if v.closed {
		return errors.E(op, errors.IO, v.path(), "volume is closed")
	}
	return v.writeSuper(op, change)
}

// writeSuper changes the superblock and syncs it. Called with appendMu held.
func (v *Volume) writeSuper(op errors.Op, change func(*superblock) error) error {
	sb := v.sb
	if err := change(&sb); err != nil {
		return errors.E(op, v.path(), err)
	}
	// 64 bytes at offset 0 lie within one sector; the CRC catches a torn one.
	if _, err := v.df.f.WriteAt(sb.encode(), 0); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	if err := v.df.f.Datasync(); err != nil {
		return errors.E(op, errors.IO, v.path(), err)
	}
	v.sb = sb
	v.gen.Store(sb.gen)
	v.readOnly.Store(sb.readOnly)
	return nil
}

// Size returns the data length of needle key.
func (v *Volume) Size(key uint64) (int64, error) {
	v.mu.RLock()
	s, ok := v.idx.get(key)
	closed := v.df == nil
	v.mu.RUnlock()
	switch {
	case closed:
		return 0, errors.E(errors.Op("volume.Size"), errors.IO, v.path(), "volume is closed")
	case !ok:
		return 0, errors.E(errors.Op("volume.Size"), errors.NotExist, v.keyPath(key))
	}
	return int64(s.size), nil
}

// Close waits for writes in flight, then closes the files. Reads still
// running finish on their own reference to the .dat.
func (v *Volume) Close() error {
	v.compactMu.Lock()
	defer v.compactMu.Unlock()
	v.appendMu.Lock()
	if v.closed {
		v.appendMu.Unlock()
		return nil
	}
	v.closed = true
	seq := v.seq
	v.appendMu.Unlock()
	err := v.waitSync(seq)
	v.mu.Lock()
	df := v.df
	v.df = nil
	v.mu.Unlock()
	if serr := v.idxf.Sync(); err == nil && serr != nil {
		err = serr
	}
	v.idxf.Close()
	df.unref()
	if err != nil {
		return errors.E(errors.Op("volume.Close"), errors.IO, v.path(), err)
	}
	return nil
}
