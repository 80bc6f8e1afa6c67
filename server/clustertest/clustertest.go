// Package clustertest runs a Cairn cluster as real processes for tests:
// one `cairn meta`, several `cairn chunk` and optionally a `cairn gateway`,
// each its own process of the cairn binary on loopback (or network
// namespace) ports, with data under the test's temporary directory. Tests
// kill -9 them, restart them, cut them off and corrupt their files, and
// talk to the cluster through the client library like any front end.
package clustertest

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cairn"
	"cairn/capability"
	"cairn/chunk"
	"cairn/client"
	"cairn/internal/await"
	"cairn/internal/ports"
	"cairn/meta"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Root is the root access key and secret every cluster starts with.
const Root, RootSecret = "cluster-root", "cluster-secret-0123456789"

// Build compiles cmd/cairn into dir and returns the binary's path. A
// TestMain calls it once for all the tests of a package.
func Build(dir string) (string, error) {
	bin := filepath.Join(dir, "cairn")
	cmd := exec.Command("go", "build", "-o", bin, "cairn/cmd/cairn")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Options describe a cluster. Zero fields take the defaults noted.
type Options struct {
	Bin     string // the cairn binary (Build); required
	Servers int    // data servers; default 4
	// Host is the address every role listens on; default 127.0.0.1.
	Host string
	// DeadAfter is meta's --dead-after; default 3s (short: tests wait for it).
	DeadAfter time.Duration
	// MetaArgs and ChunkArgs are extra flags.
	MetaArgs, ChunkArgs []string
	// Labels returns the --label flags of data server i.
	Labels func(i int) []string
	// Placement, when set, may run data server i elsewhere: it returns a
	// command prefix (e.g. "ip netns exec NS") and the host it listens on.
	Placement func(i int) (prefix []string, host string)
	Gateway   bool // also start a gateway
	// GatewayArgs are extra flags of the gateway (its console is off
	// unless they name an address).
	GatewayArgs []string
	// ExtentSize is the test client's (Cluster.Client); default 1 MiB.
	ExtentSize int64
	// MetaGroup, over 1, runs that many metas as one Raft group (all
	// founding members); every other role is given all their addresses.
	MetaGroup int
	// MetaPlacement is Placement for the members of a meta group.
	MetaPlacement func(i int) (prefix []string, host string)
}

// Cluster is a running cluster.
type Cluster struct {
	t       testing.TB
	opt     Options
	Dir     string
	Meta    *Proc
	Chunks  []*Proc
	Gateway *Proc
	// Metas are the members of a meta group (Options.MetaGroup); Meta is
	// the first of them. MetaAddr is what the other roles are given.
	Metas    []*Proc
	MetaAddr string
	// MetaRaft are the members' Raft addresses, in the order of Metas.
	MetaRaft []string
	// MC is a gRPC client of meta; Client a client library instance
	// (reads, writes, failover) talking to the processes.
	MC     metapb.MetaClient
	Client *client.Client
	// TLS is the test's TLS configuration: it trusts the cluster CA and
	// presents a gateway certificate, as a front end does. CAFile is the
	// CA's certificate, for commands run as a user.
	TLS    *tls.Config
	CAFile string
	// JoinToken is the (many-use) token data servers join with.
	JoinToken string
}

// Proc is one process of the cluster. It can be killed and started again
// with the same data directory and address.
type Proc struct {
	Name, Addr, Dir string
	argv            []string
	logPath         string
	cmd             *exec.Cmd
	exited          chan struct{}
}

// Start starts a cluster and waits until every data server has registered
// with meta and holds a lease. Everything is stopped when the test ends;
// on failure the tail of each process's log is printed.
func Start(t testing.TB, opt Options) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("a cluster of processes: not in the -short tier")
	}
	if opt.Servers == 0 {
		opt.Servers = 4
	}
	if opt.Host == "" {
		opt.Host = "127.0.0.1"
	}
	if opt.DeadAfter == 0 {
		opt.DeadAfter = 3 * time.Second
	}
	c := &Cluster{t: t, opt: opt, Dir: t.TempDir()}
	t.Cleanup(c.cleanup)
	metaAddr := freeAddr(t, opt.Host)
	if opt.MetaGroup > 1 {
		metaAddr = c.startMetaGroup(t)
	} else {
		c.Meta = c.proc("meta", metaAddr, nil, append([]string{"meta", "--data", filepath.Join(c.Dir, "meta"),
			"--listen", metaAddr, "--admin", "off", "--dead-after", opt.DeadAfter.String()}, opt.MetaArgs...))
		c.Meta.Dir = filepath.Join(c.Dir, "meta")
		c.Meta.Start(t)
		c.Metas = []*Proc{c.Meta}
	}
	c.MetaAddr = metaAddr
	c.TLS, c.CAFile = harnessTLS(t, c.Meta.Dir), filepath.Join(c.Meta.Dir, pki.CAFile)
	mc, conn, err := meta.Dial(metaAddr, meta.DialTLS(c.TLS))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	c.MC = mc
	c.JoinToken = c.NewJoinToken(t, "data", 1000)
	for i := range opt.Servers {
		c.newChunk(t, i).Start(t)
	}
	if opt.Gateway {
		addr := freeAddr(t, opt.Host)
		c.Gateway = c.proc("gateway", addr, nil, append([]string{"gateway", "--meta", metaAddr, "--http", addr, "--admin", "off",
			"--s3", "off", "--console", "off",
			"--data", filepath.Join(c.Dir, "gateway"), "--join", c.NewJoinToken(t, "gateway", 1)}, opt.GatewayArgs...))
		c.Gateway.Start(t)
	}
	c.Client, err = client.New(client.Config{
		Meta: mc, Dial: func(addr string) cairn.Chunks { return chunk.NewRemoteTLS(addr, c.TLS) },
		ExtentSize: cmp.Or(opt.ExtentSize, 1<<20), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Client.Close() })
	c.WaitAlive(t, c.Chunks...)
	return c
}

