package client

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cairn/errors"
	"cairn/proto/metapb"
)

// PutOptions qualify a write.
type PutOptions struct {
	ContentType string
	UserMeta    map[string]string
	Mode        uint32
	// SizeHint is the body length when known (Content-Length), -1 if not.
	// A small known size lets the write allocate exactly once.
	SizeHint int64
	// MD5, when set, is the digest the caller promises (Content-MD5); a
	// mismatch fails the write with errors.BadDigest and stores nothing.
	MD5 []byte
	// IfMatch commits only if the current ETag equals it.
	IfMatch string
	// IfNoneMatch commits only if the file does not exist.
	IfNoneMatch bool
}

// Put stores the content of r at ns/p, creating missing parent
// directories, and returns the new inode. The body is streamed: it is cut
// into extents of Config.ExtentSize, uploaded Config.Parallel at a time
// while the next one is read, and nothing larger than Parallel extents is
// held in memory. The file appears (or replaces the old one) atomically,
// in one meta call, only after every extent is durable.
func (c *Client) Put(ctx context.Context, ns, p string, r io.Reader, o PutOptions) (*metapb.Inode, error) {
	const op = errors.Op("client.Put")
	path := errors.Path(ns + "/" + p)
	if o.IfMatch != "" || o.IfNoneMatch {
		// Cheap early refusal; meta re-checks atomically at commit.
		if err := c.precondition(ctx, ns, p, o); err != nil {
			return nil, errors.E(op, path, err)
		}
	}
	sum := md5.New()
	size, exts, err := c.upload(ctx, ns, r, o.SizeHint, sum)
	if err == nil && o.MD5 != nil && !bytes.Equal(o.MD5, sum.Sum(nil)) {
		err = errors.E(errors.BadDigest, "Content-MD5 does not match the body")
	}
	if err != nil {
		c.discard(exts)
		return nil, errors.E(op, path, err)
	}
	c.cache.invalidate(ns, p)
	ino, err := c.meta.Commit(ctx, &metapb.CommitRequest{
		Ns: ns, Path: p, Size: uint64(size), Extents: exts,
		Etag: hex.EncodeToString(sum.Sum(nil)), ContentType: o.ContentType,
		UserMeta: o.UserMeta, Mode: o.Mode, IfMatch: o.IfMatch,
		IfNoneMatch: o.IfNoneMatch, Parents: true,
	})
	if err != nil {
		c.cache.invalidate(ns, p) // a commit that failed may have applied
		c.discardRefused(err, exts)
		return nil, err
	}
	c.cache.putWritten(&File{NS: ns, Path: p, Inode: ino, Extents: exts}, ino.Seq)
	return ino, nil
}

func (c *Client) precondition(ctx context.Context, ns, p string, o PutOptions) error {
	f, err := c.StatFresh(ctx, ns, p)
	switch {
	case errors.Is(errors.NotExist, err):
		if o.IfMatch != "" {
			return errors.E(errors.Precondition, "If-Match: the file does not exist")
		}
		return nil
	case err != nil:
		return err
	case o.IfNoneMatch:
		return errors.E(errors.Precondition, "If-None-Match: the file exists")
	case o.IfMatch != "" && o.IfMatch != "*" && o.IfMatch != f.Inode.Etag:
		return errors.E(errors.Precondition, "If-Match: the ETag differs")
	}
	return nil
}

// Append adds the content of r at the end of ns/p atomically (creating
// the file if missing) and returns the new inode.
func (c *Client) Append(ctx context.Context, ns, p string, r io.Reader, o PutOptions) (*metapb.Inode, error) {
	const op = errors.Op("client.Append")
	_, exts, err := c.upload(ctx, ns, r, o.SizeHint, nil)
	if err != nil {
		c.discard(exts)
		return nil, errors.E(op, errors.Path(ns+"/"+p), err)
	}
	ino, err := c.meta.Append(ctx, &metapb.AppendRequest{
		Ns: ns, Path: p, Extents: exts, Create: true, Parents: true, ContentType: o.ContentType,
	})
	// Nothing is cached: meta answers with the inode alone and exts are the
	// appended tail's, not the file's, so the next read asks meta. A commit
	// that failed may have applied, so the entry goes either way.
	c.cache.invalidate(ns, p)
	if err != nil {
		c.discardRefused(err, exts)
		return nil, err
	}
	return ino, nil
}

