package fusefs

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"cairn/errors"
	"cairn/proto/metapb"
	"cairn/vfs"
)

// diskCache is the block cache's second tier (Config.DiskCache): blocks
// the memory tier evicts are written to files, up to Config.DiskCacheSize,
// and a later miss reads them from there instead of the network. A data
// set larger than memory and read again (a training epoch) then costs
// local disk reads, not fetches.
//
// The tier outlives the mount. Needles are immutable and a volume never
// reuses a key (compaction included), so a block file stays right for as
// long as its cluster exists: files live in DIR/cairn-blocks/<cluster id>/
// and the next mount of the same cluster finds them again. Each file ends
// with a CRC-32C of its bytes, so a file torn by a crash or damaged on
// disk is dropped and fetched again, never served. A lock file keeps a
// second mount process out of a directory in use.
//
// The block files are read and written through a vfs.FS (Config.DiskCacheFS)
// so that tests can put a failing disk under the tier. The tier only ever
// holds copies of needles the data servers have acknowledged, so a failing
// cache disk can cost speed, never data: a block that cannot be written is
// not kept, one that cannot be read is dropped and fetched, and after
// diskFailLimit I/O errors in a row the tier turns itself off for the rest
// of the mount (reads go to the network, as without a disk cache).
type diskCache struct {
	fs   vfs.FS
	dir  string   // DIR/cairn-blocks/<cluster>
	lock *os.File // flock'ed DIR/cairn-blocks/lock, held while mounted
	max  int64
	sem  chan struct{} // bounds writes in flight

	errs   atomic.Int64 // I/O errors of the block files, counted
	failed atomic.Int32 // I/O errors in a row; reset by a success
	off    atomic.Bool  // turned off by diskFailLimit errors in a row

	mu     sync.Mutex
	closed bool
	used   int64
	ents   map[blockKey]*diskEnt
	lru    *list.List // of *diskEnt, most recent first
}

type diskEnt struct {
	k      blockKey
	lo, hi int64 // needle range held
	ready  bool  // the file is complete
	elem   *list.Element
}

// diskFailLimit is how many I/O errors in a row turn the tier off: one
// error may be one bad sector, a run of them is a disk that is going.
const diskFailLimit = 8

// crcSize is the trailer of a block file: the CRC-32C of the bytes before.
const crcSize = 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// openDiskCache opens the disk tier of the cluster meta belongs to.
func (m *Mount) openDiskCache(ctx context.Context) (*diskCache, error) {
	info, err := m.meta.Info(ctx, &metapb.Empty{})
	if err != nil {
		return nil, err
	}
	d, err := openDiskCacheAt(m.cfg.DiskCacheFS, m.cfg.DiskCache, info.ClusterId, m.cfg.DiskCacheSize)
	if err != nil {
		return nil, errors.E(errors.IO, err)
	}
	return d, nil
}

// openDiskCacheAt opens the tier of cluster under dir, taking over the
// blocks an earlier mount left there and removing those of other
// clusters (and of earlier formats). Block files go through fsys (nil:
// the operating system); the directories and the lock do not.
func openDiskCacheAt(fsys vfs.FS, dir, cluster string, max int64) (*diskCache, error) {
	if fsys == nil {
		fsys = vfs.Default
	}
	if cluster == "" || strings.ContainsAny(cluster, "/.") {
		return nil, fmt.Errorf("meta names no usable cluster id (%q): is it older than this mount?", cluster)
	}
	root := filepath.Join(dir, "cairn-blocks")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(root, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if err == unix.EWOULDBLOCK {
			return nil, fmt.Errorf("disk cache %s is in use by another mount; give each mount its own --disk-cache", dir)
		}
		return nil, err
	}
	d := &diskCache{fs: fsys, dir: filepath.Join(root, cluster), lock: lock, max: max, sem: make(chan struct{}, 4),
		ents: map[blockKey]*diskEnt{}, lru: list.New()}
	if err := d.adopt(root, cluster); err != nil {
		lock.Close()
		return nil, err
	}
	return d, nil
}

