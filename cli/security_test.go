package cli_test

import (
	"bytes"
	"context"
	"crypto/tls"
	stderrors "errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	store "cairn"
	"cairn/capability"
	"cairn/chunk"
	"cairn/cli"
	"cairn/client"
	"cairn/errors"
	"cairn/fusefs"
	"cairn/gateway"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/meta/metatest"
	"cairn/pki"
	"cairn/pki/pkitest"
	"cairn/proto/metapb"
)

// secureStore is meta over mutual TLS (a throwaway cluster CA, no trust
// in plaintext), a data server and a gateway that reach it with their own
// certificates, each on loopback: the configuration the security suite
// attacks.
type secureStore struct {
	ca       *pkitest.CA
	caFile   string
	svc      *meta.Service
	metaAddr string
	gwURL    string
	dataURL  string
	root     meta.Credentials
}

const secRoot, secRootSecret = "SECROOT", "sec-root-secret-0123456789"

func startSecureStore(t *testing.T) *secureStore {
	t.Helper()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ca := pkitest.NewCA(t)
	s := &secureStore{ca: ca, caFile: filepath.Join(dir, "ca.pem"), root: meta.Credentials{AccessKey: secRoot, Secret: secRootSecret}}
	ca.WritePEM(t, s.caFile)
	revoked := &pki.Revocations{} // meta's list, guarding its listener
	svc, err := meta.Open(meta.Config{Dir: filepath.Join(dir, "meta"), RootUser: secRoot, RootPassword: secRootSecret, Revoked: revoked,
		Chunks: func(a string) store.Chunks {
			return chunk.NewRemoteTLS(a, ca.ClientConfig(ca.Cert(t, pki.RoleMeta, "meta")))
		},
		Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	s.svc = svc
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.metaAddr = ml.Addr().String()
	gs := meta.NewGRPCServer(svc, grpc.Creds(credentials.NewTLS(revoked.Guard(ca.ServerConfig(t)))))
	go gs.Serve(ml)

	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The data plane speaks TLS, as every data server does (its own data
	// certificate; users without one, presenting capabilities).
	dataCert := ca.Cert(t, pki.RoleData, "d1")
	st, err := chunk.Open(chunk.Config{Dir: filepath.Join(dir, "chunk"), Addr: dl.Addr().String(), Meta: s.role(t, pki.RoleData, "d1"),
		TLS: ca.ClientConfig(dataCert), Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ds := gateway.Server(st.Handler())
	ds.TLSConfig = st.Revocations().Guard(&tls.Config{Certificates: []tls.Certificate{dataCert}, ClientCAs: ca.Pool,
		ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12})
	s.dataURL = "https://" + dl.Addr().String()
	go ds.ServeTLS(dl, "", "")
	ctx, cancel := context.WithCancel(context.Background())
	go st.Run(ctx)
	select { // the data server's heartbeat, as a data identity, got its lease
	case <-st.Ready():
	case <-time.After(20 * time.Second):
		t.Fatal("the data server got no lease from meta")
	}

	gwTLS := ca.ClientConfig(ca.Cert(t, pki.RoleGateway, "g1"))
	cl, err := client.New(client.Config{Meta: s.role(t, pki.RoleGateway, "g1"), Logger: log,
		Dial: func(a string) store.Chunks { return chunk.NewRemoteTLS(a, gwTLS) }})
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Config{Client: cl, MetaAddr: s.metaAddr, Logger: log, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.gwURL = "http://" + gl.Addr().String()
	hs := gateway.Server(g)
	go hs.Serve(gl)
	t.Cleanup(func() {
		hs.Close()
		cl.Close()
		ds.Close()
		cancel()
		st.Close()
		gs.Stop()
		svc.Close()
	})
	return s
}

// dial connects over TLS with cert (a role) and/or creds (a user).
func (s *secureStore) dial(t *testing.T, cert []tls.Certificate, creds *meta.Credentials) (metapb.MetaClient, *grpc.ClientConn) {
	t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(s.ca.ClientConfig(cert...)))}
	if creds != nil {
		opts = append(opts, meta.WithUser(creds.AccessKey, creds.Secret))
	}
	mc, conn, err := meta.Dial(s.metaAddr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return mc, conn
}

func (s *secureStore) role(t *testing.T, r pki.Role, id string) metapb.MetaClient {
	mc, _ := s.dial(t, []tls.Certificate{s.ca.Cert(t, r, id)}, nil)
	return mc
}

// cairn runs the cairn command in-process with exactly env (as `env -i`
// would: the test's CAIRN_ variables are cleared first).
func cairnCmd(t *testing.T, ctx context.Context, env map[string]string, args ...string) (string, error) {
	t.Helper()
	for _, k := range []string{"CAIRN_ROOT_USER", "CAIRN_ROOT_PASSWORD", "CAIRN_ACCESS_KEY", "CAIRN_SECRET_KEY", "CAIRN_CA", "CAIRN_META", "CAIRN_ENDPOINT"} {
		t.Setenv(k, env[k])
	}
	var out bytes.Buffer
	root := cli.Root()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(io.Discard)
	err := root.ExecuteContext(ctx)
	return out.String(), err
}

// keyFrom reads the pair `cairn admin key create` printed.
func keyFrom(t *testing.T, out string) meta.Credentials {
	t.Helper()
	var c meta.Credentials
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "CAIRN_ACCESS_KEY="); ok {
			c.AccessKey = v
		}
		if v, ok := strings.CutPrefix(l, "CAIRN_SECRET_KEY="); ok {
			c.Secret = v
		}
	}
	if c.AccessKey == "" || c.Secret == "" {
		t.Fatalf("no key pair in %q", out)
	}
	return c
}

func httpDo(t *testing.T, method, url string, c *meta.Credentials, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if c != nil {
		req.SetBasicAuth(c.AccessKey, c.Secret)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestSecuritySuite replays the attacks of the trust issue against a
// secure store: each must be refused (401/403, Unauthenticated or
// PermissionDenied, a failed handshake) and leave the store as it was.
func TestSecuritySuite(t *testing.T) {
	s := startSecureStore(t)
	ctx := context.Background()
	rootEnv := map[string]string{"CAIRN_CA": s.caFile, "CAIRN_ROOT_USER": secRoot, "CAIRN_ROOT_PASSWORD": secRootSecret}

	// The world: root's private namespace "victim" and "shared" with a
	// file each, users made and keys issued through the CLI as root.
	for _, ns := range []string{"victim", "shared"} {
		if c := httpDo(t, "PUT", s.gwURL+"/"+ns, &s.root, ""); c != http.StatusOK && c != http.StatusCreated {
			t.Fatalf("create %s: %d", ns, c)
		}
		if c := httpDo(t, "PUT", s.gwURL+"/"+ns+"/file.txt", &s.root, "private bytes"); c != http.StatusOK && c != http.StatusCreated {
			t.Fatalf("put into %s: %d", ns, c)
		}
	}
	var keys = map[string]meta.Credentials{}
	for _, u := range []struct{ name, grant string }{{"mallory", ""}, {"alice", "shared=read"}} {
		if _, err := cairnCmd(t, ctx, rootEnv, "admin", "user", "create", u.name, "--meta", s.metaAddr); err != nil {
			t.Fatalf("admin user create %s as root: %v", u.name, err)
		}
		args := []string{"admin", "key", "create", u.name, "--meta", s.metaAddr}
		if u.grant != "" {
			args = append(args, "--grant", u.grant)
		}
		out, err := cairnCmd(t, ctx, rootEnv, args...)
		if err != nil {
			t.Fatalf("admin key create %s as root: %v", u.name, err)
		}
		keys[u.name] = keyFrom(t, out)
	}
	mallory, alice := keys["mallory"], keys["alice"]
	before := metatest.Snapshot(t, s.svc, "victim", "shared")

	t.Run("every meta method, unauthenticated or wrong identity", func(t *testing.T) {
		anyone := map[string]bool{"Info": true, "Volumes": true, "SecretsRevocations": true, "ListNamespaces": true}
		_, anon := s.dial(t, nil, nil)
		metatest.CallEvery(anon, "victim", func(method string, err error) {
			if !anyone[method] && !errors.Is(errors.Unauthenticated, err) && !errors.Is(errors.Permission, err) {
				t.Errorf("anonymous %s: %v", method, err)
			}
		})
		userOK := map[string]bool{"Authenticate": true, "Info": true, "Volumes": true, "SecretsRevocations": true, "ListNamespaces": true, "Sync": true, "MountReserve": true, "RenewCaps": true}
		_, mal := s.dial(t, nil, &mallory)
		metatest.CallEvery(mal, "victim", func(method string, err error) {
			if method == "Join" { // the token is the credential: none, refused
				if !errors.Is(errors.Unauthenticated, err) {
					t.Errorf("mallory Join without a token: %v", err)
				}
				return
			}
			if !userOK[method] && !errors.Is(errors.Permission, err) {
				t.Errorf("mallory %s on victim: %v", method, err)
			}
		})
		rogue := pkitest.NewCA(t).Cert(t, pki.RoleMeta, "rogue") // not our CA
		_, rc := s.dial(t, []tls.Certificate{rogue}, nil)
		metatest.CallEvery(rc, "victim", func(method string, err error) {
			if err == nil {
				t.Errorf("a certificate of another CA called %s", method)
			}
		})
		// Plaintext to the TLS listener: no call gets through.
		_, plain, err := meta.Dial(s.metaAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		metatest.CallEvery(plain, "victim", func(method string, err error) {
			if err == nil {
				t.Errorf("plaintext %s answered", method)
			}
		})
	})

	t.Run("env -i cairn admin key create mallory --grant victim=write", func(t *testing.T) {
		for name, env := range map[string]map[string]string{
			"no credentials, TLS":       {"CAIRN_CA": s.caFile},
			"no credentials, plaintext": {},
			"mallory's key":             {"CAIRN_CA": s.caFile, "CAIRN_ACCESS_KEY": mallory.AccessKey, "CAIRN_SECRET_KEY": mallory.Secret},
			"wrong root secret":         {"CAIRN_CA": s.caFile, "CAIRN_ROOT_USER": secRoot, "CAIRN_ROOT_PASSWORD": "guess"},
		} {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			out, err := cairnCmd(t, cctx, env, "admin", "key", "create", "mallory", "--grant", "victim=write", "--meta", s.metaAddr)
			cancel()
			if err == nil || strings.Contains(out, "SECRET") {
				t.Errorf("%s: key created (%q, %v)", name, out, err)
			}
		}
		for _, args := range [][]string{{"admin", "user", "create", "eve"}, {"admin", "key", "ls"}, {"admin", "status"}} {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if out, err := cairnCmd(t, cctx, map[string]string{"CAIRN_CA": s.caFile}, append(args, "--meta", s.metaAddr)...); err == nil {
				t.Errorf("%v without credentials: %q", args, out)
			}
			cancel()
		}
	})

	t.Run("S3GetSecret from a user", func(t *testing.T) {
		mc, _ := s.dial(t, nil, &alice)
		if _, err := mc.S3GetSecret(ctx, &metapb.S3KeyRequest{AccessKey: secRoot}); !errors.Is(errors.Permission, err) {
			t.Fatalf("alice read root's secret: %v", err)
		}
		mc, _ = s.dial(t, nil, &s.root)
		if _, err := mc.S3GetSecret(ctx, &metapb.S3KeyRequest{AccessKey: alice.AccessKey}); !errors.Is(errors.Permission, err) {
			t.Fatalf("root over a user connection read a secret: %v", err)
		}
	})

	t.Run("fake heartbeat without a data identity", func(t *testing.T) {
		hb := &metapb.HeartbeatRequest{ServerId: "fake", Addr: "127.0.0.1:1", Capacity: 1 << 40, Free: 1 << 40}
		rootCl, _ := s.dial(t, nil, &s.root)
		anonCl, _ := s.dial(t, nil, nil)
		for name, mc := range map[string]metapb.MetaClient{"anonymous": anonCl, "root user": rootCl, "gateway": s.role(t, pki.RoleGateway, "g2")} {
			if _, err := mc.Heartbeat(ctx, hb); !errors.Is(errors.Permission, err) && !errors.Is(errors.Unauthenticated, err) {
				t.Errorf("heartbeat from %s: %v", name, err)
			}
		}
		st, err := rootCl.ClusterStatus(ctx, &metapb.Empty{})
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Servers) != 1 || st.Servers[0].Id == "fake" {
			t.Fatalf("servers after the fake heartbeats: %v", st.Servers)
		}
	})

	t.Run("revoked data-server certificate", func(t *testing.T) {
		// A data identity whose key was stolen: it heartbeats until root
		// revokes it, then neither its open connection nor a new one works.
		stolen := s.ca.Cert(t, pki.RoleData, "stolen")
		mc, _ := s.dial(t, []tls.Certificate{stolen}, nil)
		hb := &metapb.HeartbeatRequest{ServerId: "stolen", Addr: "127.0.0.1:2", Capacity: 1, Free: 1}
		if _, err := mc.Heartbeat(ctx, hb); err != nil {
			t.Fatalf("heartbeat before the revocation: %v", err)
		}
		malloryEnv := map[string]string{"CAIRN_CA": s.caFile, "CAIRN_ACCESS_KEY": mallory.AccessKey, "CAIRN_SECRET_KEY": mallory.Secret}
		if out, err := cairnCmd(t, ctx, malloryEnv, "admin", "cert", "revoke", "d1", "--meta", s.metaAddr); err == nil {
			t.Fatalf("mallory revoked the data server: %s", out)
		}
		if out, err := cairnCmd(t, ctx, rootEnv, "admin", "cert", "revoke", "stolen", "--meta", s.metaAddr); err != nil || !strings.Contains(out, "revoked id stolen") {
			t.Fatalf("cairn admin cert revoke stolen as root: %v %s", err, out)
		}
		if _, err := mc.Heartbeat(ctx, hb); !errors.Is(errors.Unauthenticated, err) {
			t.Fatalf("heartbeat over the open connection after the revocation: %v", err)
		}
		again, _ := s.dial(t, []tls.Certificate{stolen}, nil)
		if _, err := again.Heartbeat(ctx, hb); err == nil {
			t.Fatal("heartbeat over a new connection after the revocation")
		}
	})

	t.Run("right needle key, wrong cookie, valid capability", func(t *testing.T) {
		r, err := s.svc.Resolve(ctx, &metapb.ResolveRequest{Ns: "victim", Path: "file.txt", WantExtents: true})
		if err != nil || len(r.Extents) != 1 {
			t.Fatalf("resolve: %v %v", r, err)
		}
		e := r.Extents[0]
		get := func(key uint64) int {
			tok, err := s.svc.CapKeyring().Mint(capability.Read, e.Volume, key, key, "victim", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest("GET", fmt.Sprintf("%s/v/%d/%d", s.dataURL, e.Volume, key), nil)
			req.Header.Set(capability.Header, tok)
			resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: s.ca.ClientConfig()}}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		if c := get(e.Key); c != http.StatusOK {
			t.Fatalf("the right key: %d", c)
		}
		for _, wrong := range []uint64{e.Key ^ 1<<32, uint64(uint32(e.Key))} {
			if c := get(wrong); c != http.StatusNotFound {
				t.Errorf("key %#x (the needle's sequence number, another cookie): %d, want 404", wrong, c)
			}
		}
	})

	t.Run("one key for every way in", func(t *testing.T) {
		if c := httpDo(t, "GET", s.gwURL+"/shared/file.txt", &alice, ""); c != http.StatusOK {
			t.Errorf("alice reads shared over the native API: %d", c)
		}
		if c := httpDo(t, "PUT", s.gwURL+"/shared/new.txt", &alice, "x"); c != http.StatusForbidden {
			t.Errorf("alice writes shared with a read grant: %d", c)
		}
		if c := httpDo(t, "GET", s.gwURL+"/victim/file.txt", &mallory, ""); c != http.StatusForbidden {
			t.Errorf("mallory reads victim: %d", c)
		}
		if c := httpDo(t, "GET", s.gwURL+"/victim/file.txt", nil, ""); c != http.StatusUnauthorized {
			t.Errorf("anonymous reads victim: %d", c)
		}
	})

	t.Run("mount of another user's private namespace", func(t *testing.T) {
		env := map[string]string{"CAIRN_CA": s.caFile, "CAIRN_ACCESS_KEY": mallory.AccessKey, "CAIRN_SECRET_KEY": mallory.Secret}
		dir := t.TempDir()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err := cairnCmd(t, cctx, env, "mount", "--meta", s.metaAddr, "victim", dir)
		syscall.Unmount(dir, syscall.MNT_DETACH)
		t.Logf("cairn mount victim as mallory: %v", err)
		if !errors.Is(errors.Permission, err) || !strings.Contains(err.Error(), "may not read namespace victim") {
			t.Fatalf("cairn mount victim as mallory: %v", err)
		}
		// A mount that skips the CLI's check meets meta's, on every call.
		m := mountAs(t, s, &mallory, "victim", false)
		if m == "" {
			return // refused at mount time
		}
		_, err = os.ReadFile(filepath.Join(m, "file.txt"))
		t.Logf("mallory reads victim through a mount: %v", err)
		if err == nil {
			t.Fatal("mallory read victim's file through a mount")
		}
		err = os.WriteFile(filepath.Join(m, "planted.txt"), []byte("x"), 0o644)
		t.Logf("mallory writes into victim through a mount: %v", err)
		if err == nil {
			t.Fatal("mallory wrote into victim through a mount")
		}
	})

	t.Run("read-only grant writing through a mount", func(t *testing.T) {
		env := map[string]string{"CAIRN_CA": s.caFile, "CAIRN_ACCESS_KEY": alice.AccessKey, "CAIRN_SECRET_KEY": alice.Secret}
		dir := t.TempDir()
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			_, err := cairnCmd(t, cctx, env, "mount", "--meta", s.metaAddr, "--cache-size", "16MiB", "shared", dir)
			done <- err
		}()
		defer func() {
			cancel()
			syscall.Unmount(dir, syscall.MNT_DETACH)
			<-done
		}()
		var got []byte
		var err error
		await.Until(t, 15*time.Second, "the mount to serve file.txt", func() bool {
			got, err = os.ReadFile(filepath.Join(dir, "file.txt"))
			return err == nil
		})
		if string(got) != "private bytes" {
			t.Fatalf("alice reads shared through the mount: %q %v", got, err)
		}
		err = os.WriteFile(filepath.Join(dir, "new.txt"), []byte("x"), 0o644)
		if !stderrors.Is(err, syscall.EROFS) {
			t.Fatalf("write through a read-only grant's mount: %v, want EROFS", err)
		}
		// Without the CLI's read-only mount, meta refuses each write.
		m := mountAs(t, s, &alice, "shared", false)
		if m == "" {
			t.Fatal("a read grant's mount was refused")
		}
		err = os.WriteFile(filepath.Join(m, "new.txt"), []byte("x"), 0o644)
		t.Logf("alice writes through a read-write mount of a read grant: %v", err)
		if err == nil {
			f, cerr := os.Open(filepath.Join(m, "new.txt"))
			if cerr == nil {
				f.Close()
			}
			t.Fatal("a read grant wrote through a read-write mount")
		}
	})

	if after := metatest.Snapshot(t, s.svc, "victim", "shared"); after != before {
		t.Errorf("the attacks changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// mountAs mounts ns with fusefs directly (no CLI checks) as the user; ""
// if the mount itself was refused.
func mountAs(t *testing.T, s *secureStore, c *meta.Credentials, ns string, ro bool) string {
	t.Helper()
	mc, _ := s.dial(t, nil, c)
	userTLS := s.ca.ClientConfig() // a user: trusts the CA, presents no certificate
	cl, err := client.New(client.Config{Meta: mc, NoWatch: true, CacheEntries: -1,
		Dial: func(a string) store.Chunks { return chunk.NewRemoteTLS(a, userTLS) }})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m, err := fusefs.New(fusefs.Config{Meta: mc, Client: cl, Namespace: ns, Mountpoint: dir, ReadOnly: ro, CacheSize: 16 << 20, SyncClose: true})
	if err != nil {
		cl.Close()
		t.Logf("mount of %s refused: %v", ns, err)
		if !errors.Is(errors.Permission, err) {
			t.Fatalf("mount of %s: %v, want refused for permission or a mount", ns, err)
		}
		return ""
	}
	t.Cleanup(func() { m.Unmount(); cl.Close() })
	return dir
}
