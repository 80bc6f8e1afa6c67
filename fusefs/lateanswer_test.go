package fusefs_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"

	"cairn/fusefs"
	"cairn/internal/await"
	"cairn/proto/metapb"
)

// lateSetAttr passes a mount's chmods to meta at once but holds their
// answers until chmodDone is closed (meta applied the change; the mount
// hears of it late), holds truncates before they go to meta until
// truncGo is closed, and counts the commits meta answered.
type lateSetAttr struct {
	metapb.MetaClient
	chmods, truncs, commits atomic.Int64
	chmodDone, truncGo      chan struct{}
}

func (l *lateSetAttr) SetAttr(ctx context.Context, in *metapb.SetAttrRequest, opts ...grpc.CallOption) (*metapb.Inode, error) {
	if in.Size != nil {
		l.truncs.Add(1)
		select {
		case <-l.truncGo:
		case <-ctx.Done():
		}
	}
	na, err := l.MetaClient.SetAttr(ctx, in, opts...)
	if in.Mode != nil {
		l.chmods.Add(1)
		select {
		case <-l.chmodDone:
		case <-ctx.Done():
		}
	}
	return na, err
}

func (l *lateSetAttr) Commit(ctx context.Context, in *metapb.CommitRequest, opts ...grpc.CallOption) (*metapb.Inode, error) {
	na, err := l.MetaClient.Commit(ctx, in, opts...)
	l.commits.Add(1)
	return na, err
}

// TestLateSetAttrAnswerKeepsNewerRecord: a chmod left behind reaches meta,
// and before its answer comes back a truncate flushes a write past the
// end, committing a newer version. The late answer (the version before
// the write, with its size) must not be laid over the commit's record:
// the mount then showed the file's size from before the write. fsx found
// it (a file truncated, read, written past its end and reopened showed
// the truncated size; the late answer there was an access time's).
func TestLateSetAttrAnswerKeepsNewerRecord(t *testing.T) {
	srv := store(t)
	late := &lateSetAttr{chmodDone: make(chan struct{}), truncGo: make(chan struct{})}
	dir, m := mount(t, srv, "data", func(c *fusefs.Config) {
		late.MetaClient = c.Meta
		c.Meta = late
	})
	var chmodDone, truncGo atomic.Bool
	release := func() {
		if chmodDone.CompareAndSwap(false, true) {
			close(late.chmodDone)
		}
		if truncGo.CompareAndSwap(false, true) {
			close(late.truncGo)
		}
	}
	defer release()
	p := filepath.Join(dir, "f")
	must(t, os.WriteFile(p, make([]byte, 8192), 0o644))
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	must(t, f.Sync())
	st, err := f.Stat()
	must(t, err)
	ino := st.Sys().(*syscall.Stat_t).Ino

	must(t, f.Chmod(0o600)) // left behind; its answer held
	await.Until(t, 20*time.Second, "the chmod's answer held", func() bool { return late.chmods.Load() > 0 })
	if _, err := f.WriteAt(make([]byte, 4096), 100_000); err != nil {
		t.Fatal(err)
	}
	committed := late.commits.Load()
	truncated := make(chan error, 1)
	go func() { truncated <- f.Truncate(200_000) }() // flushes the write now, then waits for the chmod
	await.Until(t, 20*time.Second, "the truncate's flush committed", func() bool { return late.commits.Load() > committed })
	chmodDone.Store(true)
	close(late.chmodDone)
	await.Until(t, 20*time.Second, "the truncate past the chmod", func() bool { return late.truncs.Load() > 0 })
	a := fusefs.Record(m, ino)
	truncGo.Store(true)
	close(late.truncGo)
	must(t, <-truncated)
	if a == nil || a.Size != 104_096 {
		t.Fatalf("the record after the write's commit and the chmod's late answer: %v (want size 104096, the commit's)", a)
	}
	if st, err := f.Stat(); err != nil || st.Size() != 200_000 {
		t.Fatalf("after the truncate: %v %v", st.Size(), err)
	}
}