// NewJoinToken asks meta for a join token for role with uses joins.
func (c *Cluster) NewJoinToken(t testing.TB, role string, uses uint32) string {
	t.Helper()
	resp, err := c.MC.CreateJoinToken(context.Background(), &metapb.CreateJoinTokenRequest{
		Role: role, Uses: uses, TtlNs: int64(24 * time.Hour), AccessKey: Root, Secret: RootSecret})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Token
}

// newChunk makes the process of data server i (not started).
func (c *Cluster) newChunk(t testing.TB, i int) *Proc {
	var prefix []string
	host := c.opt.Host
	if c.opt.Placement != nil {
		if p, h := c.opt.Placement(i); h != "" {
			prefix, host = p, h
		}
	}
	addr := freeAddr(t, host)
	dir := filepath.Join(c.Dir, "chunk"+strconv.Itoa(i))
	args := []string{"chunk", "--data", dir, "--listen", addr, "--meta", c.MetaAddr, "--admin", "off", "--join", c.JoinToken}
	if c.opt.Labels != nil {
		for _, l := range c.opt.Labels(i) {
			args = append(args, "--label", l)
		}
	}
	p := c.proc("chunk"+strconv.Itoa(i), addr, prefix, append(args, c.opt.ChunkArgs...))
	p.Dir = dir
	c.Chunks = append(c.Chunks, p)
	return p
}

// AddChunk starts one more data server (number len(c.Chunks), with its
// Labels and Placement) in the running cluster and waits until meta sees
// it alive and it holds a lease: a server joining.
func (c *Cluster) AddChunk(t testing.TB) *Proc {
	t.Helper()
	p := c.newChunk(t, len(c.Chunks))
	p.Start(t)
	c.WaitAlive(t, p)
	return p
}