// adopt removes everything under root but the lock and this cluster's
// directory, and indexes the complete block files in it, least recently
// written last in the LRU.
func (d *diskCache) adopt(root, cluster string) error {
	entries, err := os.ReadDir(root)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if n := e.Name(); n != "lock" && n != cluster {
			if err := os.RemoveAll(filepath.Join(root, n)); err != nil {
				return err
			}
		}
	}
	if err := os.MkdirAll(d.dir, 0o700); err != nil {
		return err
	}
	entries, err = os.ReadDir(d.dir)
	if err != nil {
		return err
	}
	type found struct {
		e     *diskEnt
		mtime time.Time
	}
	var all []found
	for _, de := range entries {
		e, ok := parseBlockName(de.Name())
		info, err := de.Info()
		if !ok || err != nil || !info.Mode().IsRegular() || info.Size() != e.hi-e.lo+crcSize {
			os.Remove(filepath.Join(d.dir, de.Name())) // a temporary file, or torn
			continue
		}
		e.ready = true
		all = append(all, found{e, info.ModTime()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mtime.Before(all[j].mtime) })
	for _, f := range all {
		d.removeLocked(d.ents[f.e.k]) // an older range of the same block
		f.e.elem = d.lru.PushFront(f.e)
		d.ents[f.e.k] = f.e
		d.used += f.e.hi - f.e.lo
	}
	d.evictLocked() // the size may have been lowered since
	return nil
}

// close waits for the writes in flight and releases the directory; a
// fetch still finishing after the unmount stores nothing more.
func (d *diskCache) close() {
	for range cap(d.sem) {
		d.sem <- struct{}{}
	}
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	for range cap(d.sem) {
		<-d.sem
	}
	d.lock.Close()
}

// path names the file of entry e: every field of its key and range, so
// that an entry replaced while its file is being written (another range
// of the same block) never shares a file with its successor.
func (d *diskCache) path(e *diskEnt) string {
	return filepath.Join(d.dir, fmt.Sprintf("%d-%x-%d-%d-%d", e.k.vol, e.k.key, e.k.idx, e.lo, e.hi))
}

// parseBlockName is path's inverse.
func parseBlockName(name string) (*diskEnt, bool) {
	f := strings.Split(name, "-")
	if len(f) != 5 {
		return nil, false
	}
	var n [5]uint64
	for i, base := range []int{10, 16, 10, 10, 10} {
		bits := 63 // offsets and indexes are int64s
		if i == 1 {
			bits = 64 // the needle key
		}
		v, err := strconv.ParseUint(f[i], base, bits)
		if err != nil {
			return nil, false
		}
		n[i] = v
	}
	vol, key, idx, lo, hi := n[0], n[1], int64(n[2]), int64(n[3]), int64(n[4])
	if vol > math.MaxUint32 || hi <= lo {
		return nil, false
	}
	return &diskEnt{k: blockKey{vol: uint32(vol), key: key, idx: idx}, lo: lo, hi: hi}, true
}

// store writes data, the needle range [lo, lo+len(data)) of block k, in
// the background; it waits while too many writes are in flight.
func (d *diskCache) store(k blockKey, lo int64, data []byte) {
	size := int64(len(data))
	if size == 0 || size > d.max || d.off.Load() {
		return
	}
	d.sem <- struct{}{}
	d.mu.Lock()
	if old := d.ents[k]; d.closed || old != nil && old.lo <= lo && old.hi >= lo+size {
		d.mu.Unlock()
		<-d.sem
		return
	}
	d.removeLocked(d.ents[k])
	e := &diskEnt{k: k, lo: lo, hi: lo + size}
	e.elem = d.lru.PushFront(e)
	d.ents[k] = e
	d.used += size
	d.evictLocked()
	d.mu.Unlock()
	go func() {
		defer func() { <-d.sem }()
		p := d.path(e)
		tmp, err := d.writeTemp(data)
		if err == nil {
			err = d.fs.Rename(tmp, p)
		}
		d.result(err)
		d.mu.Lock()
		defer d.mu.Unlock()
		switch {
		case d.ents[k] != e:
			// Evicted or replaced while being written.
			if err == nil {
				d.fs.Remove(p)
			}
		case err != nil:
			if tmp != "" {
				d.fs.Remove(tmp)
			}
			d.removeLocked(e)
		default:
			e.ready = true
		}
	}()
}

