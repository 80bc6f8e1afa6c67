package meta

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"

	"cairn/pki"
	"cairn/proto/metapb"
)

const benchPath = "users/alice/photos/2024/img.jpg" // 4 directories deep

func benchSetup(b *testing.B) *testServer {
	ts := start(b, nil)
	mkns(b, ts.cl, "bench")
	put(b, ts.cl, "bench", benchPath, 1000, 1)
	return ts
}

// parallelism makes b.RunParallel use about c goroutines.
func parallelism(b *testing.B, c int) {
	b.SetParallelism(max(1, c/runtime.GOMAXPROCS(0)))
}

func BenchmarkResolveGRPC(b *testing.B) {
	ts := benchSetup(b)
	parallelism(b, 32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &metapb.ResolveRequest{Ns: "bench", Path: benchPath, WantExtents: true}
		for pb.Next() {
			if _, err := ts.cl.Resolve(bg, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "resolves/s")
}

// BenchmarkResolveInProcess resolves through meta.Local, as the gateway
// of `cairn server` does.
func BenchmarkResolveInProcess(b *testing.B) {
	ts := benchSetup(b)
	lc := Local(ts.svc, Caller{Role: pki.RoleGateway, ID: "test"}, ts.cl)
	parallelism(b, 32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := &metapb.ResolveRequest{Ns: "bench", Path: benchPath, WantExtents: true}
		for pb.Next() {
			if _, err := lc.Resolve(bg, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "resolves/s")
}

// BenchmarkCommitGRPC commits small new files from 16 callers: each commit
// is durable (fsynced) before it returns, so this measures group commit.
// The meta alone is called as a group's members are
// (BenchmarkGroupCommitGRPC): over TLS, by a caller with a meta's
// certificate, so that the two compare the same work.
func BenchmarkCommitGRPC(b *testing.B) {
	benchCommits(b, startTLS(b))
}

// BenchmarkCommitGRPCPlaintext is BenchmarkCommitGRPC over plaintext, as
// the tests of the API call (TrustPlaintext): the cost of TLS.
func BenchmarkCommitGRPCPlaintext(b *testing.B) {
	ts := benchSetup(b)
	benchCommits(b, ts.cl)
}

// startTLS starts a meta alone serving TLS, with a namespace "bench", and
// dials it with a meta's certificate.
func startTLS(b *testing.B) metapb.MetaClient {
	ca, err := pki.NewCA("bench")
	if err != nil {
		b.Fatal(err)
	}
	node, err := ca.Node(pki.RoleMeta, "meta", pki.DefaultSANs())
	if err != nil {
		b.Fatal(err)
	}
	cfg := testConfig(b.TempDir(), nil)
	cfg.TrustPlaintext = false
	cfg.RootUser, cfg.RootPassword = "ROOTKEY", "rootsecret-0123456789"
	svc, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	gs := NewGRPCServer(svc, ServerTLS(node.Server()))
	lis := listenLoopback(b, "127.0.0.1:0")
	go gs.Serve(lis)
	cl, conn, err := Dial(lis.Addr().String(), DialTLS(node.Client()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		conn.Close()
		gs.Stop()
		svc.Close()
	})
	mkns(b, cl, "bench")
	return cl
}

// benchCommits commits small new files through cl from 16 callers.
func benchCommits(b *testing.B, cl metapb.MetaClient) {
	parallelism(b, 16)
	var n atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	defer func() {
		// The process's CPU time (every member, in-process, and the
		// client): on a loaded machine a steadier figure than commits/s.
		b.ReportMetric(float64(cpuTime()-cpu0)/1e3/float64(b.N), "cpu-µs/commit")
	}()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			req := &metapb.CommitRequest{Ns: "bench", Path: fmt.Sprintf("d%d/f%d", i%64, i), Parents: true, Size: 1,
				Extents: []*metapb.Extent{{Length: 1, Volume: 1, Key: uint64(i)}}}
			if _, err := cl.Commit(bg, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commits/s")
}

// cpuTime is the CPU time (user and system) this process used so far, in
// nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