// Admin runs `cairn admin ARGS... --meta ADDR` and returns its output.
func (c *Cluster) Admin(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.opt.Bin, append(append([]string{"admin"}, args...), "--meta", c.MetaAddr)...)
	cmd.Env = append(os.Environ(), "CAIRN_CA="+c.CAFile, "CAIRN_ROOT_USER="+Root, "CAIRN_ROOT_PASSWORD="+RootSecret)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cairn admin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *Cluster) proc(name, addr string, prefix, args []string) *Proc {
	return &Proc{Name: name, Addr: addr, argv: append(append(append([]string(nil), prefix...), c.opt.Bin), args...),
		logPath: filepath.Join(c.Dir, name+".log")}
}

// freeAddr returns host:port with a port free right now. A data server in
// a network namespace gets a port picked here too; its namespace is empty.
// Ports come from outside the ephemeral range (internal/ports), so that
// no connection takes one while its process is down for a restart.
func freeAddr(t testing.TB, host string) string {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		// Not an address of this namespace: any port will do there.
		return net.JoinHostPort(host, strconv.Itoa(20000+int(time.Now().UnixNano()%20000)))
	}
	l.Close()
	return ports.Free(t, host)
}

// Start starts the process (again), appending to its log.
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	if p.cmd != nil {
		select {
		case <-p.exited:
		default:
			t.Fatalf("%s is already running", p.Name)
		}
	}
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(log, "---- start %s\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.argv[0], p.argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "CAIRN_ROOT_USER="+Root, "CAIRN_ROOT_PASSWORD="+RootSecret)
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start %s: %v", p.Name, err)
	}
	p.cmd, p.exited = cmd, make(chan struct{})
	go func() {
		cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	if strings.HasPrefix(p.Name, "meta") || p.Name == "gateway" {
		waitDial(t, p)
	}
}

// waitDial waits until the process accepts connections on its address.
func waitDial(t testing.TB, p *Proc) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", p.Addr, time.Second)
		if err == nil {
			conn.Close()
			return
		}
		select {
		case <-p.exited:
			t.Fatalf("%s exited at start; log:\n%s", p.Name, tail(p.logPath))
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("%s does not accept connections on %s; log:\n%s", p.Name, p.Addr, tail(p.logPath))
}

// Kill sends SIGKILL and waits for the process to be gone: a crash.
func (p *Proc) Kill(t testing.TB) { p.signal(t, syscall.SIGKILL) }

// Stop sends SIGTERM (a graceful shutdown) and waits, killing it after 15s.
func (p *Proc) Stop(t testing.TB) { p.signal(t, syscall.SIGTERM) }