// writeTemp writes data and its checksum to a new file of its own in the
// tier's directory. It does not sync: a file torn by a crash fails its
// checksum and is fetched again.
func (d *diskCache) writeTemp(data []byte) (string, error) {
	var rnd [8]byte
	rand.Read(rnd[:])
	name := filepath.Join(d.dir, "tmp-"+hex.EncodeToString(rnd[:]))
	f, err := d.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", err
	}
	sum := binary.BigEndian.AppendUint32(nil, crc32.Checksum(data, castagnoli))
	if _, err := f.WriteAt(data, 0); err != nil {
		f.Close()
		return name, err
	}
	if _, err := f.WriteAt(sum, int64(len(data))); err != nil {
		f.Close()
		return name, err
	}
	return name, f.Close()
}

// result counts the outcome of one block file's write or read: a run of
// diskFailLimit errors turns the tier off.
func (d *diskCache) result(err error) {
	if err == nil {
		d.failed.Store(0)
		return
	}
	d.errs.Add(1)
	if d.failed.Add(1) == diskFailLimit && !d.off.Swap(true) {
		slog.Warn("disk cache turned off: its disk keeps failing; reads go to the data servers", "dir", d.dir, "err", err)
		d.mu.Lock()
		for d.lru.Len() > 0 { // forget the blocks, and try to free their space
			d.removeLocked(d.lru.Back().Value.(*diskEnt))
		}
		d.mu.Unlock()
	}
}

// load returns the bytes of block k holding [lo, hi) and the needle
// offset they start at, if the tier has them.
func (d *diskCache) load(k blockKey, lo, hi int64) ([]byte, int64, bool) {
	if d.off.Load() {
		return nil, 0, false
	}
	d.mu.Lock()
	e := d.ents[k]
	if e == nil || !e.ready || e.lo > lo || e.hi < hi {
		d.mu.Unlock()
		return nil, 0, false
	}
	d.lru.MoveToFront(e.elem)
	d.mu.Unlock()
	data, err := d.read(e)
	if os.IsNotExist(err) {
		return nil, 0, false // evicted meanwhile
	}
	n := len(data) - crcSize
	if err != nil || n < 0 || int64(n) != e.hi-e.lo || crc32.Checksum(data[:n], castagnoli) != binary.BigEndian.Uint32(data[n:]) {
		// Unreadable or damaged: fetch it, and drop the file (if the
		// entry is still this one).
		if err != nil {
			d.result(err)
		}
		d.mu.Lock()
		d.removeLocked(e)
		d.mu.Unlock()
		return nil, 0, false
	}
	d.result(nil)
	return data[:n], e.lo, true
}

// read returns the bytes of e's file: its range and the checksum.
func (d *diskCache) read(e *diskEnt) ([]byte, error) {
	f, err := d.fs.OpenFile(d.path(e), os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data := make([]byte, e.hi-e.lo+crcSize)
	n, err := f.ReadAt(data, 0)
	if err == io.EOF {
		err = nil // short: the checksum test fails it
	}
	return data[:n], err
}

// removeLocked forgets e and deletes its file (if written).
func (d *diskCache) removeLocked(e *diskEnt) {
	if e == nil || d.ents[e.k] != e {
		return
	}
	delete(d.ents, e.k)
	d.lru.Remove(e.elem)
	d.used -= e.hi - e.lo
	if e.ready {
		d.fs.Remove(d.path(e))
	}
}

func (d *diskCache) evictLocked() {
	for d.used > d.max && d.lru.Len() > 1 {
		d.removeLocked(d.lru.Back().Value.(*diskEnt))
	}
}

// failures returns the I/O errors counted and whether they turned the
// tier off.
func (d *diskCache) failures() (errs int64, off bool) { return d.errs.Load(), d.off.Load() }

// stats returns the number of complete blocks and their bytes.
func (d *diskCache) stats() (blocks int, bytes int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, e := range d.ents {
		if e.ready {
			blocks++
			bytes += e.hi - e.lo
		}
	}
	return blocks, bytes
}
