package fusefs_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"cairn/fusefs"
)

// The POSIX cases a conformance suite checks, per system call with its
// error cases, as a table: each call runs in a child process (this test
// binary again) with the real uid and gid of the case, so the kernel
// checks permissions and privileges (CAP_CHOWN, CAP_MKNOD, CAP_FOWNER) as
// for that user, on a mount with allow_other.

const nobody = 65534

// syscallChild runs one system call named by args and prints its errno
// (0: success). It is the whole child: TestMain calls it when
// CAIRN_TEST_SYSCALL is set.
func syscallChild(args []string) int {
	fmt.Print(int(callErrno(doCall(args))))
	return 0
}

func callErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var en syscall.Errno
	if e, ok := err.(*os.PathError); ok {
		err = e.Err
	}
	if e, ok := err.(*os.LinkError); ok {
		err = e.Err
	}
	if e, ok := err.(*os.SyscallError); ok {
		err = e.Err
	}
	if e, ok := err.(syscall.Errno); ok {
		en = e
	} else {
		return syscall.Errno(1 << 20) // not an errno: shows as a mismatch
	}
	return en
}

func num(s string) int64 {
	n, err := strconv.ParseInt(s, 0, 64)
	if err != nil {
		panic(err)
	}
	return n
}

// openFlags parses "creat|excl|wronly"-style flags.
func openFlags(s string) int {
	flags := 0
	for _, f := range strings.Split(s, "|") {
		flags |= map[string]int{
			"rdonly": unix.O_RDONLY, "wronly": unix.O_WRONLY, "rdwr": unix.O_RDWR, "creat": unix.O_CREAT,
			"excl": unix.O_EXCL, "trunc": unix.O_TRUNC, "nofollow": unix.O_NOFOLLOW, "directory": unix.O_DIRECTORY,
		}[f]
	}
	return flags
}

// utimeArg is a utimensat time: "now", "omit" or nanoseconds.
func utimeArg(s string) unix.Timespec {
	switch s {
	case "now":
		return unix.Timespec{Nsec: unix.UTIME_NOW}
	case "omit":
		return unix.Timespec{Nsec: unix.UTIME_OMIT}
	}
	return unix.NsecToTimespec(num(s))
}

func doCall(a []string) error {
	switch a[0] {
	case "chmod":
		return unix.Chmod(a[1], uint32(num(a[2])))
	case "chown":
		return unix.Chown(a[1], int(num(a[2])), int(num(a[3])))
	case "lchown":
		return unix.Lchown(a[1], int(num(a[2])), int(num(a[3])))
	case "link":
		return unix.Link(a[1], a[2])
	case "mkdir":
		return unix.Mkdir(a[1], uint32(num(a[2])))
	case "mkfifo":
		return unix.Mkfifo(a[1], uint32(num(a[2])))
	case "mknod":
		typ := map[string]uint32{"c": unix.S_IFCHR, "b": unix.S_IFBLK, "f": unix.S_IFIFO, "s": unix.S_IFSOCK, "r": unix.S_IFREG}[a[2]]
		return unix.Mknod(a[1], typ|uint32(num(a[3])), int(unix.Mkdev(uint32(num(a[4])), uint32(num(a[5])))))
	case "open":
		fd, err := unix.Open(a[1], openFlags(a[2]), uint32(num(a[3])))
		if err == nil {
			unix.Close(fd)
		}
		return err
	case "rename":
		return unix.Rename(a[1], a[2])
	case "rmdir":
		return unix.Rmdir(a[1])
	case "symlink":
		return unix.Symlink(a[1], a[2])
	case "truncate":
		return unix.Truncate(a[1], num(a[2]))
	case "ftruncate":
		fd, err := unix.Open(a[1], openFlags(a[2]), 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Ftruncate(fd, num(a[3]))
	case "unlink":
		return unix.Unlink(a[1])
	case "setxattr":
		return unix.Setxattr(a[1], a[2], []byte(a[3]), 0)
	case "getxattr":
		_, err := unix.Getxattr(a[1], a[2], make([]byte, 64<<10))
		return err
	case "utimensat":
		ts := []unix.Timespec{utimeArg(a[2]), utimeArg(a[3])}
		return unix.UtimesNanoAt(unix.AT_FDCWD, a[1], ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	panic("unknown call " + a[0])
}

// syscallCase is one call in a fresh directory d (mode 0755, root's):
// setup prepares d as root, call runs as uid (and gid uid) with %d
// replaced by d, and check looks at the result as root.
type syscallCase struct {
	name  string
	setup func(t *testing.T, d string)
	uid   int
	call  string
	want  syscall.Errno
	check func(t *testing.T, d string)
}

// Setups and checks shared by the table.
func file(name string, mode uint32) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		p := filepath.Join(d, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte("data"), 0o600))
		must(t, unix.Chmod(p, mode)) // raw bits: os.Chmod drops 01000, 02000 and 04000
	}
}

