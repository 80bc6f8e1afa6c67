package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"cairn/api"
	"cairn/bench"
	"cairn/client"
	"cairn/errors"
	"cairn/fusefs"
	"cairn/meta"
	"cairn/proto/metapb"
)

type mountFlags struct {
	meta       string
	opts       []string
	daemon     bool
	cacheSize  string
	diskCache  string
	diskSize   string
	blockSize  string
	readahead  int
	parallel   int
	dirtyMax   string
	maxFiles   int
	maxListing int
	capCache   string
	gcHeadroom int64
	timeout    time.Duration
	syncClose  bool
	wbEntries  int    // --writeback-max-entries
	wbBytes    string // --writeback-max-bytes
	admin      string // metrics (and with pprof, profiles) listener; "" or "off": none
	pprof      bool
	foreground bool // set in the re-executed child of -d
}

func mountCmd(o *options) *cobra.Command {
	f := &mountFlags{}
	cmd := &cobra.Command{
		Use:   "mount [NS] MOUNTPOINT",
		Short: "mount a namespace (or every visible one, a directory each) as a POSIX file system (FUSE)",
		Long: `mount serves a namespace over FUSE until it is unmounted (umount, fusermount3 -u,
or Ctrl-C). Without NS every namespace the credentials can see appears as a
directory. The store is found as the other commands find it: the gateway at
--endpoint (default $CAIRN_ENDPOINT or http://127.0.0.1:8080) says where meta
is. --meta (or $CAIRN_META) names meta directly instead. Credentials come
from the environment as for the other commands.

Options (-o, comma separated): allow_other, ro, debug, noatime (atime is
not moved by reads; the default is relatime).`,
		Args: nArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error { return runMount(cmd.Context(), o, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.meta, "meta", "", "meta address (default $CAIRN_META, else what the gateway at --endpoint advertises)")
	fl.StringSliceVarP(&f.opts, "options", "o", nil, "mount options: allow_other, ro, debug, noatime")
	fl.BoolVarP(&f.daemon, "daemon", "d", false, "run in the background once mounted")
	fl.StringVar(&f.cacheSize, "cache-size", "512MiB", "block cache size")
	fl.StringVar(&f.diskCache, "disk-cache", "", "directory for a second block cache tier on local disk (blocks evicted from memory; kept across mounts of the same cluster)")
	fl.StringVar(&f.diskSize, "disk-cache-size", "10GiB", "size of the --disk-cache tier")
	fl.StringVar(&f.blockSize, "block-size", "1MiB", "block cache and readahead unit")
	fl.IntVar(&f.readahead, "readahead", 8, "blocks fetched ahead of a sequential reader")
	fl.IntVar(&f.parallel, "parallel", 8, "concurrent block fetches")
	fl.StringVar(&f.dirtyMax, "dirty-max", "64MiB", "write-back buffer per file before it is flushed early")
	fl.IntVar(&f.maxFiles, "max-files", 10000, "files the kernel keeps looked up, open ones aside (past it the least recently used are dropped from its cache)")
	fl.IntVar(&f.maxListing, "max-listing", 10000, "entries of a directory listing kept to answer lookups and readdir (a larger directory is listed by meta)")
	gcHeadroomFlag(fl, &f.gcHeadroom, mountGarbageHeadroom)
	fl.StringVar(&f.capCache, "cap-cache-size", "8MiB", "data-plane capabilities kept by needle (least recently used out; an evicted one costs a lookup)")
	fl.DurationVar(&f.timeout, "attr-timeout", 10*time.Minute, "kernel entry/attribute timeout while the session is live")
	fl.BoolVar(&f.syncClose, "sync-close", false, "commit on close instead of behind it (close-to-open holds either way)")
	fl.IntVar(&f.wbEntries, "writeback-max-entries", 1024, "files and directories with commits left behind at most (past it, closes and creates commit synchronously)")
	fl.StringVar(&f.wbBytes, "writeback-max-bytes", "64MiB", "written bytes left behind at most (past it, closes commit synchronously)")
	fl.StringVar(&f.admin, "admin", "off", `admin listen address (/metrics; /debug/pprof with --pprof), as the servers have; "off" disables`)
	fl.BoolVar(&f.pprof, "pprof", false, "serve /debug/pprof and /debug/profile on the admin listener")
	fl.BoolVar(&f.foreground, "foreground-child", false, "")
	fl.MarkHidden("foreground-child")
	return cmd
}

func runMount(ctx context.Context, o *options, f *mountFlags, args []string) error {
	const op = errors.Op("cli.mount")
	ns, dir := "", args[0]
	if len(args) == 2 {
		ns, dir = args[0], args[1]
	}
	if f.daemon && !f.foreground {
		return daemonize(dir)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		// The block cache (--cache-size) is live heap: at the default GOGC
		// the heap grew to twice it, a 512 MiB cache made a 1.09 GB
		// mount in the soak. See limitGarbage.
		defer limitGarbage(uint64(cmp.Or(f.gcHeadroom, mountGarbageHeadroom)))()
	}
	cfg := fusefs.Config{
		Namespace: ns, Mountpoint: dir, Readahead: f.readahead, Parallel: f.parallel, Timeout: f.timeout, SyncClose: f.syncClose, DiskCache: f.diskCache,
		MaxFiles: f.maxFiles, MaxListing: f.maxListing, WritebackMaxEntries: f.wbEntries,
	}
	var capCache int64
	for _, s := range []struct {
		v   string
		dst *int64
	}{{f.cacheSize, &cfg.CacheSize}, {f.diskSize, &cfg.DiskCacheSize}, {f.blockSize, &cfg.BlockSize}, {f.dirtyMax, &cfg.DirtyMax}, {f.capCache, &capCache}, {f.wbBytes, &cfg.WritebackMaxBytes}} {
		n, err := bench.ParseSize(s.v)
		if err != nil {
			return errors.E(op, errors.Invalid, err)
		}
		*s.dst = n
	}
	for _, o := range f.opts {
		switch strings.TrimSpace(o) {
		case "allow_other":
			cfg.AllowOther = true
		case "ro":
			cfg.ReadOnly = true
		case "debug":
			cfg.Debug = true
		case "noatime":
			cfg.NoAtime = true
		case "relatime", "":
		default:
			return errors.E(op, errors.Invalid, "unknown mount option "+o)
		}
	}
	addr, err := findMeta(ctx, o, f.meta)
	if err != nil {
		return err
	}
	mc, conn, err := dialMeta(addr, fusefs.CountCalls())
	if err != nil {
		return err
	}
	defer conn.Close()
	who, err := whoami(ctx, mc)
	if err != nil {
		return err
	}
	cfg.Visible = visibility(who)
	if ns != "" {
		if err := checkMount(ctx, mc, who, &cfg); err != nil {
			return err
		}
	}
	dial, err := userChunks(ctx, mc)
	if err != nil {
		return err
	}
	cl, err := client.New(client.Config{Meta: mc, Dial: dial, NoWatch: true, CacheEntries: -1, CapCacheSize: capCache})
	if err != nil {
		return err
	}
	defer cl.Close()
	cfg.Meta, cfg.Client = mc, cl
	if err := adminServe(f.admin, f.pprof); err != nil { // before mounting: a taken port fails the mount
		return err
	}
	m, err := fusefs.New(cfg)
	if err != nil {
		return err
	}
	if f.foreground {
		detachStderr()
	}
	go func() {
		<-ctx.Done() // Ctrl-C, SIGTERM
		m.Unmount()
	}()
	m.Wait()
	return nil
}

// findMeta returns meta's address: flag, else $CAIRN_META, else what the
// gateway at --endpoint (or $CAIRN_ENDPOINT) advertises. When neither
// names a gateway and the default one does not answer, it is meta's
// default beside it, as before gateways advertised it.
func findMeta(ctx context.Context, o *options, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if env := os.Getenv("CAIRN_META"); env != "" {
		return env, nil
	}
	c, err := o.client()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addr, err := c.MetaAddr(ctx)
	if err != nil {
		explicit := o.endpoint != "" || os.Getenv("CAIRN_ENDPOINT") != ""
		if !explicit && errors.Is(errors.Unavailable, err) {
			return defaultMeta, nil
		}
		return "", errors.E(errors.Op("cli.mount"), fmt.Errorf("finding meta through the gateway at %s (or give --meta): %w", c.Endpoint(), err))
	}
	return addr, nil
}

// whoami is the user in the environment as meta knows them (key, root,
// grants); nil without credentials.
func whoami(ctx context.Context, mc metapb.MetaClient) (*metapb.AuthResponse, error) {
	cfg, err := api.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	if cfg.AccessKey == "" {
		return nil, nil
	}
	return mc.Authenticate(ctx, &metapb.AuthRequest{AccessKey: cfg.AccessKey, Secret: cfg.SecretKey})
}

// mayAccess is what who may do on namespace n, by the rule meta applies
// to every call of the mount.
func mayAccess(who *metapb.AuthResponse, n *metapb.Namespace) (read, write bool) {
	read, write, _ = meta.Rights(who.GetAccessKey(), who.GetRoot(), who.GetGrants(), n)
	return read, write
}

// visibility decides which namespaces an all-namespaces mount shows: all
// for root, else those the caller may read.
func visibility(who *metapb.AuthResponse) func(*metapb.Namespace) bool {
	if who != nil && who.Root {
		return nil
	}
	return func(ns *metapb.Namespace) bool {
		read, _ := mayAccess(who, ns)
		return read
	}
}

// checkMount refuses a namespace the caller may not read, with a clear
// error, before anything is mounted, and makes the mount read-only when
// the caller may only read. Meta checks every call of the mount again (a
// grant removed takes effect within a minute).
func checkMount(ctx context.Context, mc metapb.MetaClient, who *metapb.AuthResponse, cfg *fusefs.Config) error {
	const op = errors.Op("cli.mount")
	n, err := mc.GetNamespace(ctx, &metapb.NamespaceRequest{Name: cfg.Namespace})
	if err != nil && !errors.Is(errors.Permission, err) && !errors.Is(errors.Unauthenticated, err) {
		return errors.E(op, errors.Path(cfg.Namespace), err)
	}
	var read, write bool
	if err == nil {
		read, write = mayAccess(who, n)
	}
	if !read {
		kind, who := errors.Permission, "access key "+who.GetAccessKey()
		if who == "access key " {
			kind, who = errors.Unauthenticated, "a mount without credentials (set CAIRN_ACCESS_KEY/CAIRN_SECRET_KEY)"
		}
		return errors.E(op, kind, errors.Path(cfg.Namespace), fmt.Errorf("%s may not read namespace %s", who, cfg.Namespace))
	}
	if !write {
		cfg.ReadOnly = true
	}
	return nil
}

// daemonize re-executes the command in the background, detached from the
// terminal, and returns once dir is mounted (or the child failed). The
// child's stderr is a pipe read here until the child closes it (see
// detachStderr), so why a child could not mount is shown, not lost.
func daemonize(dir string) error {
	const op = errors.Op("cli.mount")
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// A dead mount here first: its device would pass for the new one's.
	fusefs.ClearStale(dir)
	var st0 syscall.Stat_t
	if err := syscall.Stat(dir, &st0); err != nil {
		return errors.E(op, errors.NotExist, errors.Path(dir), err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	args := append(os.Args[1:], "--foreground-child")
	c := exec.Command(self, args...)
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	c.Stderr = w
	err = c.Start()
	w.Close()
	if err != nil {
		return err
	}
	said := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(r, 64<<10))
		said <- b
	}()
	var out []byte
	select {
	case out = <-said: // the child mounted, or exited
	case <-time.After(15 * time.Second):
		c.Process.Kill() // reported as failed: it must not mount later
		c.Wait()
		var st syscall.Stat_t
		if syscall.Stat(dir, &st) != nil || st.Dev != st0.Dev {
			unix.Unmount(dir, unix.MNT_DETACH) // it got as far as the kernel
		}
		return errors.E(op, errors.Unavailable, "not mounted after 15s")
	}
	var st syscall.Stat_t
	if syscall.Stat(dir, &st) == nil && st.Dev != st0.Dev {
		fmt.Fprintf(os.Stderr, "cairn: mounted on %s (pid %d)\n", dir, c.Process.Pid)
		go c.Wait()
		return nil
	}
	werr := c.Wait()
	msg := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), "cairn: "))
	if msg == "" {
		msg = fmt.Sprint(werr)
	}
	return errors.E(op, errors.IO, "the mount process exited: "+msg)
}

// detachStderr points stderr at /dev/null: the daemon is mounted, and the
// parent that read the pipe until now is about to exit.
func detachStderr() {
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		unix.Dup2(int(null.Fd()), 2)
		null.Close()
	}
}
