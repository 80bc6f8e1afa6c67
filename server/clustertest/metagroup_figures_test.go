package clustertest

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMetaGroupFigures measures the figures for the meta group in
// one run, with `cairn bench` against a cluster with one meta and one with
// a group of three (each with a gateway and two data servers), one after
// the other: resolutions per second at c=32, metadata writes per second at
// c=16, 4 KiB PUTs through the gateway at c=16, and the failover a writer
// sees when the leader is killed under load (meta-write's MAX). Minutes of
// load, so only when CAIRN_META_FIGURES=1:
//
//	CAIRN_META_FIGURES=1 go test -count=1 -v -run TestMetaGroupFigures ./server/clustertest/
func TestMetaGroupFigures(t *testing.T) {
	if os.Getenv("CAIRN_META_FIGURES") == "" {
		t.Skip("set CAIRN_META_FIGURES=1 to measure (minutes of load)")
	}
	dur := "5s"
	type figures struct{ resolve, stale, anyMember, write, put float64 }
	measure := func(c *Cluster, group bool) figures {
		var f figures
		f.resolve = opsPerSec(t, benchRun(t, c, "meta", "--meta", c.MetaAddr, "--concurrency", "32", "--duration", dur))
		if group {
			f.stale = opsPerSec(t, benchRun(t, c, "meta", "--meta", c.MetaAddr, "--concurrency", "32", "--duration", dur, "--stale"))
			f.anyMember = opsPerSec(t, benchRun(t, c, "meta", "--meta", c.MetaAddr, "--concurrency", "32", "--duration", dur, "--any-member"))
		}
		f.write = opsPerSec(t, benchRun(t, c, "meta-write", "--meta", c.MetaAddr, "--concurrency", "16", "--duration", dur))
		f.put = opsPerSec(t, benchRun(t, c, "put", "--endpoint", "http://"+c.Gateway.Addr, "--size", "4KiB", "--concurrency", "16", "--duration", dur))
		return f
	}
	// Both clusters up at once (the idle one costs little), measured in
	// turn, twice: on a shared machine the load drifts within minutes,
	// and each round's ratio is of figures taken a few seconds apart.
	single := Start(t, Options{Bin: bin, Servers: 2, Gateway: true})
	single.CreateNS(t, "bench", 1)
	group := Start(t, Options{Bin: bin, Servers: 2, Gateway: true, MetaGroup: 3})
	group.CreateNS(t, "bench", 1)
	for round := range 2 {
		one := measure(single, false)
		three := measure(group, true)
		t.Logf("round %d: resolve c=32: single %.0f/s, group %.0f/s (%.2fx), group stale-ok (any member) %.0f/s (%.2fx), group any-member (read index) %.0f/s (%.2fx)",
			round, one.resolve, three.resolve, three.resolve/one.resolve, three.stale, three.stale/one.resolve, three.anyMember, three.anyMember/one.resolve)
		t.Logf("round %d: mkdir c=16: single %.0f/s, group %.0f/s (%.2fx)", round, one.write, three.write, three.write/one.write)
		t.Logf("round %d: PUT 4KiB c=16 via the gateway: single meta %.0f/s, group %.0f/s (%.2fx)", round, one.put, three.put, three.put/one.put)
	}

	// Failover: kill -9 the leader 4 s into a 12 s write run.
	done := make(chan string, 1)
	go func() {
		done <- benchRun(t, group, "meta-write", "--meta", group.MetaAddr, "--concurrency", "16", "--duration", "12s", "--warmup", "0s")
	}()
	time.Sleep(4 * time.Second) // the load runs meanwhile; a fixed point in it, not a wait for an event
	group.MetaLeader(t).Kill(t)
	out := <-done
	t.Logf("meta-write across a kill -9 of the leader (MAX is the failover a writer saw):\n%s", out)
}

// benchRun runs `cairn bench args...` against c and returns its output.
func benchRun(t *testing.T, c *Cluster, args ...string) string {
	t.Helper()
	cmd := exec.Command(c.opt.Bin, append([]string{"bench"}, args...)...)
	cmd.Env = append(os.Environ(), "CAIRN_CA="+c.CAFile, "CAIRN_ROOT_USER="+Root, "CAIRN_ROOT_PASSWORD="+RootSecret,
		"CAIRN_ACCESS_KEY="+Root, "CAIRN_SECRET_KEY="+RootSecret)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("cairn bench %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	t.Logf("cairn bench %s:\n%s", strings.Join(args, " "), out.String())
	return out.String()
}

// opsPerSec reads the OPS/S column of a bench table's one row.
func opsPerSec(t *testing.T, out string) float64 {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if i == 0 || len(f) < 3 || f[0] == "BENCH" {
			continue
		}
		for j, h := range strings.Fields(lines[0]) {
			if h == "OPS/S" {
				// Names may hold spaces ("meta resolve"): count from the end.
				k := len(f) - (len(strings.Fields(lines[0])) - j)
				if v, err := strconv.ParseFloat(f[k], 64); err == nil {
					return v
				}
			}
		}
	}
	t.Fatalf("no OPS/S in:\n%s", out)
	return 0
}
