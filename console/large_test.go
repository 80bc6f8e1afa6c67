package console_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"cairn/client"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// TestBrowserLargeDirectory measures how long the console takes to show a
// directory of 10,000 files (its first page: listings are read by cursor,
// never whole) and that the next page loads on demand.
func TestBrowserLargeDirectory(t *testing.T) {
	s := startServer(t)
	bg := context.Background()
	cl := s.Client()
	if _, err := cl.CreateNamespace(bg, "big-dir", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	const n, workers = 10000, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if _, err := cl.Put(bg, "big-dir", fmt.Sprintf("f%05d.txt", i), strings.NewReader("x"), client.PutOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	ctx := chrome(t)
	base := s.ConsoleURL()
	run(t, ctx, "sign in", chromedp.Navigate(base+"/"), waitJS(`!document.getElementById("signin").hidden`),
		chromedp.SendKeys("#si-key", servertest.Root, chromedp.ByID), chromedp.SendKeys("#si-secret", servertest.RootSecret, chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`), waitJS(`!!document.querySelector('tr[data-name="big-dir"]')`))
	for i := range 3 { // the first load also warms the caches
		var ms float64
		run(t, ctx, "load", chromedp.Navigate("about:blank"), chromedp.Navigate(base+"/#/files/big-dir"),
			waitJS(`window.__listedAt !== undefined`), chromedp.Evaluate(`window.__listedAt`, &ms))
		var timing string
		run(t, ctx, "timing", chromedp.Evaluate(`JSON.stringify({dcl: performance.getEntriesByType("navigation")[0].domContentLoadedEventEnd|0,
			res: performance.getEntriesByType("resource").map((e) => [e.name.replace(location.origin, ""), e.startTime|0, e.responseEnd|0])})`, &timing))
		t.Logf("directory of %d files: first page shown %.0f ms after navigation started (load %d); %s", n, ms, i+1, timing)
	}
	run(t, ctx, "load more", chromedp.Click("#load-more", chromedp.ByID),
		waitJS(`Number(document.querySelector("#list").dataset.loaded) >= 400`))
}