// upload cuts r into extents and stores each as a needle. It returns the
// total size and the extents in file order (offsets from 0). On error the
// extents already stored are returned too, for the caller to discard.
//
// sum, when set, is fed every byte in order by a goroutine of its own,
// while the next extent is read: MD5 runs near 900 MB/s on one core, and
// hashing in the reading loop held a 1 GiB PUT to about 400 MB/s.
func (c *Client) upload(ctx context.Context, ns string, r io.Reader, hint int64, sum hash.Hash) (int64, []*metapb.Extent, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		exts     []*metapb.Extent
		firstErr error
		wg       sync.WaitGroup
		size     int64
	)
	slots := make(chan struct{}, c.cfg.Parallel)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			cancel()
		}
		mu.Unlock()
	}
	var hashq chan *sharedBuf
	hashed := make(chan struct{})
	if sum != nil {
		// Two extents of slack: the hasher keeps pace with the reader, so
		// this bounds memory without stalling it.
		hashq = make(chan *sharedBuf, 2)
		go func() {
			defer close(hashed)
			for b := range hashq {
				sum.Write(b.Bytes())
				b.release()
			}
		}()
	} else {
		close(hashed)
	}
	for {
		bufSize := c.cfg.ExtentSize
		if hint >= 0 && hint-size < bufSize {
			// +1 detects a body longer than announced without a second read;
			// past the announced size the buffer simply grows.
			bufSize = max(hint-size, 0) + 1
		}
		// bytes.Buffer.ReadFrom wants MinRead bytes free before every read,
		// the one that finds EOF too: without the slack a full extent
		// buffer doubled (and copied 8 MiB) on every extent.
		buf := &sharedBuf{Buffer: getBuf(bufSize + bytes.MinRead)}
		n, err := io.CopyN(buf, r, c.cfg.ExtentSize)
		if err != nil && err != io.EOF {
			putBuf(buf.Buffer)
			fail(errors.E(errors.IO, "reading the body", err))
			break
		}
		if n == 0 {
			putBuf(buf.Buffer)
			break
		}
		ext := &metapb.Extent{Offset: uint64(size), Length: uint64(n)}
		size += n
		mu.Lock()
		exts = append(exts, ext)
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			putBuf(buf.Buffer)
			break
		}
		buf.refs.Store(1)
		if hashq != nil {
			buf.refs.Add(1)
			hashq <- buf
		}
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			defer buf.release()
			vid, key, err := c.store(ctx, ns, buf.Bytes())
			if err != nil {
				fail(err)
				return
			}
			mu.Lock()
			ext.Volume, ext.Key = vid, key
			mu.Unlock()
		}()
		if n < c.cfg.ExtentSize {
			break
		}
	}
	if hashq != nil {
		close(hashq)
	}
	wg.Wait()
	<-hashed
	stored := exts[:0:0]
	for _, e := range exts {
		if e.Key != 0 || e.Volume != 0 {
			stored = append(stored, e)
		}
	}
	if firstErr != nil {
		return size, stored, firstErr
	}
	return size, exts, nil
}

// sharedBuf is an extent's buffer shared by its upload and the hasher: the
// last of them to finish returns it to the pool.
type sharedBuf struct {
	*bytes.Buffer
	refs atomic.Int32
}

func (b *sharedBuf) release() {
	if b.refs.Add(-1) == 0 {
		putBuf(b.Buffer)
	}
}

// store writes one needle to the namespace's current writable volume,
// moving to another volume when that one is full, read-only or stale.
//
// In a cluster the primary forwards the needle to the other replicas and
// answers once all have it on disk. A server that fails (the primary, or a
// replica the primary names in the error) is reported to meta as suspect
// along with the volume, so that the retry lands on a volume without it.
func (c *Client) store(ctx context.Context, ns string, data []byte) (uint32, uint64, error) {
	ctx = c.capCtx(ctx) // the volume's write capability, and the needle's in the answer
	var full []uint32
	var suspect []string
	var lastErr error
	refused := 0 // Assigns that found no servers for a volume
	for attempt := 0; attempt < 6; attempt++ {
		v, err := c.writable(ctx, ns, full, suspect)
		if errors.KindOf(err) == errors.Unavailable && refused < len(assignPauses) {
			// Meta found too few servers for a volume: the servers this
			// writer just reported are out of placement until they answer
			// a heartbeat (meta.slowButAlive), about a second. Ask again
			// after a pause rather than fail the write; a write that
			// found every server wanting fails after the last pause.
			if werr := pause(ctx, assignPauses[refused]); werr != nil {
				return 0, 0, err
			}
			refused++
			attempt--
			suspect = nil // reported: again would restart meta's wait for a heartbeat
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		if len(v.Servers) == 0 {
			return 0, 0, errors.E(errors.Unavailable, "volume "+itoa(v.Id)+" has no data server")
		}
		// A primary cut off mid-request (no reset, no answer) is caught
		// by chunk.Remote's liveness watch within chunk.Silence: a live
		// primary sends an interim 102 while it waits on its disk and its
		// replicas. This bound is the backstop behind it, longer than the
		// primary's own wait for its replicas, so that a failing replica
		// is reported by the primary, by name.
		pctx, cancel := context.WithTimeout(ctx, 4*time.Second+time.Duration(len(data))*time.Second/(8<<20))
		key, err := c.chunkFor(v.Servers[0]).Put(pctx, v.Id, v.Generation, data)
		cancel()
		if err == nil {
			return v.Id, key, nil
		}
		lastErr = err
		switch errors.KindOf(err) {
		case errors.Permission, errors.Unauthenticated:
			// The write capability expired or its key is unknown to the
			// server yet: a new Assign brings a fresh one.
			c.dropAssign(ns, v.Id)
			continue
		case errors.ReadOnly, errors.NoSpace, errors.Stale, errors.NotExist, errors.Unavailable, errors.IO:
			full = append(full, v.Id)
			c.dropAssign(ns, v.Id)
			if k := errors.KindOf(err); k == errors.Unavailable || k == errors.IO {
				suspect = append(suspect, failedServer(err, v.Servers[0]))
			}
			continue
		}
		if ctx.Err() == nil && errors.KindOf(err) == errors.Canceled {
			// The forward to a replica timed out inside the primary.
			full = append(full, v.Id)
			c.dropAssign(ns, v.Id)
			continue
		}
		return 0, 0, err
	}
	return 0, 0, lastErr
}

// assignPauses space the Assigns of a write that meta refused for want of
// servers: about three seconds in all, longer than a loaded server takes
// to send its next heartbeat.
var assignPauses = [...]time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond}

