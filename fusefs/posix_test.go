package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn/client"
	cerrors "cairn/errors"
	"cairn/internal/await"
)

// wantErrno fails unless err carries errno want.
func wantErrno(t *testing.T, what string, err error, want syscall.Errno) {
	t.Helper()
	var got syscall.Errno
	if !errors.As(err, &got) || got != want {
		t.Errorf("%s: got %v, want %v", what, err, want)
	}
}

func fstatIno(t *testing.T, f *os.File) uint64 {
	t.Helper()
	st, err := f.Stat()
	must(t, err)
	return st.Sys().(*syscall.Stat_t).Ino
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPOSIX runs the behaviour suite on one mount: each subtest is an
// operation and its error cases, as a local file system answers them.
func TestPOSIX(t *testing.T) {
	srv := store(t)
	dir, _ := mount(t, srv, "data", nil)

	t.Run("create-read-write", func(t *testing.T) {
		p := filepath.Join(dir, "hello.txt")
		must(t, os.WriteFile(p, []byte("hello, world"), 0o644))
		if got := readFile(t, p); got != "hello, world" {
			t.Fatalf("read %q", got)
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if f != nil {
			f.Close()
		}
		wantErrno(t, "O_EXCL on existing", err, syscall.EEXIST)
		_, err = os.ReadFile(filepath.Join(dir, "missing"))
		wantErrno(t, "open missing", err, syscall.ENOENT)
		_, err = os.ReadFile(filepath.Join(dir, "hello.txt", "x"))
		wantErrno(t, "path through a file", err, syscall.ENOTDIR)
		_, err = os.Create(filepath.Join(dir, strings.Repeat("n", 256)))
		wantErrno(t, "long name", err, syscall.ENAMETOOLONG)
		// Visible through the object API too.
		st, err := os.Stat(p)
		must(t, err)
		if st.Size() != 12 || st.Mode().Perm() != 0o644 || !st.Mode().IsRegular() {
			t.Fatalf("stat: size %d mode %v", st.Size(), st.Mode())
		}
	})

	t.Run("write-at-offsets", func(t *testing.T) {
		p := filepath.Join(dir, "offsets")
		f, err := os.Create(p)
		must(t, err)
		_, err = f.WriteAt([]byte("world"), 6)
		must(t, err)
		_, err = f.WriteAt([]byte("hello "), 0)
		must(t, err)
		// Read back through the same descriptor before any close.
		buf := make([]byte, 11)
		_, err = f.ReadAt(buf, 0)
		must(t, err)
		if string(buf) != "hello world" {
			t.Fatalf("read before close %q", buf)
		}
		must(t, f.Close())
		// Overwrite in the middle after a commit, past the end with a hole.
		f, err = os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("W"), 6)
		must(t, err)
		_, err = f.WriteAt([]byte("!"), 15)
		must(t, err)
		must(t, f.Close())
		want := "hello World\x00\x00\x00\x00!"
		if got := readFile(t, p); got != want {
			t.Fatalf("got %q want %q", got, want)
		}
	})

	t.Run("truncate", func(t *testing.T) {
		p := filepath.Join(dir, "trunc")
		must(t, os.WriteFile(p, []byte("0123456789"), 0o644))
		must(t, os.Truncate(p, 4))
		if got := readFile(t, p); got != "0123" {
			t.Fatalf("shrunk: %q", got)
		}
		must(t, os.Truncate(p, 8))
		if got := readFile(t, p); got != "0123\x00\x00\x00\x00" {
			t.Fatalf("grown: %q", got)
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
		must(t, err)
		_, err = f.Write([]byte("ab"))
		must(t, err)
		must(t, f.Close())
		if got := readFile(t, p); got != "ab" {
			t.Fatalf("O_TRUNC: %q", got)
		}
		wantErrno(t, "truncate dir", os.Truncate(dir, 0), syscall.EISDIR)
		wantErrno(t, "truncate negative", os.Truncate(p, -1), syscall.EINVAL)
	})

	t.Run("append", func(t *testing.T) {
		p := filepath.Join(dir, "log")
		for i := 0; i < 3; i++ {
			f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			must(t, err)
			_, err = f.Write([]byte{'a' + byte(i)})
			must(t, err)
			_, err = f.Write([]byte{'A' + byte(i)})
			must(t, err)
			must(t, f.Close())
		}
		if got := readFile(t, p); got != "aAbBcC" {
			t.Fatalf("append: %q", got)
		}
	})

	t.Run("mkdir-rmdir-readdir", func(t *testing.T) {
		d := filepath.Join(dir, "d1")
		must(t, os.Mkdir(d, 0o750))
		wantErrno(t, "mkdir existing", os.Mkdir(d, 0o755), syscall.EEXIST)
		wantErrno(t, "mkdir missing parent", os.Mkdir(filepath.Join(dir, "nope", "x"), 0o755), syscall.ENOENT)
		st, err := os.Stat(d)
		must(t, err)
		if !st.IsDir() || st.Mode().Perm() != 0o750 {
			t.Fatalf("mode %v", st.Mode())
		}
		for _, n := range []string{"b", "a", "c"} {
			must(t, os.WriteFile(filepath.Join(d, n), []byte(n), 0o644))
		}
		must(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))
		if got := names(t, d); got != "a,b,c,sub" {
			t.Fatalf("readdir: %v", got)
		}
		wantErrno(t, "rmdir non-empty", os.Remove(d), syscall.ENOTEMPTY)
		wantErrno(t, "rmdir a file", unix.Rmdir(filepath.Join(d, "a")), syscall.ENOTDIR)
		wantErrno(t, "unlink a dir", unix.Unlink(filepath.Join(d, "sub")), syscall.EISDIR)
		must(t, os.RemoveAll(d))
		_, err = os.Stat(d)
		wantErrno(t, "stat removed", err, syscall.ENOENT)
	})

	t.Run("rename", func(t *testing.T) {
		a, b := filepath.Join(dir, "ra"), filepath.Join(dir, "rb")
		must(t, os.WriteFile(a, []byte("A"), 0o644))
		must(t, os.WriteFile(b, []byte("B"), 0o644))
		// syscall.Rename: os.Rename refuses a directory target itself.
		must(t, os.Rename(a, b)) // replaces atomically
		if got := readFile(t, b); got != "A" {
			t.Fatalf("after rename: %q", got)
		}
		_, err := os.Stat(a)
		wantErrno(t, "old name", err, syscall.ENOENT)
		must(t, os.Mkdir(filepath.Join(dir, "rd"), 0o755))
		must(t, os.Mkdir(filepath.Join(dir, "rd2"), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "rd2", "f"), nil, 0o644))
		wantErrno(t, "file over dir", syscall.Rename(b, filepath.Join(dir, "rd")), syscall.EISDIR)
		wantErrno(t, "dir over file", syscall.Rename(filepath.Join(dir, "rd"), b), syscall.ENOTDIR)
		wantErrno(t, "dir over non-empty dir", syscall.Rename(filepath.Join(dir, "rd"), filepath.Join(dir, "rd2")), syscall.ENOTEMPTY)
		wantErrno(t, "dir into itself", syscall.Rename(filepath.Join(dir, "rd"), filepath.Join(dir, "rd", "x")), syscall.EINVAL)
		wantErrno(t, "missing source", syscall.Rename(filepath.Join(dir, "nope"), b), syscall.ENOENT)
		wantErrno(t, "noreplace", unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, filepath.Join(dir, "rd2", "f"), unix.RENAME_NOREPLACE), syscall.EEXIST)
		must(t, os.Rename(b, filepath.Join(dir, "rd", "moved")))
		if got := readFile(t, filepath.Join(dir, "rd", "moved")); got != "A" {
			t.Fatalf("moved: %q", got)
		}
		must(t, os.Rename(filepath.Join(dir, "rd"), filepath.Join(dir, "rd3")))
		if got := readFile(t, filepath.Join(dir, "rd3", "moved")); got != "A" {
			t.Fatalf("dir moved: %q", got)
		}
	})

	t.Run("unlink-open-file", func(t *testing.T) {
		p := filepath.Join(dir, "open-unlinked")
		data := bytes.Repeat([]byte("x"), 3<<20)
		must(t, os.WriteFile(p, data, 0o644))
		f, err := os.Open(p)
		must(t, err)
		must(t, os.Remove(p))
		_, err = os.Stat(p)
		wantErrno(t, "stat unlinked", err, syscall.ENOENT)
		got, err := io.ReadAll(f)
		must(t, err)
		if !bytes.Equal(got, data) {
			t.Fatalf("read of unlinked open file: %d bytes", len(got))
		}
		ino := fstatIno(t, f)
		// A second descriptor writes to it and fstat follows.
		must(t, f.Close())
		f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		must(t, err)
		must(t, os.Remove(p))
		_, err = f.WriteAt([]byte("still here"), 0)
		must(t, err)
		must(t, f.Sync())
		st, err := f.Stat()
		must(t, err)
		if st.Size() != 10 {
			t.Fatalf("fstat of unlinked file: size %d", st.Size())
		}
		buf := make([]byte, 10)
		_, err = f.ReadAt(buf, 0)
		must(t, err)
		if string(buf) != "still here" {
			t.Fatalf("read back from unlinked file: %q", buf)
		}
		ino2 := fstatIno(t, f)
		must(t, f.Close())
		// The last close deletes it: nothing is left in meta. The kernel
		// sends RELEASE after close(2) has returned, so the deletion is
		// waited for, not expected at once.
		if ino == ino2 {
			t.Errorf("two files, one inode number %d", ino)
		}
		await.Until(t, 10*time.Second, "meta's removal of the unlinked files after the last close", func() bool {
			return srv.Meta().Orphans() == 0
		})
		if _, err := srv.Client().StatFresh(t.Context(), "data", ".cairn-orphans"); !cerrors.Is(cerrors.NotExist, err) {
			t.Errorf("an orphan directory exists: %v", err)
		}
		ents, err := os.ReadDir(dir)
		must(t, err)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".cairn") {
				t.Errorf("internal name listed: %s", e.Name())
			}
		}
		wantErrno(t, "unlink missing", os.Remove(p), syscall.ENOENT)
	})

	t.Run("chmod-chown-utimens", func(t *testing.T) {
		p := filepath.Join(dir, "attrs")
		must(t, os.WriteFile(p, []byte("x"), 0o644))
		must(t, os.Chmod(p, 0o600))
		must(t, os.Chown(p, 1234, 5678))
		mt := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
		must(t, os.Chtimes(p, mt, mt))
		st, err := os.Stat(p)
		must(t, err)
		sys := st.Sys().(*syscall.Stat_t)
		if st.Mode().Perm() != 0o600 || sys.Uid != 1234 || sys.Gid != 5678 || !st.ModTime().Equal(mt) {
			t.Fatalf("mode %v uid %d gid %d mtime %v", st.Mode(), sys.Uid, sys.Gid, st.ModTime())
		}
		// Kept in meta, not only in this mount.
		f, err := srv.Client().StatFresh(t.Context(), "data", "attrs")
		must(t, err)
		if f.Inode.Mode&0o7777 != 0o600 || f.Inode.Uid != 1234 || f.Inode.Gid != 5678 || f.Inode.MtimeNs != mt.UnixNano() {
			t.Fatalf("meta has %+v", f.Inode)
		}
		// touch: the time of day.
		before := time.Now().Add(-time.Second)
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, nil, 0))
		st, err = os.Stat(p)
		must(t, err)
		if st.ModTime().Before(before) {
			t.Fatalf("mtime after touch: %v", st.ModTime())
		}
		// chmod of a directory, and of a symlink's target through it.
		must(t, os.Mkdir(filepath.Join(dir, "cm"), 0o755))
		must(t, os.Chmod(filepath.Join(dir, "cm"), 0o711))
		must(t, os.Symlink("attrs", filepath.Join(dir, "attrs-link")))
		must(t, os.Chmod(filepath.Join(dir, "attrs-link"), 0o640))
		for name, want := range map[string]os.FileMode{"cm": 0o711, "attrs": 0o640} {
			if st, err := os.Stat(filepath.Join(dir, name)); err != nil || st.Mode().Perm() != want {
				t.Errorf("%s: %v, %v", name, st.Mode(), err)
			}
		}
	})

	t.Run("setid-bits-dropped", func(t *testing.T) {
		// As on a local file system: a change of owner drops set-user-ID,
		// and set-group-ID of a group-executable file; so does a change of
		// content by a writer without CAP_FSETID; root's writes keep them.
		const suid, sgid = os.ModeSetuid, os.ModeSetgid
		p := filepath.Join(dir, "setid")
		mode := func() os.FileMode {
			st, err := os.Stat(p)
			must(t, err)
			return st.Mode() & (suid | sgid | os.ModePerm)
		}
		check := func(what string, want os.FileMode) {
			t.Helper()
			if got := mode(); got != want {
				t.Errorf("%s: mode %v, want %v", what, got, want)
			}
		}
		must(t, os.WriteFile(p, []byte("x"), 0o755))
		must(t, os.Chmod(p, suid|sgid|0o755))
		must(t, os.WriteFile(p, []byte("root writes"), 0o755))
		check("after root's write", suid|sgid|0o755)
		must(t, os.Chown(p, 4321, 4321))
		check("after chown", 0o755)

		must(t, os.Chmod(p, suid|sgid|0o777))
		must(t, asUser(t, 4321, func() error {
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteAt([]byte("owner writes"), 3)
			return errors.Join(err, f.Close())
		}))
		check("after the owner's write", 0o777)

		must(t, os.Chmod(p, sgid|0o767)) // not group-executable: kept
		must(t, asUser(t, 4321, func() error { return os.WriteFile(p, []byte("again"), 0o644) }))
		check("after a write, set-group-ID without group execute", sgid|0o767)

		must(t, os.Chmod(p, suid|0o777))
		must(t, asUser(t, 4321, func() error { return os.Truncate(p, 2) }))
		check("after the owner's truncate", 0o777)
		if got := readFile(t, p); got != "ag" {
			t.Errorf("content %q", got)
		}
		must(t, os.Chmod(p, suid|sgid|0o777))
		must(t, asUser(t, 4321, func() error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			return f.Close()
		}))
		check("after the owner's O_TRUNC open", 0o777)
	})

	t.Run("permissions", func(t *testing.T) {
		p := filepath.Join(dir, "private")
		must(t, os.WriteFile(p, []byte("secret"), 0o600))
		must(t, os.Mkdir(filepath.Join(dir, "locked"), 0o700))
		// As another user, through the kernel's permission checks.
		err := asUser(t, 4321, func() error {
			_, err := os.ReadFile(p)
			return err
		})
		wantErrno(t, "read 0600 as other", err, syscall.EACCES)
		err = asUser(t, 4321, func() error { return os.WriteFile(filepath.Join(dir, "locked", "f"), nil, 0o644) })
		wantErrno(t, "create in 0700 dir as other", err, syscall.EACCES)
		err = asUser(t, 4321, func() error { return os.Chmod(p, 0o777) })
		wantErrno(t, "chmod of another's file", err, syscall.EPERM)
		err = asUser(t, 4321, func() error { return os.Chown(p, 4321, 4321) })
		wantErrno(t, "chown as non-root", err, syscall.EPERM)
		must(t, os.Mkdir(filepath.Join(dir, "shared"), 0o777))
		must(t, os.Chmod(filepath.Join(dir, "shared"), 0o777))
		err = asUser(t, 4321, func() error { return os.WriteFile(filepath.Join(dir, "shared", "mine"), []byte("x"), 0o644) })
		if err != nil {
			st, _ := os.Stat(filepath.Join(dir, "shared"))
			t.Logf("shared: %v %+v", st.Mode(), st.Sys())
		}
		must(t, err)
		st, err := os.Stat(filepath.Join(dir, "shared", "mine"))
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != 4321 {
			t.Fatalf("created as 4321: %v %+v", err, st)
		}

		// Search permission: nothing below a 0700 directory is reachable.
		must(t, os.WriteFile(filepath.Join(dir, "locked", "inner"), []byte("x"), 0o644))
		err = asUser(t, 4321, func() error { _, err := os.Stat(filepath.Join(dir, "locked", "inner")); return err })
		wantErrno(t, "stat below a 0700 dir as other", err, syscall.EACCES)
		err = asUser(t, 4321, func() error { _, err := os.ReadDir(filepath.Join(dir, "locked")); return err })
		wantErrno(t, "list a 0700 dir as other", err, syscall.EACCES)
		// Writing a file needs write permission on it, deleting one
		// needs write permission on its directory.
		must(t, os.WriteFile(filepath.Join(dir, "readonly"), []byte("r"), 0o644))
		err = asUser(t, 4321, func() error { return os.WriteFile(filepath.Join(dir, "readonly"), []byte("w"), 0o644) })
		wantErrno(t, "write a 0644 file of another", err, syscall.EACCES)
		err = asUser(t, 4321, func() error { return os.Truncate(filepath.Join(dir, "readonly"), 0) })
		wantErrno(t, "truncate a 0644 file of another", err, syscall.EACCES)
		must(t, os.Mkdir(filepath.Join(dir, "nowrite"), 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "nowrite", "f"), nil, 0o666))
		err = asUser(t, 4321, func() error { return os.Remove(filepath.Join(dir, "nowrite", "f")) })
		wantErrno(t, "unlink in a 0755 dir of another", err, syscall.EACCES)
		err = asUser(t, 4321, func() error { return os.Rename(filepath.Join(dir, "nowrite", "f"), filepath.Join(dir, "shared", "f")) })
		wantErrno(t, "rename out of a 0755 dir of another", err, syscall.EACCES)
		// The sticky bit: in a 1777 directory only the owner deletes.
		must(t, os.Mkdir(filepath.Join(dir, "sticky"), 0o755))
		must(t, os.Chmod(filepath.Join(dir, "sticky"), 0o777|os.ModeSticky))
		must(t, os.WriteFile(filepath.Join(dir, "sticky", "roots"), nil, 0o666))
		must(t, os.Chmod(filepath.Join(dir, "sticky", "roots"), 0o666)) // past the umask
		err = asUser(t, 4321, func() error { return os.Remove(filepath.Join(dir, "sticky", "roots")) })
		wantErrno(t, "unlink another's file in a sticky dir", err, syscall.EPERM)
		must(t, asUser(t, 4321, func() error { return os.WriteFile(filepath.Join(dir, "sticky", "own"), nil, 0o644) }))
		must(t, asUser(t, 4321, func() error { return os.Remove(filepath.Join(dir, "sticky", "own")) }))
		// Times: only the owner sets explicit ones; anyone who may write
		// sets them to now.
		mt := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
		err = asUser(t, 4321, func() error { return os.Chtimes(filepath.Join(dir, "sticky", "roots"), mt, mt) })
		wantErrno(t, "explicit utimens of another's file", err, syscall.EPERM)
		must(t, asUser(t, 4321, func() error {
			return unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, "sticky", "roots"), nil, 0)
		}))
		// Mode bits a non-member may not set: setgid is cleared by the kernel
		// when the owner is not in the group.
		must(t, asUser(t, 4321, func() error { return os.WriteFile(filepath.Join(dir, "shared", "sg"), nil, 0o644) }))
		must(t, os.Chown(filepath.Join(dir, "shared", "sg"), 4321, 4322))
		must(t, asUser(t, 4321, func() error { return os.Chmod(filepath.Join(dir, "shared", "sg"), 0o2755) }))
		if st, err := os.Stat(filepath.Join(dir, "shared", "sg")); err != nil || st.Mode()&os.ModeSetgid != 0 {
			t.Errorf("setgid kept for a non-member: %v %v", st.Mode(), err)
		}
	})

	t.Run("symlink", func(t *testing.T) {
		l := filepath.Join(dir, "link")
		must(t, os.WriteFile(filepath.Join(dir, "target"), []byte("T"), 0o644))
		must(t, os.Symlink("target", l))
		got, err := os.Readlink(l)
		must(t, err)
		if got != "target" {
			t.Fatalf("readlink %q", got)
		}
		if s := readFile(t, l); s != "T" {
			t.Fatalf("through link %q", s)
		}
		st, err := os.Lstat(l)
		must(t, err)
		if st.Mode()&os.ModeSymlink == 0 || st.Size() != 6 {
			t.Fatalf("lstat %v size %d", st.Mode(), st.Size())
		}
		wantErrno(t, "symlink over existing", os.Symlink("x", l), syscall.EEXIST)
		_, err = os.Readlink(filepath.Join(dir, "target"))
		wantErrno(t, "readlink of a file", err, syscall.EINVAL)
	})

	t.Run("hardlink", func(t *testing.T) {
		a, b := filepath.Join(dir, "h1"), filepath.Join(dir, "h2")
		must(t, os.WriteFile(a, []byte("shared"), 0o644))
		must(t, os.Link(a, b))
		sa, _ := os.Stat(a)
		sb, _ := os.Stat(b)
		if sa.Sys().(*syscall.Stat_t).Ino != sb.Sys().(*syscall.Stat_t).Ino || sb.Sys().(*syscall.Stat_t).Nlink != 2 {
			t.Fatalf("not one inode with two links: %+v %+v", sa.Sys(), sb.Sys())
		}
		must(t, os.Remove(a))
		if got := readFile(t, b); got != "shared" {
			t.Fatalf("after unlinking one name: %q", got)
		}
		st, _ := os.Stat(b)
		if n := st.Sys().(*syscall.Stat_t).Nlink; n != 1 {
			t.Fatalf("nlink %d", n)
		}
		wantErrno(t, "link to dir", os.Link(dir+"/rd3", dir+"/rdlink"), syscall.EPERM)
		wantErrno(t, "link over existing", os.Link(b, filepath.Join(dir, "target")), syscall.EEXIST)
	})

	t.Run("xattr", func(t *testing.T) {
		p := filepath.Join(dir, "xa")
		must(t, os.WriteFile(p, nil, 0o644))
		must(t, unix.Setxattr(p, "user.color", []byte("blue"), 0))
		buf := make([]byte, 64)
		n, err := unix.Getxattr(p, "user.color", buf)
		must(t, err)
		if string(buf[:n]) != "blue" {
			t.Fatalf("getxattr %q", buf[:n])
		}
		wantErrno(t, "XATTR_CREATE on existing", unix.Setxattr(p, "user.color", []byte("x"), unix.XATTR_CREATE), syscall.EEXIST)
		wantErrno(t, "XATTR_REPLACE on missing", unix.Setxattr(p, "user.size", []byte("x"), unix.XATTR_REPLACE), syscall.ENODATA)
		n, err = unix.Listxattr(p, buf)
		must(t, err)
		if string(buf[:n]) != "user.color\x00" {
			t.Fatalf("listxattr %q", buf[:n])
		}
		must(t, unix.Removexattr(p, "user.color"))
		_, err = unix.Getxattr(p, "user.color", buf)
		wantErrno(t, "removed", err, syscall.ENODATA)
		must(t, unix.Setxattr(p, "trusted.x", []byte("x"), 0)) // root may
		wantErrno(t, "system namespace", unix.Setxattr(p, "system.x", []byte("x"), 0), syscall.ENOTSUP)
	})

	t.Run("fsync-statfs", func(t *testing.T) {
		p := filepath.Join(dir, "synced")
		f, err := os.Create(p)
		must(t, err)
		_, err = f.Write([]byte("durable"))
		must(t, err)
		must(t, f.Sync())
		// Committed before close: the object API sees it.
		got, err := srv.Client().StatFresh(t.Context(), "data", "synced")
		must(t, err)
		if got.Size() != 7 {
			t.Fatalf("after fsync, meta has size %d", got.Size())
		}
		must(t, f.Close())
		// A directory's fsync makes its entries durable (and succeeds:
		// databases and git fsync the directory after a create).
		d, err := os.Open(dir)
		must(t, err)
		must(t, d.Sync())
		must(t, d.Close())
		var st unix.Statfs_t
		must(t, unix.Statfs(dir, &st))
		if st.Bavail == 0 || st.Namelen != 255 {
			t.Fatalf("statfs %+v", st)
		}
	})

	t.Run("locks", func(t *testing.T) {
		p := filepath.Join(dir, "lockfile")
		must(t, os.WriteFile(p, nil, 0o644))
		f1, err := os.Open(p)
		must(t, err)
		defer f1.Close()
		f2, err := os.Open(p)
		must(t, err)
		defer f2.Close()
		must(t, unix.Flock(int(f1.Fd()), unix.LOCK_EX|unix.LOCK_NB))
		wantErrno(t, "second flock", unix.Flock(int(f2.Fd()), unix.LOCK_EX|unix.LOCK_NB), syscall.EWOULDBLOCK)
		must(t, unix.Flock(int(f1.Fd()), unix.LOCK_UN))
		must(t, unix.Flock(int(f2.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	})

	t.Run("errno", func(t *testing.T) {
		must(t, os.WriteFile(filepath.Join(dir, "plain"), []byte("p"), 0o644))
		_, err := os.OpenFile(dir, os.O_WRONLY, 0)
		wantErrno(t, "open a dir for writing", err, syscall.EISDIR)
		names(t, dir) // listed: a lookup of a new name is answered here, not by meta
		wantErrno(t, "mkdir long name", os.Mkdir(filepath.Join(dir, strings.Repeat("d", 256)), 0o755), syscall.ENAMETOOLONG)
		wantErrno(t, "create long name", os.WriteFile(filepath.Join(dir, strings.Repeat("f", 256)), nil, 0o644), syscall.ENAMETOOLONG)
		wantErrno(t, "symlink long name", os.Symlink("x", filepath.Join(dir, strings.Repeat("s", 256))), syscall.ENAMETOOLONG)
		wantErrno(t, "rmdir missing", unix.Rmdir(filepath.Join(dir, "nope")), syscall.ENOENT)
		wantErrno(t, "mkdir under a file", os.Mkdir(filepath.Join(dir, "plain", "x"), 0o755), syscall.ENOTDIR)
		wantErrno(t, "create under a file", os.WriteFile(filepath.Join(dir, "plain", "x"), nil, 0o644), syscall.ENOTDIR)
		wantErrno(t, "link of a missing file", os.Link(filepath.Join(dir, "nope"), filepath.Join(dir, "l")), syscall.ENOENT)
		wantErrno(t, "rename exchange", unix.Renameat2(unix.AT_FDCWD, filepath.Join(dir, "plain"), unix.AT_FDCWD, filepath.Join(dir, "hello.txt"), unix.RENAME_EXCHANGE), syscall.EINVAL)
		must(t, os.Symlink("nowhere", filepath.Join(dir, "dangling")))
		_, err = os.ReadFile(filepath.Join(dir, "dangling"))
		wantErrno(t, "open through a dangling symlink", err, syscall.ENOENT)
		buf := make([]byte, 2)
		must(t, unix.Setxattr(filepath.Join(dir, "plain"), "user.long", []byte("0123456789"), 0))
		_, err = unix.Getxattr(filepath.Join(dir, "plain"), "user.long", buf)
		wantErrno(t, "getxattr into a small buffer", err, syscall.ERANGE)
		if n, err := unix.Getxattr(filepath.Join(dir, "plain"), "user.long", nil); err != nil || n != 10 {
			t.Errorf("getxattr size probe: %d, %v", n, err)
		}
		_, err = unix.Listxattr(filepath.Join(dir, "plain"), buf)
		wantErrno(t, "listxattr into a small buffer", err, syscall.ERANGE)
		_, err = unix.Getxattr(filepath.Join(dir, "nope"), "user.x", buf)
		wantErrno(t, "getxattr of a missing file", err, syscall.ENOENT)
	})

	t.Run("append-ignores-offset", func(t *testing.T) {
		p := filepath.Join(dir, "log2")
		must(t, os.WriteFile(p, []byte("0123"), 0o644))
		f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
		must(t, err)
		defer f.Close()
		// pwrite on an O_APPEND descriptor appends (Linux).
		_, err = unix.Pwrite(int(f.Fd()), []byte("ab"), 0)
		must(t, err)
		// A plain descriptor's unflushed write goes before the append.
		g, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		_, err = g.WriteAt([]byte("XY"), 6)
		must(t, err)
		_, err = f.Write([]byte("cd"))
		must(t, err)
		must(t, g.Close())
		buf := make([]byte, 16)
		n, _ := f.ReadAt(buf, 0)
		if got := string(buf[:n]); got != "0123abXYcd" {
			t.Fatalf("appended: %q", got)
		}
	})

	t.Run("rename-replacing", func(t *testing.T) {
		// A directory replaces an empty one.
		must(t, os.MkdirAll(filepath.Join(dir, "rr1", "in"), 0o755))
		must(t, os.Mkdir(filepath.Join(dir, "rr2"), 0o755))
		must(t, syscall.Rename(filepath.Join(dir, "rr1"), filepath.Join(dir, "rr2")))
		if got := names(t, filepath.Join(dir, "rr2")); got != "in" {
			t.Fatalf("replaced dir lists %q", got)
		}
		// A file replaces one that is open: the open one keeps its data
		// until it is closed, as an unlinked file does.
		old, nw := filepath.Join(dir, "rr-old"), filepath.Join(dir, "rr-new")
		data := bytes.Repeat([]byte("old!"), 1<<18)
		must(t, os.WriteFile(old, data, 0o644))
		must(t, os.WriteFile(nw, []byte("new"), 0o644))
		f, err := os.Open(old)
		must(t, err)
		defer f.Close()
		must(t, os.Rename(nw, old))
		if got := readFile(t, old); got != "new" {
			t.Fatalf("after rename: %q", got)
		}
		got, err := io.ReadAll(f)
		must(t, err)
		if !bytes.Equal(got, data) {
			t.Fatalf("open replaced file reads %d bytes, want %d", len(got), len(data))
		}
	})

	t.Run("fdatasync", func(t *testing.T) {
		p := filepath.Join(dir, "datasynced")
		f, err := os.Create(p)
		must(t, err)
		defer f.Close()
		_, err = f.Write([]byte("data only"))
		must(t, err)
		must(t, unix.Fdatasync(int(f.Fd())))
		got, err := srv.Client().StatFresh(t.Context(), "data", "datasynced")
		must(t, err)
		if got.Size() != 9 {
			t.Fatalf("after fdatasync, meta has size %d", got.Size())
		}
	})

	t.Run("fcntl-locks", func(t *testing.T) {
		p := filepath.Join(dir, "fcntl")
		must(t, os.WriteFile(p, make([]byte, 100), 0o644))
		f1, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		defer f1.Close()
		f2, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		defer f2.Close()
		lk := func(typ int16, start, n int64) *unix.Flock_t {
			return &unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: start, Len: n}
		}
		// Open file description locks conflict between descriptors of
		// one process; classic POSIX locks conflict with them.
		must(t, unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, lk(unix.F_WRLCK, 0, 10)))
		wantErrno(t, "overlapping OFD lock", unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, lk(unix.F_WRLCK, 5, 10)), syscall.EAGAIN)
		must(t, unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, lk(unix.F_WRLCK, 10, 10))) // disjoint
		q := lk(unix.F_WRLCK, 0, 1)
		must(t, unix.FcntlFlock(f2.Fd(), unix.F_OFD_GETLK, q))
		if q.Type != unix.F_WRLCK || q.Start != 0 || q.Len != 10 {
			t.Fatalf("F_OFD_GETLK reports %+v", q)
		}
		wantErrno(t, "POSIX lock over an OFD lock", unix.FcntlFlock(f2.Fd(), unix.F_SETLK, lk(unix.F_RDLCK, 0, 5)), syscall.EAGAIN)
		must(t, unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, lk(unix.F_UNLCK, 0, 10)))
		must(t, unix.FcntlFlock(f2.Fd(), unix.F_SETLK, lk(unix.F_RDLCK, 0, 5)))
		wantErrno(t, "OFD write lock over a POSIX read lock", unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, lk(unix.F_WRLCK, 0, 1)), syscall.EAGAIN)
	})

	t.Run("mmap", func(t *testing.T) {
		// A file written by another client, mapped read-only (a dataset
		// read with numpy.memmap).
		want := bytes.Repeat([]byte("0123456789abcdef"), 300_000) // 4.8 MB: several blocks
		_, err := srv.Client().Put(t.Context(), "data", "mapped-ro", bytes.NewReader(want), client.PutOptions{})
		must(t, err)
		// The maps are touched in a child process: a page fault on the
		// mount blocks its thread in the kernel until the mount answers,
		// and a mount in this process that must collect garbage to answer
		// waits for every thread to stop, that one included (a deadlock
		// of the test, not of the mount, seen under load).
		mmapChild(t, "ro", filepath.Join(dir, "mapped-ro"), fmt.Sprint(len(want)))

		// A shared writable map: msync'ed stores reach the store, as
		// after write(2) and fsync.
		p := filepath.Join(dir, "mapped-rw")
		must(t, os.WriteFile(p, make([]byte, 3<<20), 0o644))
		mmapChild(t, "rw", p)
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		defer f.Close()
		must(t, f.Sync())
		got := make([]byte, 3<<20)
		_, err = f.ReadAt(got, 0)
		must(t, err)
		if string(got[100:110]) != "first page" || string(got[2<<20+7:2<<20+16]) != "third MiB" {
			t.Fatal("read(2) does not see the mapped stores")
		}
		st, err := srv.Client().StatFresh(t.Context(), "data", "mapped-rw")
		must(t, err)
		stored, err := srv.Client().ReadAll(t.Context(), st)
		must(t, err)
		if !bytes.Equal(stored, got) {
			t.Fatal("the store does not hold the mapped stores after msync and fsync")
		}
	})

	t.Run("large-file", func(t *testing.T) {
		p := filepath.Join(dir, "large")
		data := make([]byte, 20<<20+12345)
		for i := range data {
			data[i] = byte(i * 7 / 3)
		}
		must(t, os.WriteFile(p, data, 0o644))
		got, err := os.ReadFile(p)
		must(t, err)
		if !bytes.Equal(got, data) {
			t.Fatal("large file differs")
		}
		f, err := os.Open(p)
		must(t, err)
		defer f.Close()
		buf := make([]byte, 4096)
		for _, off := range []int64{15 << 20, 1, 8<<20 - 100, int64(len(data)) - 10} {
			n, err := f.ReadAt(buf, off)
			if err != nil && err != io.EOF {
				t.Fatal(err)
			}
			if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
				t.Fatalf("ReadAt %d differs", off)
			}
		}
	})
}