func dirs(names ...string) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		for _, n := range names {
			must(t, os.MkdirAll(filepath.Join(d, n), 0o755))
		}
	}
}

func all(fs ...func(*testing.T, string)) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		for _, f := range fs {
			f(t, d)
		}
	}
}

func chmodTo(name string, mode uint32) func(*testing.T, string) {
	return func(t *testing.T, d string) { must(t, unix.Chmod(filepath.Join(d, name), mode)) }
}

func chownTo(name string, uid int) func(*testing.T, string) {
	return func(t *testing.T, d string) { must(t, os.Lchown(filepath.Join(d, name), uid, uid)) }
}

func loop(name string) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		must(t, os.Symlink(name+"2", filepath.Join(d, name)))
		must(t, os.Symlink(name, filepath.Join(d, name+"2")))
	}
}

func lstat(t *testing.T, p string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	must(t, syscall.Lstat(p, &st))
	return &st
}

func wantMode(name string, mode uint32) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		t.Helper()
		if st := lstat(t, filepath.Join(d, name)); st.Mode != mode {
			t.Fatalf("%s: mode %#o, want %#o", name, st.Mode, mode)
		}
	}
}

func wantNlink(name string, n uint64) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		t.Helper()
		if st := lstat(t, filepath.Join(d, name)); uint64(st.Nlink) != n {
			t.Fatalf("%s: nlink %d, want %d", name, st.Nlink, n)
		}
	}
}

func wantGone(name string) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(d, name), &st); err != syscall.ENOENT {
			t.Fatalf("%s: lstat %v, want ENOENT", name, err)
		}
	}
}

func wantOwner(name string, uid uint32) func(*testing.T, string) {
	return func(t *testing.T, d string) {
		t.Helper()
		if st := lstat(t, filepath.Join(d, name)); st.Uid != uid {
			t.Fatalf("%s: uid %d, want %d", name, st.Uid, uid)
		}
	}
}

var long = strings.Repeat("x", 256)