// pause waits d, or less if ctx ends first (its error).
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// failedServer is the server a write error blames: the replica a primary
// names in the error's path, else the primary itself.
func failedServer(err error, primary string) string {
	if p := string(errors.PathOf(err)); strings.Count(p, ":") == 1 && !strings.Contains(p, "/") {
		return p
	}
	return primary
}

func (c *Client) writable(ctx context.Context, ns string, full []uint32, suspect []string) (*metapb.Volume, error) {
	class := storageClassOf(ctx)
	slot := assignSlot(ns, class)
	if len(full) == 0 {
		c.mu.Lock()
		v := c.assign[slot]
		c.mu.Unlock()
		if v != nil && c.caps.writeFresh(v.Id) {
			return v, nil
		}
	}
	r, err := c.meta.Assign(ctx, &metapb.AssignRequest{Ns: ns, Full: full, Suspect: suspect, StorageClass: class})
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.assign[slot] = r.Volume
	c.volumes[r.Volume.Id] = r.Volume
	c.mu.Unlock()
	return r.Volume, nil
}

func (c *Client) dropAssign(ns string, vid uint32) {
	c.mu.Lock()
	for slot, v := range c.assign {
		if v.Id == vid && (slot == ns || strings.HasPrefix(slot, ns+"\x00")) {
			delete(c.assign, slot)
		}
	}
	delete(c.volumes, vid)
	c.mu.Unlock()
}

// Refused reports whether err, the error of a call that names uploaded
// needles (Commit, Append, CommitBatch, S3PutPart), is meta's refusal of
// it: a precondition, a bad or missing path, a denied caller. Nothing
// applied then, and the needles may be discarded. Any other error may
// have come after the command applied: the caller's context ended while
// meta applied it, the connection broke after the request went out, the
// leader changed, or meta's log sync failed (IO, or NoSpace: a full disk)
// with the change already applied in memory. The file may then name the
// needles, and deleting them would leave it naming data that is gone; such
// needles are left in place (space lost, never data).
func Refused(err error) bool {
	switch errors.KindOf(err) {
	case errors.Invalid, errors.NotExist, errors.Exist, errors.NotEmpty, errors.IsDir, errors.NotDir,
		errors.Permission, errors.Unauthenticated, errors.Precondition, errors.TooLarge,
		errors.NameTooLong, errors.BadDigest, errors.ReadOnly, errors.Range:
		return true
	}
	return false
}

// discardRefused discards exts after the call that named them failed
// with err, if meta refused it (Refused).
func (c *Client) discardRefused(err error, exts []*metapb.Extent) {
	if Refused(err) {
		c.discard(exts)
	}
}

// discard deletes needles that will never be committed. Best effort: a
// needle left behind is garbage that costs space, never correctness.
func (c *Client) discard(exts []*metapb.Extent) {
	for _, e := range exts {
		if e.Key == 0 && e.Volume == 0 {
			continue
		}
		ctx := c.capCtx(context.Background())
		v, err := c.volume(ctx, e.Volume, false)
		if err != nil {
			continue
		}
		for _, addr := range v.Servers {
			_ = c.chunkFor(addr).Delete(ctx, e.Volume, v.Generation, e.Key)
		}
	}
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
