package fusefs

import (
	"context"
	"time"

	"cairn/proto/metapb"
)

// Access times in batches. A read that moves a file's atime (relatime,
// accessed in posix.go) changes it here at once; meta gets it with the
// other files read meanwhile, in one MountAccess (one command, one log
// write) for every file whose atime moved within accessLinger, instead of
// a SetAttr per file read: reading back files just written paid one meta
// call per file for it, about half of what reading them cost.
//
// An access is work left behind like any other (writeback.go): it is
// announced to meta (MountDirty) before the read answers, and counted in
// its epoch until its batch is stored, so a recall (drain) waits for it,
// and a drain sends the gathering batch at once instead of after the
// linger. The batch holds at most WritebackMaxEntries files; past that,
// or while the queue of chains is full, an access is stored before the
// read answers (accessed). An access of a file whose chain is queued
// joins the chain instead: the chain's commit carries the file's atime.
// Meta moves an atime only forward (meta/mount.go), so a batch that lands
// after a commit that carried a newer atime changes nothing; an explicit
// atime (utimensat) commits only after the file's batch (waitAccess).

// accessLinger bounds how long an access waits for others to share its
// batch (a mount that dies loses at most that much of its atimes).
const accessLinger = 50 * time.Millisecond

// accessCall is the most files one MountAccess carries (meta's bound is
// higher): a gathering batch this large is sent at once.
const accessCall = 1024

// accessBatch is the atimes gathered for one MountAccess round.
type accessBatch struct {
	files map[*node]int64 // the atime to store, by file
	units map[uint64]int  // the work it carries, by epoch (writeBehind.units)
	done  chan struct{}   // closed once stored (or given up)
}

// isAccess reports whether wk is an access alone (an atime a read moved).
func (wk work) isAccess() bool {
	return !wk.create && !wk.flush && wk.attrs != nil && wk.attrs.Access && wk.attrs.AtimeNs != nil
}

// accessRoom reports whether an access of a file with no queued chain may
// go into the gathering batch (w.mu held): the queue of chains is not
// full (as for any work, room) and neither is the batch.
func (w *writeBehind) accessRoom() bool {
	if w.pending >= w.m.cfg.WritebackMaxEntries {
		return false
	}
	return w.acc == nil || len(w.acc.files) < w.m.cfg.WritebackMaxEntries
}

// gather adds n's atime, with units of work by epoch, to the gathering
// batch, starting the sender if none runs (w.mu held; n.wb.mu not).
func (w *writeBehind) gather(n *node, atime int64, units map[uint64]int) {
	b := w.acc
	if b == nil {
		b = &accessBatch{files: map[*node]int64{}, units: map[uint64]int{}, done: make(chan struct{})}
		w.acc = b
		if !w.accRunning {
			w.accRunning = true
			go w.sendAccesses()
		}
	}
	b.files[n] = max(b.files[n], atime)
	for e, k := range units {
		b.units[e] += k
	}
	n.wb.mu.Lock()
	n.wb.access = b
	n.wb.mu.Unlock()
	if len(b.files) >= accessCall {
		w.kickAccess()
	}
}

// kickAccess makes the sender send the gathering batch now.
func (w *writeBehind) kickAccess() {
	select {
	case w.accKick <- struct{}{}:
	default:
	}
}

// sendAccesses sends the gathered batches, each after the linger (or a
// kick), until none gathers.
func (w *writeBehind) sendAccesses() {
	ctx, finish := w.chainContext("atime")
	defer finish()
	for {
		w.mu.Lock()
		if w.acc == nil {
			w.accRunning = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		linger := time.NewTimer(accessLinger)
		select {
		case <-w.accKick:
		case <-linger.C:
		}
		linger.Stop()
		w.mu.Lock()
		b := w.acc
		w.acc = nil
		w.mu.Unlock()
		w.storeAccesses(ctx, b)
	}
}

// storeAccesses stores batch b in meta: one MountAccess per namespace and
// accessCall files. A batch meta refuses (an older meta without
// MountAccess) is stored file by file, as before batches.
func (w *writeBehind) storeAccesses(ctx context.Context, b *accessBatch) {
	type file struct {
		n *node
		a *metapb.MountAccess
	}
	byNS := map[string][]file{}
	for n, at := range b.files {
		p, err := n.path()
		if err != nil || p == "" {
			continue // no name (unlinked while open): its atime goes with it
		}
		byNS[n.ns] = append(byNS[n.ns], file{n, &metapb.MountAccess{Path: p, Ino: n.StableAttr().Ino, AtimeNs: at}})
	}
	for ns, files := range byNS {
		for len(files) > 0 {
			k := min(len(files), accessCall)
			req := &metapb.MountAccessRequest{Ns: ns}
			for _, f := range files[:k] {
				req.Files = append(req.Files, f.a)
			}
			err := retry(ctx, func() error {
				_, err := w.m.meta.MountAccess(ctx, req)
				return err
			})
			if err != nil {
				for _, f := range files[:k] {
					at := f.a.AtimeNs
					if err := f.n.commitBehind(ctx, false, &metapb.SetAttrRequest{AtimeNs: &at, Access: true}); err != nil {
						w.m.log.Warn("mount: storing an access time failed", "ns", ns, "ino", f.a.Ino, "err", err)
					}
				}
			}
			files = files[k:]
		}
	}
	for n := range b.files {
		n.wb.mu.Lock()
		if n.wb.access == b {
			n.wb.access = nil
		}
		n.wb.mu.Unlock()
		if !n.busy() {
			w.unkeep(n)
		}
	}
	close(b.done)
	w.commitUnits(b.units, 0)
}

// waitAccess waits until n's atime gathered in a batch, if any, is
// stored, sending the batch now.
func (w *writeBehind) waitAccess(n *node) {
	n.wb.mu.Lock()
	b := n.wb.access
	n.wb.mu.Unlock()
	if b == nil {
		return
	}
	w.kickAccess()
	<-b.done
}
