package chunk

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"cairn/capability"
	"cairn/chunk/chunktest"
	"cairn/ec"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/pki"
	"cairn/pki/pkitest"
	"cairn/proto/metapb"
)

// TestECRangesStream: a degraded read fetches its peers' ranges over
// ranges streams (not GET /ec/{vid}/shards/{i}), kept and reused; a
// pooled stream the peer has closed is replaced without the read failing
// or the peer being taken for failed; a peer that refuses the upgrade is
// read over HTTP; closing a store ends the streams it serves.
func TestECRangesStream(t *testing.T) {
	const size = 155 << 10
	stores, rs, keys, home := ecSetup(t, 40, size, 1<<20)
	ev := stores[3].ecVolume(1)
	stores[3].ec.mu.Lock()
	delete(ev.shards, 3) // shard 3 lost
	stores[3].ec.mu.Unlock()
	check := func(what string) {
		t.Helper()
		readLostShard(t, what, rs[2], keys, size, func(k uint64) int { return home[k] })
	}
	served := func() (n int64) {
		for _, s := range stores {
			n += s.ec.rangesServed.Load()
		}
		return n
	}
	check("first")
	// Server 2 rebuilds from its own shard 2 and three peers' (0, 1, 4).
	if served() == 0 {
		t.Fatal("the degraded reads fetched no range over a stream")
	}
	for _, i := range []int{0, 1} {
		p := stores[2].rangeStreams(rs[i].Addr())
		p.mu.Lock()
		idle := len(p.idle)
		p.mu.Unlock()
		// The reads were one at a time (two streams at once for a
		// needle across cells): streams were reused, and kept.
		opened, served := p.opened.Load(), stores[i].ec.rangesServed.Load()
		if opened > 2 || served < 2*opened || idle != int(opened) {
			t.Fatalf("server 2 opened %d streams to server %d for %d ranges (%d idle), want at most 2, reused and kept", opened, i, served, idle)
		}
	}

	// Server 1 closes its end of every stream (as it does when one is
	// idle too long or its capability expires): the next read opens new
	// ones, and does not count server 1 as failed.
	stores[1].ec.streamsMu.Lock()
	for c := range stores[1].ec.streams {
		c.Close()
	}
	stores[1].ec.streamsMu.Unlock()
	before := stores[1].ec.rangesServed.Load()
	check("streams closed by the peer")
	if _, failed := stores[2].ecVolume(1).failed.Load(peerShard{1, rs[1].Addr()}); failed {
		t.Fatal("server 1 taken for failed after it closed idle streams")
	}
	if stores[1].ec.rangesServed.Load() == before {
		t.Fatal("server 1 served no range after its streams were closed")
	}

	// Shard 0 moves behind an address that refuses the upgrade (an older
	// server): read over HTTP.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := stores[0].Handler()
	old := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ec/ranges" {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})}
	go old.Serve(lis)
	t.Cleanup(func() { old.Close() })
	addrs := addrsOf(rs)
	addrs[0] = lis.Addr().String()
	stores[2].ecHeartbeat([]*metapb.Volume{{Id: 1, Ec: &metapb.EcVolume{K: 4, M: 2, ShardServers: addrs}}})
	check("a peer without streams")
	if p := stores[2].rangeStreams(addrs[0]); p.refused.Load() < time.Now().UnixNano() {
		t.Fatal("a peer that refused the upgrade is not asked over HTTP")
	}

	// Closing a store ends the streams it serves.
	stores[4].ec.streamsMu.Lock()
	open := len(stores[4].ec.streams)
	stores[4].ec.streamsMu.Unlock()
	if open == 0 {
		t.Fatal("server 4 serves no stream")
	}
	stores[4].Close()
	stores[4].ec.streamsMu.Lock()
	defer stores[4].ec.streamsMu.Unlock()
	for c := range stores[4].ec.streams {
		// Closed by Close: a read on it fails at once.
		if _, err := c.Read(make([]byte, 1)); err == nil {
			t.Fatal("a stream outlived its store's Close")
		}
	}
}

// TestECRangesTLS: over mutual TLS the streams carry ranges too (read and
// written, no sendfile), authorised by the peers' data identities with no
// capability; a peer whose certificate is revoked is refused on the
// stream it has, and the read rebuilds from the others.
func TestECRangesTLS(t *testing.T) {
	const size = 155 << 10
	ctx := context.Background()
	ca := pkitest.NewCA(t)
	var stores []*Store
	var rs []*Remote
	var addrs []string
	for i := range 6 {
		cfg := testConfig(t.TempDir())
		cfg.MaxVolumeSize = 1 << 30
		cfg.Caps = nil // identities only: a capability would hide them
		cfg.TLS = ca.ClientConfig(ca.Cert(t, pki.RoleData, fmt.Sprintf("d%d", i)))
		s := openStore(t, cfg)
		s.caps.Set(capability.NewKey(7)) // ready, but signs nothing the peers know
		addr := serveTLS(t, s, ca)
		stores = append(stores, s)
		rs = append(rs, NewRemoteTLS(addr, ca.ClientConfig(ca.Cert(t, pki.RoleMeta, "meta"))))
		addrs = append(addrs, addr)
	}
	if err := stores[0].CreateVolume(ctx, 1, 1); err != nil {
		t.Fatal(err)
	}
	var keys []uint64
	for i := range 40 {
		k, err := stores[0].Put(ctx, 1, 1, chunktest.Data(uint64(i), size))
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	if _, err := rs[0].EncodeVolume(ctx, 1, 1, 4, 2, 1<<20, addrs); err != nil {
		t.Fatal(err)
	}
	for _, s := range stores {
		s.ecHeartbeat([]*metapb.Volume{{Id: 1, Ec: &metapb.EcVolume{K: 4, M: 2, ShardServers: addrs}}})
	}
	ev := stores[3].ecVolume(1)
	stores[3].ec.mu.Lock()
	delete(ev.shards, 3)
	stores[3].ec.mu.Unlock()
	l := ev.layout
	check := func(what string) {
		t.Helper()
		readLostShard(t, what, rs[2], keys, size, func(k uint64) int {
			nd, _ := ec.Find(ev.idx, k)
			return l.Home(nd)
		})
	}
	check("over TLS")
	if stores[0].ec.rangesServed.Load() == 0 || stores[1].ec.rangesServed.Load() == 0 {
		t.Fatal("no range served over a TLS stream")
	}
	// Server 0 revokes server 2's certificate: its open stream is refused
	// at the next request; shards 1, 4 and 5 make up for shard 0.
	stores[0].setRevoked([]*metapb.RevokedCert{{Id: "d2", RevokedNs: time.Now().UnixNano()}})
	before := stores[0].ec.rangesServed.Load()
	check("shard 0's server revoked the reader")
	if got := stores[0].ec.rangesServed.Load(); got != before {
		t.Fatalf("server 0 served %d ranges to a revoked peer", got-before)
	}
}

// rwPair is a stream whose writes are dropped and whose reads come from
// a fixed answer.
type rwPair struct{ r *bytes.Reader }

func (p rwPair) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p rwPair) Write(b []byte) (int, error) { return len(b), nil }

