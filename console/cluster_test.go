package console_test

import (
	"net"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"cairn/server/clustertest"
)

// TestBrowserClusterDeadServer runs `cairn gateway --console` in a cluster
// of real processes (meta, three data servers), kills a data server and
// waits for the cluster page to show it dead.
func TestBrowserClusterDeadServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster of processes, which -short leaves to the full suite")
	}
	bin, err := clustertest.Build(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := clustertest.Start(t, clustertest.Options{Bin: bin, Servers: 3, Gateway: true, DeadAfter: 2 * time.Second,
		GatewayArgs: []string{"--console", addr}})
	base := "http://" + addr
	clustertest.WaitFor(t, 30*time.Second, "the gateway's console listening", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	ctx := chrome(t)
	shot := newShots(t)
	victim := c.Chunks[1]
	run(t, ctx, "sign in", chromedp.Navigate(base+"/#/cluster"), waitJS(`!document.getElementById("signin").hidden`),
		chromedp.SendKeys("#si-key", clustertest.Root, chromedp.ByID), chromedp.SendKeys("#si-secret", clustertest.RootSecret, chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`),
		waitJS(`document.querySelectorAll('#servers tr[data-state="alive"]').length === 3`))
	victim.Kill(t)
	run(t, ctx, "dead", waitJS(`document.querySelector('#servers tr[data-addr="`+victim.Addr+`"]').dataset.state === "dead"`),
		waitJS(`document.querySelectorAll('#servers tr[data-state="alive"]').length === 2`))
	shot.take(ctx, "13-cluster-dead-server")
}
