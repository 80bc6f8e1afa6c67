package client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"sync/atomic"
	"time"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// File is a resolved file or directory: its inode and, for a regular
// file, its extents sorted by offset. A File is immutable once returned.
type File struct {
	NS, Path string
	Inode    *metapb.Inode
	Extents  []*metapb.Extent
}

// IsDir reports whether f is a directory.
func (f *File) IsDir() bool { return f.Inode.GetType() == metapb.FileType_DIRECTORY }

// Size is the file's length in bytes.
func (f *File) Size() int64 { return int64(f.Inode.GetSize()) }

// Stat resolves ns/p in one meta call (none when cached). p must be clean.
func (c *Client) Stat(ctx context.Context, ns, p string) (*File, error) {
	if f, ok := c.cache.get(ns, p); ok {
		return f, nil
	}
	return c.resolve(ctx, ns, p)
}

// StatFresh resolves ns/p bypassing the cache (and refreshes it).
func (c *Client) StatFresh(ctx context.Context, ns, p string) (*File, error) {
	return c.resolve(ctx, ns, p)
}

func (c *Client) resolve(ctx context.Context, ns, p string) (*File, error) {
	epoch := c.cache.epochNow()
	r, err := c.meta.Resolve(ctx, &metapb.ResolveRequest{Ns: ns, Path: p, WantExtents: true})
	if err != nil {
		return nil, err
	}
	f := &File{NS: ns, Path: p, Inode: r.Inode, Extents: r.Extents}
	sort.Slice(f.Extents, func(i, j int) bool { return f.Extents[i].Offset < f.Extents[j].Offset })
	c.cache.put(f, epoch)
	return f, nil
}

// ReadTo writes bytes [off, off+n) of f to w, straight from the data
// servers. Holes (a file extended by truncate) read as zeros. Extents on
// remote servers are fetched up to Config.Parallel at a time and written in
// order; a single extent, or one on an in-process server, is copied
// straight into w without an intermediate buffer.
func (c *Client) ReadTo(ctx context.Context, f *File, off, n int64, w io.Writer) (int64, error) {
	const op = errors.Op("client.Read")
	if f.IsDir() {
		return 0, errors.E(op, errors.IsDir, errors.Path(f.NS+"/"+f.Path))
	}
	if off < 0 || n < 0 || off+n > f.Size() {
		return 0, errors.E(op, errors.Range, errors.Path(f.NS+"/"+f.Path), "read past the end of the file")
	}
	c.NoteRead(f) // readnotes.go: for tiering
	parts := plan(f.Extents, off, n)
	if len(parts) <= 1 || c.cfg.Parallel == 1 {
		var total int64
		for _, p := range parts {
			m, err := c.readPart(ctx, f, p, w)
			total += m
			if err != nil {
				return total, err
			}
		}
		return total, nil
	}
	return c.readParallel(ctx, f, parts, w)
}

// part is one piece of a read: a needle range, or a hole of zeros.
type part struct {
	ext         *metapb.Extent // nil: hole
	off, length int64          // within the needle (or the hole length)
}

// plan maps [off, off+n) of a file onto its extents.
func plan(exts []*metapb.Extent, off, n int64) []part {
	var parts []part
	pos, end := off, off+n
	i := sort.Search(len(exts), func(i int) bool {
		return int64(exts[i].Offset+exts[i].Length) > pos
	})
	for pos < end {
		if i >= len(exts) || int64(exts[i].Offset) >= end {
			parts = append(parts, part{length: end - pos})
			break
		}
		e := exts[i]
		if eo := int64(e.Offset); eo > pos {
			parts = append(parts, part{length: eo - pos})
			pos = eo
		}
		in := pos - int64(e.Offset)
		l := min(int64(e.Length)-in, end-pos)
		parts = append(parts, part{ext: e, off: int64(e.NeedleOffset) + in, length: l})
		pos += l
		i++
	}
	return parts
}

var zeros = make([]byte, 64<<10)