var syscallCases = []syscallCase{
	// chmod
	{name: "chmod", setup: file("f", 0o644), call: "chmod %d/f 0", check: wantMode("f", unix.S_IFREG)},
	{name: "chmod/setuid", setup: file("f", 0o644), call: "chmod %d/f 04755", check: wantMode("f", unix.S_IFREG|0o4755)},
	{name: "chmod/EPERM", setup: file("f", 0o644), uid: nobody, call: "chmod %d/f 0777", want: unix.EPERM},
	{name: "chmod/own", setup: all(file("f", 0o644), chownTo("f", nobody)), uid: nobody, call: "chmod %d/f 0600", check: wantMode("f", unix.S_IFREG|0o600)},
	{name: "chmod/ENOENT", call: "chmod %d/missing 0644", want: unix.ENOENT},
	{name: "chmod/ENOTDIR", setup: file("f", 0o644), call: "chmod %d/f/x 0644", want: unix.ENOTDIR},
	{name: "chmod/ENAMETOOLONG", call: "chmod %d/" + long + " 0644", want: unix.ENAMETOOLONG},
	{name: "chmod/ELOOP", setup: loop("l"), call: "chmod %d/l 0644", want: unix.ELOOP},
	{name: "chmod/EACCES", setup: all(file("s/f", 0o644), chownTo("s/f", nobody), chmodTo("s", 0o700)), uid: nobody, call: "chmod %d/s/f 0600", want: unix.EACCES},
	// chown
	{name: "chown", setup: file("f", 0o644), call: "chown %d/f 4321 4321", check: wantOwner("f", 4321)},
	{name: "chown/EPERM", setup: all(file("f", 0o644), chownTo("f", nobody)), uid: nobody, call: "chown %d/f 0 0", want: unix.EPERM},
	{name: "chown/EPERM-others", setup: file("f", 0o666), uid: nobody, call: "chown %d/f 65534 65534", want: unix.EPERM},
	{name: "chown/own-noop", setup: all(file("f", 0o644), chownTo("f", nobody)), uid: nobody, call: "chown %d/f -1 65534", check: wantOwner("f", nobody)},
	{name: "chown/ENOENT", call: "chown %d/missing 1 1", want: unix.ENOENT},
	{name: "chown/ELOOP", setup: loop("l"), call: "chown %d/l 1 1", want: unix.ELOOP},
	{name: "lchown/symlink", setup: func(t *testing.T, d string) { must(t, os.Symlink("missing", filepath.Join(d, "l"))) }, call: "lchown %d/l 77 77", check: wantOwner("l", 77)},
	{name: "chown/setuid-dropped", setup: all(file("f", 0o4755)), call: "chown %d/f 5 5", check: wantMode("f", unix.S_IFREG|0o755)},
	// link
	{name: "link", setup: file("f", 0o644), call: "link %d/f %d/g", check: all(wantNlink("f", 2), wantNlink("g", 2))},
	{name: "link/EEXIST", setup: all(file("f", 0o644), file("g", 0o644)), call: "link %d/f %d/g", want: unix.EEXIST},
	{name: "link/EPERM-dir", setup: dirs("d"), call: "link %d/d %d/e", want: unix.EPERM},
	{name: "link/ENOENT", call: "link %d/missing %d/g", want: unix.ENOENT},
	{name: "link/ENAMETOOLONG", setup: file("f", 0o644), call: "link %d/f %d/" + long, want: unix.ENAMETOOLONG},
	{name: "link/EPERM-protected", setup: file("f", 0o644), uid: nobody, call: "link %d/f %d/g", want: unix.EPERM},
	{name: "link/EACCES", setup: all(file("f", 0o644), chownTo("f", nobody)), uid: nobody, call: "link %d/f %d/g", want: unix.EACCES},
	{name: "link/EXDEV", setup: file("f", 0o644), call: "link %d/f /tmp/cairn-exdev", want: unix.EXDEV},
	// mkdir
	{name: "mkdir", call: "mkdir %d/d 0755", check: all(wantMode("d", unix.S_IFDIR|0o755), wantNlink("d", 2), wantNlink(".", 3))},
	{name: "mkdir/mode0", call: "mkdir %d/d 0", check: wantMode("d", unix.S_IFDIR)},
	{name: "mkdir/EEXIST", setup: file("f", 0o644), call: "mkdir %d/f 0755", want: unix.EEXIST},
	{name: "mkdir/ENOENT", call: "mkdir %d/a/b 0755", want: unix.ENOENT},
	{name: "mkdir/ENOTDIR", setup: file("f", 0o644), call: "mkdir %d/f/d 0755", want: unix.ENOTDIR},
	{name: "mkdir/ENAMETOOLONG", call: "mkdir %d/" + long + " 0755", want: unix.ENAMETOOLONG},
	{name: "mkdir/EACCES", uid: nobody, call: "mkdir %d/d 0755", want: unix.EACCES, check: wantGone("d")},
	{name: "mkdir/ELOOP", setup: loop("l"), call: "mkdir %d/l/d 0755", want: unix.ELOOP},
	// mkfifo and mknod
	{name: "mkfifo", call: "mkfifo %d/p 0640", check: all(wantMode("p", unix.S_IFIFO|0o640), wantNlink("p", 1))},
	{name: "mkfifo/user", setup: chmodTo(".", 0o777), uid: nobody, call: "mkfifo %d/p 0600", check: all(wantMode("p", unix.S_IFIFO|0o600), wantOwner("p", nobody))},
	{name: "mkfifo/EEXIST", setup: file("f", 0o644), call: "mkfifo %d/f 0644", want: unix.EEXIST},
	{name: "mkfifo/ENOENT", call: "mkfifo %d/a/p 0644", want: unix.ENOENT},
	{name: "mkfifo/EACCES", uid: nobody, call: "mkfifo %d/p 0644", want: unix.EACCES},
	{name: "mkfifo/ENAMETOOLONG", call: "mkfifo %d/" + long + " 0644", want: unix.ENAMETOOLONG},
	{name: "mknod/char", call: "mknod %d/c c 0600 1 3", check: func(t *testing.T, d string) {
		st := lstat(t, filepath.Join(d, "c"))
		if st.Mode != unix.S_IFCHR|0o600 || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
			t.Fatalf("char device: mode %#o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}},
	{name: "mknod/block", call: "mknod %d/b b 0640 8 1", check: func(t *testing.T, d string) {
		st := lstat(t, filepath.Join(d, "b"))
		if st.Mode != unix.S_IFBLK|0o640 || unix.Major(st.Rdev) != 8 || unix.Minor(st.Rdev) != 1 {
			t.Fatalf("block device: mode %#o rdev %d:%d", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}},
	{name: "mknod/fifo", call: "mknod %d/p f 0644 0 0", check: wantMode("p", unix.S_IFIFO|0o644)},
	{name: "mknod/regular", call: "mknod %d/r r 0 0 0", check: wantMode("r", unix.S_IFREG)},
	{name: "mknod/EPERM", setup: chmodTo(".", 0o777), uid: nobody, call: "mknod %d/c c 0600 1 3", want: unix.EPERM, check: wantGone("c")},
	{name: "mknod/EEXIST", setup: file("f", 0o644), call: "mknod %d/f c 0600 1 3", want: unix.EEXIST},
	// open
	{name: "open/creat-mode0", call: "open %d/f creat|wronly 0", check: wantMode("f", unix.S_IFREG)},
	{name: "open/creat", call: "open %d/f creat|wronly 0640", check: all(wantMode("f", unix.S_IFREG|0o640), wantNlink("f", 1))},
	{name: "open/EEXIST", setup: file("f", 0o644), call: "open %d/f creat|excl|wronly 0644", want: unix.EEXIST},
	{name: "open/EISDIR", setup: dirs("d"), call: "open %d/d rdwr 0", want: unix.EISDIR},
	{name: "open/ENOENT", call: "open %d/missing rdonly 0", want: unix.ENOENT},
	{name: "open/ENOTDIR", setup: file("f", 0o644), call: "open %d/f/x rdonly 0", want: unix.ENOTDIR},
	{name: "open/ENOTDIR-flag", setup: file("f", 0o644), call: "open %d/f rdonly|directory 0", want: unix.ENOTDIR},
	{name: "open/ELOOP-nofollow", setup: func(t *testing.T, d string) { must(t, os.Symlink("f", filepath.Join(d, "l"))) }, call: "open %d/l rdonly|nofollow 0", want: unix.ELOOP},
	{name: "open/ELOOP", setup: loop("l"), call: "open %d/l rdonly 0", want: unix.ELOOP},
	{name: "open/ENAMETOOLONG", call: "open %d/" + long + " creat|wronly 0644", want: unix.ENAMETOOLONG},
	{name: "open/EACCES-read", setup: file("f", 0o600), uid: nobody, call: "open %d/f rdonly 0", want: unix.EACCES},
	{name: "open/EACCES-create", uid: nobody, call: "open %d/f creat|wronly 0644", want: unix.EACCES, check: wantGone("f")},
	{name: "open/user-create", setup: chmodTo(".", 0o777), uid: nobody, call: "open %d/f creat|wronly 0600", check: all(wantOwner("f", nobody), wantMode("f", unix.S_IFREG|0o600))},
	// rename
	{name: "rename", setup: file("f", 0o644), call: "rename %d/f %d/g", check: all(wantGone("f"), wantNlink("g", 1))},
	{name: "rename/dir-moves-link", setup: dirs("a/x", "b"), call: "rename %d/a/x %d/b/x", check: all(wantNlink("a", 2), wantNlink("b", 3))},
	{name: "rename/over-file", setup: all(file("f", 0o644), file("g", 0o600)), call: "rename %d/f %d/g", check: all(wantGone("f"), wantMode("g", unix.S_IFREG|0o644))},
	{name: "rename/ENOTEMPTY", setup: all(dirs("a", "b"), file("b/f", 0o644)), call: "rename %d/a %d/b", want: unix.ENOTEMPTY},
	{name: "rename/EISDIR", setup: all(file("f", 0o644), dirs("d")), call: "rename %d/f %d/d", want: unix.EISDIR},
	{name: "rename/ENOTDIR", setup: all(file("f", 0o644), dirs("d")), call: "rename %d/d %d/f", want: unix.ENOTDIR},
	{name: "rename/ENOENT", call: "rename %d/missing %d/g", want: unix.ENOENT},
	{name: "rename/EINVAL-into-self", setup: dirs("a"), call: "rename %d/a %d/a/b", want: unix.EINVAL},
	{name: "rename/ENAMETOOLONG", setup: file("f", 0o644), call: "rename %d/f %d/" + long, want: unix.ENAMETOOLONG},
	{name: "rename/EACCES", setup: file("f", 0o666), uid: nobody, call: "rename %d/f %d/g", want: unix.EACCES},
	{name: "rename/EPERM-sticky", setup: all(file("f", 0o666), chmodTo(".", 0o1777)), uid: nobody, call: "rename %d/f %d/g", want: unix.EPERM},
	{name: "rename/EXDEV", setup: file("f", 0o644), call: "rename %d/f /tmp/cairn-exdev", want: unix.EXDEV},
	// rmdir
	{name: "rmdir", setup: dirs("d"), call: "rmdir %d/d", check: all(wantGone("d"), wantNlink(".", 2))},
	{name: "rmdir/ENOTEMPTY", setup: all(dirs("d"), file("d/f", 0o644)), call: "rmdir %d/d", want: unix.ENOTEMPTY},
	{name: "rmdir/ENOTDIR", setup: file("f", 0o644), call: "rmdir %d/f", want: unix.ENOTDIR},
	{name: "rmdir/ENOENT", call: "rmdir %d/missing", want: unix.ENOENT},
	{name: "rmdir/EINVAL-dot", setup: dirs("d"), call: "rmdir %d/d/.", want: unix.EINVAL},
	{name: "rmdir/EACCES", setup: dirs("d"), uid: nobody, call: "rmdir %d/d", want: unix.EACCES},
	{name: "rmdir/ENAMETOOLONG", call: "rmdir %d/" + long, want: unix.ENAMETOOLONG},
	// symlink
	{name: "symlink", call: "symlink target %d/l", check: func(t *testing.T, d string) {
		if got, err := os.Readlink(filepath.Join(d, "l")); err != nil || got != "target" {
			t.Fatalf("readlink %q %v", got, err)
		}
	}},
	{name: "symlink/EEXIST", setup: file("f", 0o644), call: "symlink x %d/f", want: unix.EEXIST},
	{name: "symlink/ENOENT", call: "symlink x %d/a/l", want: unix.ENOENT},
	{name: "symlink/ENAMETOOLONG", call: "symlink x %d/" + long, want: unix.ENAMETOOLONG},
	{name: "symlink/EACCES", uid: nobody, call: "symlink x %d/l", want: unix.EACCES},
	// truncate and ftruncate
	{name: "truncate", setup: file("f", 0o644), call: "truncate %d/f 1000000", check: func(t *testing.T, d string) {
		if st := lstat(t, filepath.Join(d, "f")); st.Size != 1000000 {
			t.Fatalf("size %d", st.Size)
		}
	}},
	{name: "truncate/EISDIR", setup: dirs("d"), call: "truncate %d/d 0", want: unix.EISDIR},
	{name: "truncate/ENOENT", call: "truncate %d/missing 0", want: unix.ENOENT},
	{name: "truncate/EACCES", setup: file("f", 0o644), uid: nobody, call: "truncate %d/f 0", want: unix.EACCES},
	{name: "truncate/ELOOP", setup: loop("l"), call: "truncate %d/l 0", want: unix.ELOOP},
	{name: "truncate/EINVAL", setup: file("f", 0o644), call: "truncate %d/f -1", want: unix.EINVAL},
	{name: "ftruncate", setup: file("f", 0o666), uid: nobody, call: "ftruncate %d/f wronly 1", check: func(t *testing.T, d string) {
		if st := lstat(t, filepath.Join(d, "f")); st.Size != 1 {
			t.Fatalf("size %d", st.Size)
		}
	}},
	{name: "ftruncate/EINVAL-rdonly", setup: file("f", 0o644), call: "ftruncate %d/f rdonly 0", want: unix.EINVAL},
	{name: "ftruncate/EINVAL-negative", setup: file("f", 0o644), call: "ftruncate %d/f wronly -1", want: unix.EINVAL},
	// unlink
	{name: "unlink", setup: all(file("f", 0o644), func(t *testing.T, d string) { must(t, os.Link(filepath.Join(d, "f"), filepath.Join(d, "g"))) }),
		call: "unlink %d/f", check: all(wantGone("f"), wantNlink("g", 1))},
	{name: "unlink/fifo", setup: func(t *testing.T, d string) { must(t, unix.Mkfifo(filepath.Join(d, "p"), 0o644)) }, call: "unlink %d/p", check: wantGone("p")},
	{name: "unlink/EISDIR", setup: dirs("d"), call: "unlink %d/d", want: unix.EISDIR},
	{name: "unlink/ENOENT", call: "unlink %d/missing", want: unix.ENOENT},
	{name: "unlink/ENOTDIR", setup: file("f", 0o644), call: "unlink %d/f/x", want: unix.ENOTDIR},
	{name: "unlink/EACCES", setup: file("f", 0o666), uid: nobody, call: "unlink %d/f", want: unix.EACCES},
	{name: "unlink/EPERM-sticky", setup: all(file("f", 0o666), chmodTo(".", 0o1777)), uid: nobody, call: "unlink %d/f", want: unix.EPERM},
	{name: "unlink/ENAMETOOLONG", call: "unlink %d/" + long, want: unix.ENAMETOOLONG},
	// utimensat
	{name: "utimensat", setup: file("f", 0o644), call: "utimensat %d/f 1000000000123 2000000000456", check: func(t *testing.T, d string) {
		st := lstat(t, filepath.Join(d, "f"))
		if st.Atim.Nano() != 1000000000123 || st.Mtim.Nano() != 2000000000456 {
			t.Fatalf("atime %d mtime %d", st.Atim.Nano(), st.Mtim.Nano())
		}
	}},
	{name: "utimensat/atime-only", setup: file("f", 0o644), call: "utimensat %d/f 3000000000000 omit", check: func(t *testing.T, d string) {
		if st := lstat(t, filepath.Join(d, "f")); st.Atim.Nano() != 3000000000000 || st.Mtim.Nano() == 3000000000000 {
			t.Fatalf("atime %d mtime %d", st.Atim.Nano(), st.Mtim.Nano())
		}
	}},
	{name: "utimensat/now-writable", setup: file("f", 0o666), uid: nobody, call: "utimensat %d/f now now"},
	{name: "utimensat/EACCES", setup: file("f", 0o644), uid: nobody, call: "utimensat %d/f now now", want: unix.EACCES},
	{name: "utimensat/EPERM", setup: file("f", 0o666), uid: nobody, call: "utimensat %d/f 1000 1000", want: unix.EPERM},
	{name: "utimensat/ENOENT", call: "utimensat %d/missing now now", want: unix.ENOENT},
}

// helperBinary copies this test binary where another uid may run it (the
// build directory is private).
func helperBinary(t *testing.T) string {
	self, err := os.Executable()
	must(t, err)
	dir, err := os.MkdirTemp("", "cairn-syscall")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	must(t, os.Chmod(dir, 0o755))
	in, err := os.Open(self)
	must(t, err)
	defer in.Close()
	bin := filepath.Join(dir, "helper")
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
	return bin
}

// runCall runs call as uid in a child process and returns its errno.
func runCall(t *testing.T, bin string, uid int, args []string) syscall.Errno {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"CAIRN_TEST_SYSCALL=1"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper %v as %d: %v", args, uid, err)
	}
	return syscall.Errno(num(strings.TrimSpace(string(out))))
}

func TestSyscalls(t *testing.T) {
	srv := store(t)
	mnt, _ := mount(t, srv, "data", func(c *fusefs.Config) { c.AllowOther = true })
	bin := helperBinary(t)
	for i, c := range syscallCases {
		t.Run(c.name, func(t *testing.T) {
			d := filepath.Join(mnt, fmt.Sprintf("c%d", i))
			must(t, os.Mkdir(d, 0o755))
			must(t, os.Chmod(d, 0o755))
			if c.setup != nil {
				c.setup(t, d)
			}
			args := strings.Fields(strings.ReplaceAll(c.call, "%d", d))
			if got := runCall(t, bin, c.uid, args); got != c.want {
				t.Fatalf("%s as uid %d: %v (%d), want %v (%d)", c.call, c.uid, got, int(got), c.want, int(c.want))
			}
			if c.check != nil {
				c.check(t, d)
			}
		})
	}
}

// TestPathTooLong: a create or mkdir whose path inside the namespace is
// over 4,096 bytes (reached through a directory descriptor, so the kernel
// sees a short path) fails at once and leaves nothing behind.
func TestPathTooLong(t *testing.T) {
	srv := store(t)
	mnt, m := mount(t, srv, "data", nil)
	d := mnt
	comp := strings.Repeat("d", 250)
	for range 16 { // 16 * 251 = 4016 bytes
		d = filepath.Join(d, comp)
		must(t, os.Mkdir(d, 0o755))
	}
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	name := strings.Repeat("n", 100) // 4016 + 101 > 4096
	wantErrno(t, "mkdirat", unix.Mkdirat(fd, name, 0o755), unix.ENAMETOOLONG)
	_, err = unix.Openat(fd, name, unix.O_CREAT|unix.O_WRONLY, 0o644)
	wantErrno(t, "openat O_CREAT", err, unix.ENAMETOOLONG)
	wantErrno(t, "symlinkat", unix.Symlinkat("x", fd, name), unix.ENAMETOOLONG)
	wantErrno(t, "mknodat", unix.Mknodat(fd, name, unix.S_IFIFO|0o644, 0), unix.ENAMETOOLONG)
	m.Sync()
	var st unix.Stat_t
	wantErrno(t, "fstatat", unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW), unix.ENOENT)
	// Within the limit still works.
	ok := strings.Repeat("n", 70)
	fd2, err := unix.Openat(fd, ok, unix.O_CREAT|unix.O_WRONLY, 0o644)
	must(t, err)
	unix.Close(fd2)
	m.Sync()
	must(t, unix.Unlinkat(fd, ok, 0))
	// A name over 255 bytes is too long, not missing.
	wantErrno(t, "lookup", unix.Fstatat(fd, strings.Repeat("n", 256), &st, 0), unix.ENAMETOOLONG)
}

// TestSpecialFilesAcrossMounts: fifos, devices and sockets are inodes that
// every mount lists and stats alike, and that work as what they are.
func TestSpecialFilesAcrossMounts(t *testing.T) {
	srv := store(t)
	a, _ := mount(t, srv, "data", nil)
	b, _ := mount(t, srv, "data", nil)
	must(t, unix.Mkfifo(filepath.Join(a, "fifo"), 0o640))
	must(t, unix.Mknod(filepath.Join(a, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	must(t, unix.Chmod(filepath.Join(a, "null"), 0o666)) // whatever the umask
	sock, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	must(t, err)
	defer unix.Close(sock)
	must(t, unix.Bind(sock, &unix.SockaddrUnix{Name: filepath.Join(a, "sock")}))
	for _, dir := range []string{a, b} {
		ents, err := os.ReadDir(dir)
		must(t, err)
		types := map[string]os.FileMode{}
		for _, e := range ents {
			types[e.Name()] = e.Type()
		}
		if types["fifo"] != os.ModeNamedPipe || types["null"] != os.ModeDevice|os.ModeCharDevice || types["sock"] != os.ModeSocket {
			t.Fatalf("%s lists %v", dir, types)
		}
		if st := lstat(t, filepath.Join(dir, "null")); st.Rdev != unix.Mkdev(1, 3) || st.Mode != unix.S_IFCHR|0o666 {
			t.Fatalf("%s: null is %#o rdev %x", dir, st.Mode, st.Rdev)
		}
		if st := lstat(t, filepath.Join(dir, "fifo")); st.Mode != unix.S_IFIFO|0o640 {
			t.Fatalf("%s: fifo is %#o", dir, st.Mode)
		}
	}
	// FUSE mounts are nodev: the device node is stored and shown, never
	// opened.
	_, err = os.OpenFile(filepath.Join(b, "null"), os.O_WRONLY, 0)
	wantErrno(t, "open a device on a nodev mount", err, syscall.EACCES)
	// The fifo is a pipe (on one mount: the kernel joins its readers and
	// writers per inode).
	done := make(chan string, 1)
	go func() {
		data, _ := os.ReadFile(filepath.Join(a, "fifo"))
		done <- string(data)
	}()
	must(t, os.WriteFile(filepath.Join(a, "fifo"), []byte("through"), 0))
	select {
	case got := <-done:
		if got != "through" {
			t.Fatalf("fifo read %q", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fifo read did not finish")
	}
	for _, n := range []string{"fifo", "null", "sock"} {
		must(t, os.Remove(filepath.Join(b, n)))
	}
	for _, dir := range []string{a, b} {
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Fatalf("%s still lists %v", dir, ents)
		}
	}
}
