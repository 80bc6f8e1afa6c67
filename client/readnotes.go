package client

import (
	"context"
	"sync"
	"time"

	"cairn/proto/metapb"
)

// Reads for tiering. Meta learns that a file is read when it resolves it
// (meta/tier.go); a read this client serves from its metadata cache, or
// that a layer above serves from its own (the gateway's hot cache), never
// reaches meta, and a hot file would look cold and be demoted. So every
// read is noted here, in memory, and once a second the files read are
// sent to meta in one TierNoteReads per namespace: fire and forget (a
// failed report only makes files look colder), bounded (beyond
// maxReadNotes files per second further reads go unreported).

// maxReadNotes bounds the files remembered between two reports.
const maxReadNotes = 1 << 14

// readNoteInterval is how often the files read are reported.
const readNoteInterval = time.Second

type readNote struct {
	ns  string
	ino uint64
}

type readNotes struct {
	mu      sync.Mutex
	pending map[readNote]struct{}
	done    chan struct{}
}

// NoteRead records that f was read, for meta's tiering (see above). Reads
// through ReadTo are noted already; a layer that serves f's bytes from its
// own cache calls it.
func (c *Client) NoteRead(f *File) {
	if f == nil || f.Inode == nil || f.Inode.Type != metapb.FileType_REGULAR {
		return
	}
	c.NoteReadIno(f.NS, f.Inode.Ino)
}

// NoteReadIno is NoteRead by namespace and inode number (a mount's read).
func (c *Client) NoteReadIno(ns string, ino uint64) {
	if c == nil || ino == 0 {
		return
	}
	n := &c.notes
	k := readNote{ns, ino}
	n.mu.Lock()
	if len(n.pending) < maxReadNotes {
		n.pending[k] = struct{}{}
	}
	n.mu.Unlock()
}

// reportReads sends the reads noted, once per readNoteInterval, until ctx
// ends.
func (c *Client) reportReads(ctx context.Context) {
	defer close(c.notes.done)
	t := time.NewTicker(readNoteInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.flushReads(ctx)
	}
}

// flushReads sends the reads noted since the last flush.
func (c *Client) flushReads(ctx context.Context) {
	n := &c.notes
	n.mu.Lock()
	if len(n.pending) == 0 {
		n.mu.Unlock()
		return
	}
	pending := n.pending
	n.pending = make(map[readNote]struct{}, len(pending))
	n.mu.Unlock()
	byNS := map[string][]uint64{}
	for k := range pending {
		byNS[k.ns] = append(byNS[k.ns], k.ino)
	}
	for ns, inos := range byNS {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		// An error (an older meta, one that is down) drops the report.
		c.cfg.Meta.TierNoteReads(cctx, &metapb.TierReadsRequest{Ns: ns, Inos: inos})
		cancel()
	}
}