// TestRmdirQueuedCreate: a file created in a directory and closed has its
// commit queued; rmdir of the directory right after must still answer
// ENOTEMPTY (meta had not heard of the file) and the file must survive.
func TestRmdirQueuedCreate(t *testing.T) {
	srv := store(t)
	dir, _ := mount(t, srv, "data", nil)
	for i := range 20 {
		d := filepath.Join(dir, fmt.Sprint("d", i))
		must(t, os.Mkdir(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "f"), []byte("kept"), 0o644))
		wantErrno(t, "rmdir with a queued create", unix.Rmdir(d), syscall.ENOTEMPTY)
		if got := readFile(t, filepath.Join(d, "f")); got != "kept" {
			t.Fatalf("%s/f reads %q", d, got)
		}
	}
}

// TestMkdirBehind: mkdir answers before meta has the directory; the
// mount's later calls below it (a create, a rename, a symlink, a chmod)
// and other clients' looks must all find it, parents before children.
func TestMkdirBehind(t *testing.T) {
	srv := store(t)
	dir, m := mount(t, srv, "data", nil)
	for i := range 30 {
		deep := filepath.Join(dir, fmt.Sprint("t", i), "a", "b", "c", "d", "e")
		must(t, os.MkdirAll(deep, 0o755))
		must(t, os.WriteFile(filepath.Join(deep, "f"), []byte(fmt.Sprint(i)), 0o644))
		must(t, os.Rename(filepath.Join(deep, "f"), filepath.Join(deep, "g")))
		must(t, os.Symlink("g", filepath.Join(deep, "s")))
		must(t, os.Chmod(deep, 0o700))
		// Another client looks at once: meta recalls the mount first.
		rel := fmt.Sprintf("t%d/a/b/c/d/e/g", i)
		f, err := srv.Client().StatFresh(t.Context(), "data", rel)
		must(t, err)
		got, err := srv.Client().ReadAll(t.Context(), f)
		must(t, err)
		if string(got) != fmt.Sprint(i) {
			t.Fatalf("%s reads %q", rel, got)
		}
	}
	m.Sync()
	d, err := srv.Client().StatFresh(t.Context(), "data", "t29/a/b/c/d/e")
	must(t, err)
	if d.Inode.Mode != 0o700 {
		t.Fatalf("mode %o after chmod", d.Inode.Mode)
	}
	// 180 mkdirs; their own meta calls are the MountDirty after each
	// recall (30) and a MountReserve, never a Mkdir.
	if got := m.Stats().Op("mkdir").Meta.Load(); got > 31 {
		t.Fatalf("180 mkdirs made %d meta calls, want at most 31 (committed behind)", got)
	}
}

