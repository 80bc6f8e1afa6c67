package clustertest

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"cairn/capability"
	"cairn/client"
	"cairn/meta"
	"cairn/pki"
	"cairn/proto/metapb"
)

// fixedCap presents one capability token for every call, as a client
// holding what meta handed it earlier does.
type fixedCap string

func (f fixedCap) Token(context.Context, capability.Op, uint32, uint64) string { return string(f) }

// TestSecretsMetaGroupJoined: a meta group of three processes where only
// the first was given secrets (it made them); the other two joined with a
// meta join token and nothing copied. Kill -9 the leader twice (the first
// kill leaves only members that joined). After each, with the new leader:
// root administers and makes a join token, a new data server joins with
// it, an S3 request signed with a key made before works, and a read
// capability meta signed before the faults still verifies on the data
// servers (a forged one does not).
func TestSecretsMetaGroupJoined(t *testing.T) {
	s3Addr := freeAddr(t, "127.0.0.1")
	c := Start(t, Options{Bin: bin, Servers: 2, MetaGroup: 3, Gateway: true, GatewayArgs: []string{"--s3", s3Addr}})
	for _, p := range c.Metas[1:] {
		for _, f := range []string{pki.CAKey, meta.MasterKeyFile, meta.RootCredentialsFile} {
			if _, err := os.Stat(filepath.Join(p.Dir, f)); err == nil {
				t.Fatalf("%s, which joined, has %s", p.Name, f)
			}
		}
		if st, err := os.Stat(p.Dir); err != nil || st.Mode().Perm() != 0o700 {
			t.Fatalf("%s's directory: %v %v (want 0700: the store holds the group's keys)", p.Name, st, err)
		}
	}

	// Before any fault: a namespace, a file and its read capability, an
	// S3 key and an object written with it.
	c.CreateNS(t, "sec", 2)
	data := bytes.Repeat([]byte("secrets "), 4096)
	if _, err := c.Client.Put(bg, "sec", "before", bytes.NewReader(data), client.PutOptions{SizeHint: int64(len(data))}); err != nil {
		t.Fatal(err)
	}
	res, err := c.MC.Resolve(bg, &metapb.ResolveRequest{Ns: "sec", Path: "before", WantExtents: true})
	if err != nil || len(res.Extents) == 0 || len(res.Caps) != len(res.Extents) {
		t.Fatalf("resolve: %v %v", res, err)
	}
	ext, readCap := res.Extents[0], res.Caps[0]
	if _, err := c.MC.S3CreateUser(bg, &metapb.S3User{Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	key, err := c.MC.S3CreateKey(bg, &metapb.S3CreateKeyRequest{User: "alice", Grants: map[string]metapb.S3Access{"sec": metapb.S3Access_S3_WRITE}})
	if err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 30*time.Second, "the S3 listener", func() bool {
		conn, err := net.DialTimeout("tcp", s3Addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
	s3c, err := minio.New(s3Addr, &minio.Options{Creds: credentials.NewStaticV4(key.Key.AccessKey, key.Secret, ""),
		Region: "us-east-1", BucketLookup: minio.BucketLookupPath})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3c.PutObject(bg, "sec", "s3-before", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
		t.Fatalf("S3 put before the faults: %v", err)
	}

	// A gateway's identity: data servers do not let it through without a
	// capability (a meta's or a data server's identity they would).
	ca, err := pki.LoadCA(c.Meta.Dir)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := ca.Node(pki.RoleGateway, "secrets-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Over HTTP, not the local socket (which trusts a process of the same
	// user, who may read the volume files anyway).
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: gw.Client()}, Timeout: 10 * time.Second}
	readWith := func(addr, tok string) error {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://%s/v/%d/%d", addr, ext.Volume, ext.Key), nil)
		req.Header.Set(capability.Header, tok)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", req.URL, resp.Status)
		}
		return nil
	}
	forged := readCap[:len(readCap)-4] + "AAAA"
	if readCap[len(readCap)-4:] == "AAAA" {
		forged = readCap[:len(readCap)-4] + "BBBB"
	}

	for round := range 2 {
		leader := c.MetaLeader(t)
		leader.Kill(t)
		var next *Proc
		WaitFor(t, 30*time.Second, "a new meta leader", func() bool {
			next = c.MetaLeader(t)
			return next != leader
		})
		t.Logf("round %d: killed %s; %s leads", round, leader.Name, next.Name)
		if round == 0 && next == c.Metas[0] {
			t.Fatal("the founding member leads after it was killed")
		}

		// Root administers: membership, and a join token for a new data
		// server, which the new leader certifies with the cluster CA.
		if out := c.Admin(t, "meta", "ls"); !strings.Contains(out, "leader") {
			t.Fatalf("cairn admin meta ls as root:\n%s", out)
		}
		out := c.Admin(t, "join-token", "--role", "data") // the token, then a line about it
		c.JoinToken, _, _ = strings.Cut(out, "\n")
		added := c.AddChunk(t)
		t.Logf("round %d: %s joined", round, added.Name)

		// S3 with the key made before: the new leader opens its sealed
		// secret for the gateway.
		WaitFor(t, 30*time.Second, "an S3 GET signed with the key made before", func() bool {
			o, err := s3c.GetObject(bg, "sec", "s3-before", minio.GetObjectOptions{})
			if err != nil {
				return false
			}
			defer o.Close()
			got, err := io.ReadAll(o)
			return err == nil && bytes.Equal(got, data)
		})
		if _, err := s3c.PutObject(bg, "sec", "s3-after", bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatalf("round %d: S3 put: %v", round, err)
		}

		// The capability signed before the faults, at the data servers
		// that hold the needle; a forged one nowhere. A server whose lease
		// lapsed across the two leader changes answers 503 until its
		// heartbeat reaches the new leader: that is unavailability, not a
		// verdict on the capability, so the check waits it out (a
		// capability refused, 403, never ends the wait).
		WaitFor(t, 30*time.Second, "the capability signed before the faults to verify on a data server", func() bool {
			for _, p := range c.Chunks[:2] {
				err := readWith(p.Addr, readCap)
				if err == nil {
					if err := readWith(p.Addr, forged); err == nil || !strings.Contains(err.Error(), "403") {
						t.Fatalf("round %d: %s took a forged capability: %v", round, p.Name, err)
					}
					return true
				}
				t.Logf("round %d: %s: %v", round, p.Name, err)
			}
			return false
		})
		if err := c.Check(bg, "sec", "before", data); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}

		leader.Start(t) // back, so that the next kill leaves a majority
		WaitFor(t, 30*time.Second, "the killed member back in the group", func() bool {
			r, err := c.MC.MetaMembers(bg, &metapb.Empty{})
			return err == nil && len(r.Members) == 3 && r.Leader != ""
		})
	}
}

// TestSecretsGatewayRefusesRevokedDataServer: a gateway reaches data
// servers at the addresses meta names, so it must hold the revocation list
// too. An honest data server cut off from meta stops serving when its lease
// runs out; an impostor holding a revoked certificate (a stolen server's
// key) does not. Revoke the data server's certificate and put an impostor
// with that certificate and key at its address: the gateway must refuse it
// in the handshake and send it no request.
func TestSecretsGatewayRefusesRevokedDataServer(t *testing.T) {
	c := Start(t, Options{Bin: bin, Servers: 1, Gateway: true})
	c.CreateNS(t, "revoked", 1)
	data := bytes.Repeat([]byte("revoked "), 256<<10) // 2 MiB: past the gateway's hot-object cache
	url := "http://" + c.Gateway.Addr + "/revoked/big"
	req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(data))
	req.SetBasicAuth(Root, RootSecret)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	get := func() int {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.SetBasicAuth(Root, RootSecret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("GET before the revocation: %d", code)
	}

	// The impostor: the data server's own certificate and key.
	node, err := pki.LoadNodeDir(filepath.Join(c.Chunks[0].Dir, "tls"))
	if err != nil {
		t.Fatal(err)
	}
	c.Admin(t, "cert", "revoke", c.Chunks[0].Addr)
	c.Chunks[0].Kill(t)
	var l net.Listener
	WaitFor(t, 10*time.Second, "the data server's address", func() bool {
		l, err = net.Listen("tcp", c.Chunks[0].Addr)
		return err == nil
	})
	var mu sync.Mutex
	requests := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests++
		mu.Unlock()
		http.Error(w, "impostor", http.StatusServiceUnavailable)
	})}
	go srv.Serve(tls.NewListener(l, node.Server()))
	t.Cleanup(func() { srv.Close() })
	seen := func() int {
		mu.Lock()
		defer mu.Unlock()
		return requests
	}
	WaitFor(t, 30*time.Second, "a gateway GET that sends the impostor nothing", func() bool {
		before := seen()
		code := get()
		return code != http.StatusOK && seen() == before
	})
	if n := seen(); n > 0 {
		t.Logf("the impostor got %d requests before the gateway learnt the list", n)
	}
	for range 3 {
		before := seen()
		if code := get(); code == http.StatusOK || seen() != before {
			t.Fatalf("the gateway talked to the revoked data server again (GET %d)", code)
		}
	}
}