// FuzzRangeAnswer feeds a ranges stream's client arbitrary answers: it
// must never panic, never claim more bytes than it asked for, never
// allocate for an oversized error, and accept an ok answer only of the
// exact size asked.
func FuzzRangeAnswer(f *testing.F) {
	ok := append([]byte{0, 0, 4, 0, 0, 0}, "abcd"...)
	f.Add(ok, 4)
	f.Add([]byte{1, byte(1), 3, 0, 0, 0, 'b', 'a', 'd'}, 4)
	f.Add([]byte{1, 1, 0xff, 0xff, 0xff, 0xff}, 4)
	f.Add([]byte{0, 0, 9, 0, 0, 0, 1}, 9)
	f.Add([]byte{0, 0}, 1)
	f.Fuzz(func(t *testing.T, answer []byte, want int) {
		if want < 0 || want > 1<<16 {
			return
		}
		b := make([]byte, want)
		n, got, err := rangeExchange(rwPair{bytes.NewReader(answer)}, make([]byte, rangeReqSize), b)
		if n > len(b) || got > len(answer) {
			t.Fatalf("n=%d got=%d of a %d-byte answer for %d bytes", n, got, len(answer), want)
		}
		if err == nil && (len(answer) < rangeHdrSize+want || answer[0] != 0 || n != want) {
			t.Fatalf("accepted %x as %d bytes (n=%d)", answer, want, n)
		}
	})
}

// readLostShard reads, through r, every needle of volume 1 whose home is
// the lost shard 3 (keys[i] holds chunktest.Data(i, size)) and checks its
// bytes; what names the moment. At least 3 such needles must exist.
func readLostShard(t *testing.T, what string, r *Remote, keys []uint64, size int64, home func(uint64) int) {
	t.Helper()
	n := 0
	for i, k := range keys {
		if home(k) != 3 {
			continue
		}
		n++
		var b bytes.Buffer
		if _, err := r.ReadTo(context.Background(), 1, k, 0, size, &b); err != nil {
			t.Fatalf("%s: needle %d: %v", what, k, err)
		}
		if !bytes.Equal(b.Bytes(), chunktest.Data(uint64(i), int(size))) {
			t.Fatalf("%s: needle %d: wrong bytes", what, k)
		}
	}
	if n < 3 {
		t.Fatalf("%s: only %d needles in shard 3", what, n)
	}
}

// TestECRangeErrorsCounted: a range a ranges stream answers with an error
// (the shard is not on that server) counts as an error of the ec-range
// op, and the stream goes on serving; a range served counts as none.
func TestECRangeErrorsCounted(t *testing.T) {
	stores, rs, _, _ := ecSetup(t, 8, 64<<10, 1<<20)
	ctx := context.Background()
	// counted waits for the server's count of ec-range calls to reach
	// calls (it counts after the answer is sent) and returns its errors.
	counted := func(calls uint64) (errs uint64) {
		t.Helper()
		await.Until(t, 30*time.Second, "the ec-range count", func() bool {
			for _, st := range stores[1].ops.Snapshot() {
				if st.Op == "ec-range" && st.Calls >= calls {
					errs = st.Errors
					return true
				}
			}
			return false
		})
		return errs
	}
	p := stores[2].rangeStreams(rs[1].Addr())
	b := make([]byte, 4096)
	if _, err := p.ReadShard(ctx, 1, 1, b, 0); err != nil {
		t.Fatal(err)
	}
	if n := counted(1); n != 0 {
		t.Fatalf("a range served: %d errors of ec-range, want 0", n)
	}
	// Server 1 holds shard 1 only.
	if _, err := p.ReadShard(ctx, 1, 3, b, 0); !errors.Is(errors.NotExist, err) {
		t.Fatalf("shard 3 asked of server 1: %v, want NotExist", err)
	}
	if n := counted(2); n != 1 {
		t.Fatalf("a range refused: %d errors of ec-range, want 1", n)
	}
	if _, err := p.ReadShard(ctx, 1, 1, b, 4096); err != nil {
		t.Fatal(err)
	}
	if p.opened.Load() != 1 {
		t.Fatalf("%d streams opened, want 1: an error answer must leave the stream good", p.opened.Load())
	}
}
