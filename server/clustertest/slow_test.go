package clustertest

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/proto/metapb"
)

// TestSlowServersStayPlaceable: two of four data servers stop answering
// for a moment (SIGSTOP) under RF 3 writes. Writers report them failing and
// meta keeps them out of placement for DeadAfter. Once they answer
// heartbeats again they are slow, not dead: every write must succeed while
// the suspicion lasts. (Meta refused them with "3 replicas wanted, 2 data
// servers can take them" until it lapsed: the soak's errors under load.)
func TestSlowServersStayPlaceable(t *testing.T) {
	// A long DeadAfter: the suspicion outlasts the test's writes, and the
	// stopped servers' leases (most of it) outlast the stop.
	c := Start(t, Options{Bin: bin, DeadAfter: 40 * time.Second})
	c.CreateNS(t, "slow", 3)
	stopped := c.Chunks[:2]
	for _, p := range stopped {
		if err := p.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	cont := func() {
		for _, p := range stopped {
			p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(cont) // before the cluster's own cleanup kills them
	suspect := func(st *metapb.ClusterStatusResponse) (n int) {
		for _, s := range st.Servers {
			for _, p := range stopped {
				if s.Addr == p.Addr && s.Suspect && s.Alive {
					n++
				}
			}
		}
		return n
	}
	put := func(p string, size int) error {
		ctx, cancel := context.WithTimeout(bg, time.Minute)
		defer cancel()
		data := chunktest.Data(uint64(size), size)
		_, err := c.Client.Put(ctx, "slow", p, bytes.NewReader(data), client.PutOptions{SizeHint: int64(size)})
		return err
	}
	// Writes while they are stopped fail or not; they make the writers
	// report both servers.
	i, start := 0, time.Now()
	WaitFor(t, 3*time.Minute, "writers to report both stopped servers", func() bool {
		i++
		put(fmt.Sprintf("stopped/%d", i), 64<<10)
		return suspect(c.Status(t)) == 2
	})
	t.Logf("both reported after %d writes, %v", i, time.Since(start))
	resumed := time.Now().UnixNano()
	cont()
	WaitFor(t, time.Minute, "the stopped servers to send a heartbeat again", func() bool {
		n := 0
		for _, s := range c.Status(t).Servers {
			for _, p := range stopped {
				if s.Addr == p.Addr && s.LastHeartbeatNs > resumed {
					n++
				}
			}
		}
		return n == 2
	})
	t.Logf("heartbeats again after %v", time.Since(start))
	files := map[string][]byte{}
	for i := range 20 {
		p, size := fmt.Sprintf("after/%d", i), 1<<10+i*5000
		if err := put(p, size); err != nil {
			t.Fatalf("write %d after the slow servers answered again: %v", i, err)
		}
		files[p] = chunktest.Data(uint64(size), size)
	}
	t.Logf("20 writes done after %v", time.Since(start))
	if n := suspect(c.Status(t)); n != 2 {
		t.Fatalf("%d of the 2 slow servers still suspect after the writes: the test did not write under suspicion", n)
	}
	checkAll(t, c, "slow", files)
}
