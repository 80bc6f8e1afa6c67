package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cairn/api"
	"cairn/api/apitest"
)

func TestPercentile(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	for _, tc := range []struct {
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{nil, 0.5, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(7), 0.99, 7 * time.Millisecond},
		{ms(1, 2), 0.5, 1 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.75, 3 * time.Millisecond},
		{ms(1, 2, 3, 4), 0.76, 4 * time.Millisecond},
		{ms(hundred...), 0.50, 50 * time.Millisecond},
		{ms(hundred...), 0.90, 90 * time.Millisecond},
		{ms(hundred...), 0.99, 99 * time.Millisecond},
		{ms(hundred...), 1.00, 100 * time.Millisecond},
		{ms(hundred...), 0.001, 1 * time.Millisecond},
	} {
		if got := Percentile(tc.samples, tc.q); got != tc.want {
			t.Errorf("Percentile(%d samples, %v) = %v, want %v", len(tc.samples), tc.q, got, tc.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	var a, b Recorder
	for i := 1; i <= 50; i++ {
		a.Add(time.Duration(2*i) * time.Microsecond)   // evens
		b.Add(time.Duration(2*i-1) * time.Microsecond) // odds
	}
	s := Summarize(&a, &b)
	if s.Count != 100 || s.P50 != 50*time.Microsecond || s.P99 != 99*time.Microsecond ||
		s.Max != 100*time.Microsecond || s.Mean != 50500*time.Nanosecond {
		t.Fatalf("summary %+v", s)
	}
}

func TestRun(t *testing.T) {
	fail := errors.New("boom")
	load := Load{Concurrency: 4, Duration: 200 * time.Millisecond, Warmup: 50 * time.Millisecond}
	var calls, failed, longest atomic.Int64
	called := time.Now()
	r := Run(context.Background(), "test", load,
		func(worker int) Op {
			n := 0
			return func(ctx context.Context) (int64, error) {
				start := time.Now()
				defer func() {
					d := int64(time.Since(start))
					for m := longest.Load(); d > m && !longest.CompareAndSwap(m, d); m = longest.Load() {
					}
				}()
				calls.Add(1)
				n++
				// The operation's own latency, as a fake server's work: an
				// op never takes less, whatever the machine's load, which
				// bounds the rate from above.
				time.Sleep(time.Millisecond)
				if worker == 0 && n%2 == 0 {
					failed.Add(1)
					return 0, fail
				}
				return 100, nil
			}
		})
	returned := time.Since(called)
	// Counts: the measured calls are some of those made (not the warm-up's).
	if r.Concurrency != 4 || r.Ops == 0 || r.Errors == 0 || r.Ops+r.Errors > calls.Load() || r.Errors > failed.Load() ||
		r.FirstError != "boom" || r.Bytes != r.Ops*100 {
		t.Fatalf("result %+v after %d calls, %d failed", r, calls.Load(), failed.Load())
	}
	// Four workers, each op at least 1 ms: at most 4000 ops/s.
	if r.OpsPerSec > 4000 || r.OpsPerSec != float64(r.Ops)/r.Elapsed.Seconds() ||
		r.P50 < time.Millisecond || r.Max < r.P99 || r.P99 < r.P50 {
		t.Fatalf("implausible result %+v (longest op %v)", r, time.Duration(longest.Load()))
	}
	// Measured from the end of the warm-up to the end of the last op that
	// started within the duration: within Run's own time, and no op began
	// after the duration (the 50 ms is for Run's own steps around an op).
	if r.Elapsed < load.Duration/2 || r.Elapsed > returned-load.Warmup ||
		r.Elapsed > load.Duration+time.Duration(longest.Load())+50*time.Millisecond {
		t.Fatalf("elapsed %v (duration %v, longest op %v, Run took %v)", r.Elapsed, load.Duration, time.Duration(longest.Load()), returned)
	}
}

func TestGetPutAgainstFake(t *testing.T) {
	srv := apitest.NewServer("root", "pw")
	defer srv.Close()
	c := api.New(srv.URL, "root", "pw")
	ctx := context.Background()
	s := Setup{Namespace: "bench", Objects: 20, Size: 1000, Public: true, Concurrency: 4}
	if n, err := Prepare(ctx, c, s); err != nil || n != 20 {
		t.Fatalf("Prepare uploaded %d, %v", n, err)
	}
	if n, err := Prepare(ctx, c, s); err != nil || n != 0 {
		t.Fatalf("second Prepare uploaded %d, %v; want 0", n, err)
	}
	urls, err := ObjectURLs(srv.URL+"/bench", 20)
	if err != nil {
		t.Fatal(err)
	}
	load := Load{Concurrency: 3, Duration: 100 * time.Millisecond}
	hc := HTTPClient(3, true)
	r := Run(ctx, "get", load, GetOp(hc, urls, "", 1000))
	if r.Ops == 0 || r.Errors != 0 || r.Bytes != r.Ops*1000 {
		t.Fatalf("anonymous GET of a public namespace: %+v", r)
	}
	// A wrong size is an error, not a fast result.
	if r := Run(ctx, "get", load, GetOp(hc, urls, "", 999)); r.Ops != 0 || r.Errors == 0 {
		t.Fatalf("GET with a wrong expected size: %+v", r)
	}
	base, _ := url.Parse(srv.URL + "/bench")
	r = Run(ctx, "put", load, PutOp(hc, base, "put/x", c.AuthHeader(), 4096))
	if r.Ops == 0 || r.Errors != 0 {
		t.Fatalf("PUT: %+v", r)
	}
	st, err := c.Stat(ctx, "bench", "put/x/0-0")
	if err != nil || st.Size != 4096 {
		t.Fatalf("first PUT object: %+v, %v", st, err)
	}
	if r := Run(ctx, "put", load, PutOp(hc, base, "put/y", "", 10)); r.Ops != 0 || r.Errors == 0 {
		t.Fatalf("anonymous PUT succeeded: %+v", r)
	}
}

func TestPrepareDirMatchesUpload(t *testing.T) {
	srv := apitest.NewServer("root", "pw")
	defer srv.Close()
	c := api.New(srv.URL, "root", "pw")
	dir := t.TempDir()
	if err := PrepareDir(dir, 3, 5000); err != nil {
		t.Fatal(err)
	}
	if _, err := Prepare(context.Background(), c, Setup{Namespace: "bench", Objects: 3, Size: 5000}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		local, err := os.ReadFile(filepath.Join(dir, ObjectName(i)))
		if err != nil {
			t.Fatal(err)
		}
		body, _, err := c.Get(context.Background(), "bench", ObjectName(i), api.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		remote, _ := io.ReadAll(body)
		body.Close()
		if !bytes.Equal(local, remote) || bytes.Equal(local, make([]byte, 5000)) {
			t.Fatalf("object %d: local and uploaded bytes differ, or are zeros", i)
		}
	}
}

func TestStream(t *testing.T) {
	srv := apitest.NewServer("root", "pw")
	defer srv.Close()
	c := api.New(srv.URL, "root", "pw")
	size := int64(9<<20 + 123) // crosses generator blocks, not a multiple of anything
	called := false
	res, err := Stream(context.Background(), c, "bench", "stream", size, true, func() { called = true })
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified || res.PutMBps <= 0 || res.GetMBps <= 0 || !called {
		t.Fatalf("result %+v", res)
	}
}

func TestGenerator(t *testing.T) {
	g := newGenerator(10<<20, false)
	data, err := io.ReadAll(g)
	if err != nil || len(data) != 10<<20 {
		t.Fatalf("read %d, %v", len(data), err)
	}
	a, b := data[:4<<20], data[4<<20:8<<20]
	if bytes.Equal(a, b) {
		t.Fatal("two generator blocks are equal")
	}
	zeros := 0
	for _, c := range data[:1<<20] {
		if c == 0 {
			zeros++
		}
	}
	if zeros > 1<<20/128 {
		t.Fatalf("%d zero bytes in the first MiB: not pseudo-random", zeros)
	}
}

func BenchmarkGetOpAllocs(b *testing.B) {
	srv := apitest.NewServer("root", "pw")
	defer srv.Close()
	c := api.New(srv.URL, "root", "pw")
	ctx := context.Background()
	if _, err := Prepare(ctx, c, Setup{Namespace: "bench", Objects: 1, Size: 4096, Public: true}); err != nil {
		b.Fatal(err)
	}
	urls, _ := ObjectURLs(srv.URL+"/bench", 1)
	op := GetOp(HTTPClient(1, true), urls, "", 4096)(0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := op(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	tab := NewTable(&buf)
	tab.Add(Result{Name: "get 4KiB", Concurrency: 1, OpsPerSec: 1234.4, MBPerSec: 5.05, P50: 81 * time.Microsecond,
		P90: 2 * time.Millisecond, P99: 1500 * time.Millisecond, Max: 2 * time.Second, Ops: 12344})
	tab.Add(Result{Name: "get 4KiB", Concurrency: 10, Errors: 3, FirstError: "GET /x: 503"})
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "BENCH") || strings.Count(buf.String(), "BENCH") != 1 {
		t.Fatalf("table:\n%s", buf.String())
	}
	f := strings.Fields(lines[1])
	want := []string{"get", "4KiB", "1", "1234", "5.0", "81.0µs", "2.00ms", "1.50s", "2.00s", "12344", "0"}
	if strings.Join(f, " ") != strings.Join(want, " ") {
		t.Fatalf("row %q, want %q", f, want)
	}
	if !strings.Contains(lines[3], "first error: GET /x: 503") {
		t.Fatalf("error line %q", lines[3])
	}
}
