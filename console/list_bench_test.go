package console_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"cairn/client"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// BenchmarkListPage is one page (200 entries) of a 10,000-file directory
// through the console, as the files page asks for it.
func BenchmarkListPage(b *testing.B) {
	s := startServer(b)
	bg := context.Background()
	cl := s.Client()
	cl.CreateNamespace(bg, "bench-dir", servertest.Root, metapb.Visibility_PRIVATE)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 10000; i += 8 {
				cl.Put(bg, "bench-dir", fmt.Sprintf("f%05d.txt", i), strings.NewReader("x"), client.PutOptions{})
			}
		}()
	}
	wg.Wait()
	br := newBrowser(b, s.ConsoleURL())
	br.signIn(servertest.Root, servertest.RootSecret)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		resp := br.do("GET", "/api/fs/bench-dir/?limit=200&cursor=f05000.txt", nil, nil)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i == 0 {
			b.Logf("first page request: %v", time.Since(t0))
		}
	}
}