// mmapChild runs an mmap step (see TestMmapChild) in a child process.
func mmapChild(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMmapChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CAIRN_MMAP_CHILD="+strings.Join(args, "\t"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mmap %v: %v\n%s", args, err, out)
	}
}

// TestMmapChild is the child process of mmapChild (it does nothing in a
// normal run): "ro PATH LEN" maps PATH read-only and checks the pattern
// TestPOSIX/mmap wrote; "rw PATH" stores through a shared writable map of
// 3 MiB and msyncs.
func TestMmapChild(t *testing.T) {
	env := os.Getenv("CAIRN_MMAP_CHILD")
	if env == "" {
		return
	}
	a := strings.Split(env, "\t")
	f, err := os.OpenFile(a[1], os.O_RDWR, 0)
	if a[0] == "ro" {
		f, err = os.Open(a[1])
	}
	must(t, err)
	defer f.Close()
	switch a[0] {
	case "ro":
		var n int
		fmt.Sscan(a[2], &n)
		want := bytes.Repeat([]byte("0123456789abcdef"), n/16)
		m, err := unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_SHARED)
		must(t, err)
		if !bytes.Equal(m, want) {
			t.Fatal("read-only map differs from the file")
		}
		must(t, unix.Munmap(m))
	case "rw":
		m, err := unix.Mmap(int(f.Fd()), 0, 3<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		must(t, err)
		copy(m[100:], "first page")
		copy(m[2<<20+7:], "third MiB")
		must(t, unix.Msync(m, unix.MS_SYNC))
		must(t, unix.Munmap(m))
		must(t, f.Sync())
	}
}
