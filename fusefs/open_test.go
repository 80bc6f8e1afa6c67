package fusefs_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// TestOpenFilesAreInodes: a descriptor on one mount keeps the file it
// opened whatever another mount does to its name, and an unlinked file's
// data lives until its last close on any mount, then goes (no orphan
// directory, nothing left in meta).
func TestOpenFilesAreInodes(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	noOrphans := func(t *testing.T) {
		t.Helper()
		await.Until(t, 15*time.Second, "meta's removal of the unlinked files after the last close", func() bool {
			return srv.Meta().Orphans() == 0
		})
		for _, d := range []string{a, b} {
			if _, err := os.Stat(filepath.Join(d, ".cairn-orphans")); !os.IsNotExist(err) {
				t.Errorf("an orphan directory: %v", err)
			}
		}
	}

	t.Run("renamed-over-by-another-mount", func(t *testing.T) {
		old := bytes.Repeat([]byte("old!"), 300_000) // 1.2 MB: more than one block
		must(t, os.WriteFile(filepath.Join(a, "ro"), old, 0o644))
		f, err := os.Open(filepath.Join(a, "ro"))
		must(t, err)
		defer f.Close()
		head := make([]byte, 10)
		_, err = f.ReadAt(head, 0)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(b, "ro.new"), []byte("the new file"), 0o644))
		must(t, os.Rename(filepath.Join(b, "ro.new"), filepath.Join(b, "ro")))
		got, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
		must(t, err)
		if !bytes.Equal(got, old) {
			t.Fatalf("the open descriptor reads %d bytes (%.12q), want the old file's %d", len(got), got, len(old))
		}
		if got := readFile(t, filepath.Join(a, "ro")); got != "the new file" {
			t.Fatalf("a fresh open reads %d bytes, not the new file", len(got))
		}
		st, err := srv.Client().StatFresh(t.Context(), "data", "ro")
		must(t, err)
		if st.Size() != int64(len("the new file")) {
			t.Fatalf("the name holds %d bytes, want the new file's", st.Size())
		}
		must(t, f.Close())
		noOrphans(t)
	})

	t.Run("unlinked-by-another-mount", func(t *testing.T) {
		p := filepath.Join(a, "ul")
		must(t, os.WriteFile(p, []byte("0123456789"), 0o644))
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		defer f.Close()
		must(t, os.Remove(filepath.Join(b, "ul")))
		if _, err := os.Stat(filepath.Join(b, "ul")); !os.IsNotExist(err) {
			t.Fatalf("stat on the unlinking mount: %v", err)
		}
		// Reads and writes go on until close, through fsyncs (commits).
		_, err = f.WriteAt([]byte("abc"), 10)
		must(t, err)
		must(t, f.Sync())
		buf := make([]byte, 13)
		_, err = f.ReadAt(buf, 0)
		must(t, err)
		if string(buf) != "0123456789abc" {
			t.Fatalf("read after another mount's unlink: %q", buf)
		}
		if srv.Meta().Orphans() != 1 {
			t.Fatalf("meta keeps %d unlinked files, want 1", srv.Meta().Orphans())
		}
		must(t, f.Close())
		noOrphans(t)
	})

	t.Run("log-rotation", func(t *testing.T) {
		// A writer on one mount, rotation by another: the writes go on
		// to the renamed file.
		p := filepath.Join(a, "app.log")
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
		must(t, err)
		_, err = f.WriteAt([]byte("line 1\n"), 0)
		must(t, err)
		must(t, f.Sync())
		must(t, os.Rename(filepath.Join(b, "app.log"), filepath.Join(b, "app.log.1")))
		_, err = f.WriteAt([]byte("line 2\n"), 7)
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
		if _, err := os.Stat(filepath.Join(b, "app.log")); !os.IsNotExist(err) {
			t.Fatalf("the old name came back: %v", err)
		}
		st, err := srv.Client().StatFresh(t.Context(), "data", "app.log.1")
		must(t, err)
		got, err := srv.Client().ReadAll(t.Context(), st)
		must(t, err)
		if string(got) != "line 1\nline 2\n" {
			t.Fatalf("the rotated log holds %q", got)
		}
	})

	t.Run("unlinked-open-on-both-mounts", func(t *testing.T) {
		// The data lives until the last descriptor on any mount closes.
		p := "both"
		must(t, os.WriteFile(filepath.Join(a, p), []byte(strings.Repeat("z", 5000)), 0o644))
		fa, err := os.Open(filepath.Join(a, p))
		must(t, err)
		defer fa.Close()
		fb, err := os.Open(filepath.Join(b, p))
		must(t, err)
		defer fb.Close()
		must(t, os.Remove(filepath.Join(a, p)))
		must(t, fa.Close())
		got, err := io.ReadAll(fb)
		must(t, err)
		if len(got) != 5000 {
			t.Fatalf("the other mount's descriptor reads %d bytes after the first closed", len(got))
		}
		must(t, fb.Close())
		noOrphans(t)
	})
}

// TestOrphansOfDeadSession: a file unlinked while a mount holds it open
// is kept until that mount's session ends for good; then meta removes it
// (a lease later) although the descriptor was never closed.
func TestOrphansOfDeadSession(t *testing.T) {
	srv := store(t)
	b, _ := mount(t, srv, "data", nil)
	must(t, os.WriteFile(filepath.Join(b, "held"), []byte("data of a dead mount's descriptor"), 0o644))
	st, err := os.Stat(filepath.Join(b, "held"))
	must(t, err)
	ino := st.Sys().(*syscall.Stat_t).Ino

	// A mount's session, as the mount speaks it: it opens the file and
	// then dies without closing it.
	mc, conn, err := meta.Dial(srv.Addr("meta"), meta.DialTLS(srv.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	must(t, err)
	defer conn.Close()
	ctx, die := context.WithCancel(t.Context())
	defer die()
	stream, err := mc.MountSession(ctx)
	must(t, err)
	must(t, stream.Send(&metapb.MountSessionMsg{Session: "dead-mount"}))
	must(t, stream.Send(&metapb.MountSessionMsg{Open: ino}))
	// The session is known once its first event arrives (a heartbeat).
	_, err = stream.Recv()
	must(t, err)

	must(t, os.Remove(filepath.Join(b, "held")))
	if n := srv.Meta().Orphans(); n != 1 {
		t.Fatalf("meta keeps %d unlinked files while a session holds one open, want 1", n)
	}
	die()
	await.Until(t, 4*meta.SessionLease, "the removal of the dead session's unlinked file", func() bool {
		return srv.Meta().Orphans() == 0
	})
}