func (p *Proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if p.cmd == nil {
		return
	}
	select {
	case <-p.exited:
		return
	default:
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
}

// Pause sends SIGSTOP: the process holds its connections but answers
// nothing, as if cut off (peers see silence, not a closed socket). Resume
// sends SIGCONT.
func (p *Proc) Pause(t testing.TB) { p.send(t, syscall.SIGSTOP) }

// Resume continues a paused process.
func (p *Proc) Resume(t testing.TB) { p.send(t, syscall.SIGCONT) }

func (p *Proc) send(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if !p.Running() {
		t.Fatalf("%s is not running", p.Name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
}

// Running reports whether the process is up.
func (p *Proc) Running() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// ID is a data server's id (its data directory's server.id).
func (p *Proc) ID(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Dir, "server.id"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func (c *Cluster) cleanup() {
	for _, p := range append(append([]*Proc{c.Gateway}, c.Chunks...), c.Metas...) {
		if p != nil {
			p.Kill(c.t)
		}
	}
	if c.t.Failed() {
		for _, p := range append(append(append([]*Proc(nil), c.Metas...), c.Chunks...), c.Gateway) {
			if p != nil {
				c.t.Logf("---- %s (%s) log tail:\n%s", p.Name, p.Addr, tail(p.logPath))
			}
		}
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 6000 {
		b = b[len(b)-6000:]
	}
	return string(b)
}

// Status is meta's cluster status.
func (c *Cluster) Status(t testing.TB) *metapb.ClusterStatusResponse {
	t.Helper()
	// Retried: right after meta restarts, the connection may still be in
	// its (short) reconnect backoff.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := c.MC.ClusterStatus(ctx, &metapb.Empty{})
		cancel()
		if err == nil {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitFor waits until cond holds, failing t if d passes first: the
// suite's one wait (internal/await). Deadlines are generous: these tests
// run on 2 loaded cores.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	await.Until(t, d, what, cond)
}

// WaitAlive waits until meta sees every given data server alive, and each
// serves (holds a lease).
func (c *Cluster) WaitAlive(t testing.TB, ps ...*Proc) {
	t.Helper()
	WaitFor(t, 60*time.Second, "data servers to register", func() bool {
		st := c.Status(t)
		for _, p := range ps {
			ok := false
			for _, s := range st.Servers {
				ok = ok || s.Addr == p.Addr && s.Alive
			}
			if !ok {
				return false
			}
		}
		return true
	})
	for _, p := range ps {
		WaitFor(t, 30*time.Second, p.Name+" to hold a lease", func() bool {
			_, err := c.Remote(p.Addr).Needles(context.Background(), 1<<31)
			return err != nil && !strings.Contains(err.Error(), "lease")
		})
	}
}

// Remote is a client of the data server at addr that signs its calls with
// meta's capability keys (read from meta's directory), as meta does, over
// TLS with the test's certificate.
func (c *Cluster) Remote(addr string) *chunk.Remote {
	c.t.Helper()
	keys, err := meta.LoadCapKeys(c.Meta.Dir)
	if err != nil {
		c.t.Fatal(err)
	}
	r := chunk.NewRemoteTLS(addr, c.TLS)
	r.SetCaps(capability.Signer{Keys: keys})
	return r
}

// WaitReplicated waits until every volume has all its replicas on live
// servers, none on a server in gone (ids), and no repair runs.
func (c *Cluster) WaitReplicated(t testing.TB, d time.Duration, gone ...string) *metapb.ClusterStatusResponse {
	t.Helper()
	var st *metapb.ClusterStatusResponse
	WaitFor(t, d, "the replication factor to be restored", func() bool {
		st = c.Status(t)
		if len(st.Repairs) > 0 {
			return false
		}
		for _, v := range st.Volumes {
			if v.Health != "ok" {
				return false
			}
			for _, id := range v.Volume.ServerIds {
				for _, g := range gone {
					if id == g {
						return false
					}
				}
			}
		}
		return true
	})
	return st
}

// CreateNS creates a namespace with rf replicas per volume.
func (c *Cluster) CreateNS(t testing.TB, name string, rf uint32) {
	t.Helper()
	if _, err := c.MC.CreateNamespace(context.Background(), &metapb.CreateNamespaceRequest{Name: name, Owner: Root, Replication: rf}); err != nil {
		t.Fatal(err)
	}
}

// Check reads ns/p through a fresh resolution and compares it with want.
func (c *Cluster) Check(ctx context.Context, ns, p string, want []byte) error {
	f, err := c.Client.StatFresh(ctx, ns, p)
	if err != nil {
		return fmt.Errorf("%s/%s: stat: %w", ns, p, err)
	}
	got, err := c.Client.ReadAll(ctx, f)
	if err != nil {
		return fmt.Errorf("%s/%s: read: %w", ns, p, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s/%s: read %d bytes that differ from the %d written", ns, p, len(got), len(want))
	}
	return nil
}

// Find returns the data server process listening on addr.
func (c *Cluster) Find(addr string) *Proc {
	for _, p := range c.Chunks {
		if p.Addr == addr {
			return p
		}
	}
	return nil
}