func (c *Client) readPart(ctx context.Context, f *File, p part, w io.Writer) (int64, error) {
	if p.ext == nil {
		var total int64
		for total < p.length {
			m, err := w.Write(zeros[:min(int64(len(zeros)), p.length-total)])
			total += int64(m)
			if err != nil {
				return total, err
			}
		}
		return total, nil
	}
	n, err := c.readNeedle(ctx, p.ext.Volume, p.ext.Key, p.off, p.length, w)
	if refused(err) && f.Path != "" && !c.caps.has(needleID{p.ext.Volume, p.ext.Key}) {
		// The needle's capability was evicted (caps.go): a fresh lookup
		// of the file brings it back.
		if _, serr := c.StatFresh(ctx, f.NS, f.Path); serr == nil {
			var m int64
			m, err = c.readNeedle(ctx, p.ext.Volume, p.ext.Key, p.off+n, p.length-n, w)
			n += m
		}
	}
	if errors.Is(errors.NotExist, err) {
		err = c.lostOrChanged(ctx, f, p.ext, err)
	}
	return n, err
}

// lostOrChanged tells the two reasons why no replica has a needle of a
// file: the file changed since it was looked up (its old needles may be
// collected), or the needle is lost on every replica. The first is the
// NotExist it was; the second is DataLoss, counted and said so, never a
// missing file: the file is still listed.
func (c *Client) lostOrChanged(ctx context.Context, f *File, e *metapb.Extent, err error) error {
	if f.Path == "" {
		return err
	}
	fresh, ferr := c.StatFresh(ctx, f.NS, f.Path)
	if ferr != nil || fresh.Inode.GetVersion() != f.Inode.GetVersion() || fresh.Inode.GetIno() != f.Inode.GetIno() {
		return err
	}
	c.dataLoss.Add(1)
	c.cfg.Logger.Error("a needle is lost on every replica", "ns", f.NS, "path", f.Path, "volume", e.Volume, "key", e.Key)
	return errors.E(errors.Op("client.Read"), errors.DataLoss, errors.Path(f.NS+"/"+f.Path),
		fmt.Sprintf("data lost: needle %d/%d of this file is on no replica", e.Volume, e.Key), err)
}

// DataLoss is how many reads found a needle of a current file on no
// replica since the client started.
func (c *Client) DataLoss() uint64 { return c.dataLoss.Load() }

// readNeedle reads from the volume's replicas, starting at one chosen by
// the key so that reads spread over them, refreshing the volume map once
// if every known location fails to answer. A replica that sends no byte
// within firstByte is abandoned for the next (see readReplica); one that
// serves a corrupt copy is asked to repair it from the others.
func (c *Client) readNeedle(ctx context.Context, vid uint32, key uint64, off, n int64, w io.Writer) (int64, error) {
	ctx = c.capCtx(ctx)
	renewed := false // a refused capability is renewed once per read
	var lastErr error
	var done int64 // bytes already written to w: the next replica goes on from there
	for attempt := 0; attempt < 2; attempt++ {
		v, err := c.volume(ctx, vid, attempt > 0)
		if err != nil {
			return done, err
		}
		servers, first := v.Servers, 0
		if v.Ec != nil {
			servers = c.ecServers(ctx, v, key) // the needle's data shard first
		} else {
			first = c.firstReplica(servers, key)
		}
		for i := range servers {
			addr := servers[(first+i)%len(servers)]
			last := i == len(servers)-1 && (attempt == 1 || len(servers) == 1)
			// A data server checks each block before it sends it, so the
			// bytes that arrived before a failure (a corrupt block past the
			// first, a server dying mid-stream) are good.
			m, err := c.readReplica(ctx, addr, vid, key, off+done, n-done, w, last)
			done += m
			if refused(err) && !renewed {
				// Expired (a mount that held the extents for hours), or
				// signed by a key this server does not know yet.
				renewed = true
				if c.caps.renew(ctx, needleID{vid, key}) {
					m, err = c.readReplica(ctx, addr, vid, key, off+done, n-done, w, last)
					done += m
				}
			}
			if err == nil {
				return done, nil
			}
			if errors.Is(errors.Corrupt, err) {
				c.reportCorrupt(addr, vid, key)
			}
			if !retryable(err) || ctx.Err() != nil {
				return done, err
			}
			lastErr = err
		}
	}
	return done, lastErr
}

// firstReplica is the index of the replica a read of needle key tries
// first: one on this host if the client has found one (its bytes come
// without the network), else one picked by key, spreading reads (also
// among several on this host).
func (c *Client) firstReplica(servers []string, key uint64) int {
	first := int(key % uint64(len(servers)))
	for i := range servers {
		j := (first + i) % len(servers)
		if c.isLocal(servers[j]) {
			return j
		}
	}
	return first
}

// firstByte is how long a replica may take to start answering a read
// before the client tries another; a dead or cut-off server then costs a
// reader well under a second.
const firstByte = 800 * time.Millisecond

// readReplica reads from one replica. Unless it is the last one left, the
// read is abandoned if no byte arrives within firstByte; once bytes flow it
// may take as long as it needs.
func (c *Client) readReplica(ctx context.Context, addr string, vid uint32, key uint64, off, n int64, w io.Writer, last bool) (int64, error) {
	if last {
		return c.chunkFor(addr).ReadTo(ctx, vid, key, off, n, w)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fw := &firstWrite{w: w}
	t := time.AfterFunc(firstByte, func() {
		if !fw.started.Load() {
			cancel()
		}
	})
	defer t.Stop()
	m, err := c.chunkFor(addr).ReadTo(rctx, vid, key, off, n, fw)
	if err != nil && ctx.Err() == nil && rctx.Err() != nil {
		err = errors.E(errors.Op("client.Read"), errors.Unavailable, errors.Path(addr), "no answer within "+firstByte.String())
	}
	return m, err
}

// firstWrite notes that a read has started delivering bytes.
type firstWrite struct {
	w       io.Writer
	started atomic.Bool
}

func (f *firstWrite) Write(p []byte) (int, error) {
	f.started.Store(true)
	return f.w.Write(p)
}

// reportCorrupt asks the server that served a corrupt copy to restore it
// from another replica, in the background: the reader has moved on.
func (c *Client) reportCorrupt(addr string, vid uint32, key uint64) {
	r, ok := c.chunkFor(addr).(interface {
		RepairNeedle(ctx context.Context, vid uint32, key uint64) error
	})
	if !ok {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(c.capCtx(context.Background()), time.Minute)
		defer cancel()
		if err := r.RepairNeedle(ctx, vid, key); err != nil {
			c.cfg.Logger.Warn("could not have a corrupt needle repaired", "server", addr, "volume", vid, "key", key, "err", err)
		}
	}()
}

// refused says whether a data server refused the call's capability.
func refused(err error) bool {
	return errors.Is(errors.Permission, err) || errors.Is(errors.Unauthenticated, err)
}

func retryable(err error) bool {
	switch errors.KindOf(err) {
	case errors.Unavailable, errors.IO, errors.Stale, errors.Corrupt, errors.NotExist, errors.Canceled:
		return true
	}
	return false
}

// readParallel fetches parts into buffers, Parallel at a time, and writes
// them in order. Memory is bounded by Parallel buffers of one extent each:
// a slot is released only when its part has been written.
func (c *Client) readParallel(ctx context.Context, f *File, parts []part, w io.Writer) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		buf *bytes.Buffer
		err error
	}
	results := make([]chan result, len(parts))
	for i := range results {
		results[i] = make(chan result, 1)
	}
	slots := make(chan struct{}, c.cfg.Parallel)
	go func() {
		for i, p := range parts {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			go func() {
				buf := getBuf(p.length)
				_, err := c.readPart(ctx, f, p, buf)
				results[i] <- result{buf, err}
			}()
		}
	}()
	var total int64
	for i := range parts {
		var r result
		select {
		case r = <-results[i]:
		case <-ctx.Done():
			return total, ctx.Err()
		}
		if r.err != nil {
			return total, r.err
		}
		m, err := w.Write(r.buf.Bytes())
		total += int64(m)
		putBuf(r.buf)
		<-slots
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// ReadAll returns the whole file; meant for small files.
func (c *Client) ReadAll(ctx context.Context, f *File) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(int(f.Size()))
	_, err := c.ReadTo(ctx, f, 0, f.Size(), &b)
	return b.Bytes(), err
}

// volume returns the volume's locations, from the cache unless refresh.
func (c *Client) volume(ctx context.Context, vid uint32, refresh bool) (*metapb.Volume, error) {
	if !refresh {
		c.mu.Lock()
		v := c.volumes[vid]
		c.mu.Unlock()
		if v != nil {
			return v, nil
		}
	}
	r, err := c.meta.Volumes(ctx, &metapb.VolumesRequest{Ids: []uint32{vid}})
	if err != nil {
		return nil, err
	}
	for _, v := range r.Volumes {
		if v.Id == vid {
			c.mu.Lock()
			c.volumes[vid] = v
			c.mu.Unlock()
			return v, nil
		}
	}
	return nil, errors.E(errors.Op("client.volume"), errors.NotExist, errors.Path(pathname.Join("volume", itoa(vid))))
}
