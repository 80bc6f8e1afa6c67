package clustertest

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"cairn/meta"
	"cairn/pki"
	"cairn/proto/metapb"
)

// startMetaGroup starts Options.MetaGroup metas as the founding members
// of one group and returns their gRPC addresses, comma separated. The
// first creates the cluster's secrets (CA, S3 master key, capability
// keys); the others start with copies of them, as an operator would
// copy them (docs/architecture.md, "The meta group").
func (c *Cluster) startMetaGroup(t testing.TB) string {
	t.Helper()
	n := c.opt.MetaGroup
	var grpcAddrs, peers []string
	raftAddrs := make([]string, n)
	prefixes := make([][]string, n)
	for i := range n {
		host := c.opt.Host
		if c.opt.MetaPlacement != nil {
			if p, h := c.opt.MetaPlacement(i); h != "" {
				prefixes[i], host = p, h
			}
		}
		g, r := freeAddr(t, host), freeAddr(t, host)
		grpcAddrs, raftAddrs[i] = append(grpcAddrs, g), r
		peers = append(peers, g+"="+r)
	}
	c.MetaRaft = raftAddrs
	for i := range n {
		dir := filepath.Join(c.Dir, "meta"+strconv.Itoa(i))
		p := c.proc("meta"+strconv.Itoa(i), grpcAddrs[i], prefixes[i], append([]string{"meta", "--data", dir,
			"--listen", grpcAddrs[i], "--raft-listen", raftAddrs[i], "--bootstrap", strings.Join(peers, ","),
			"--admin", "off", "--dead-after", c.opt.DeadAfter.String()}, c.opt.MetaArgs...))
		p.Dir = dir
		if i > 0 {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for _, f := range []string{pki.CAFile, pki.CAKey, meta.MasterKeyFile, meta.CapKeyFile} {
				b, err := os.ReadFile(filepath.Join(c.Metas[0].Dir, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
		p.Start(t)
		c.Metas = append(c.Metas, p)
	}
	c.Meta = c.Metas[0]
	return strings.Join(grpcAddrs, ",")
}

// MetaLeader returns the member that leads the meta group now, waiting
// for one.
func (c *Cluster) MetaLeader(t testing.TB) *Proc {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		r, err := c.MC.MetaMembers(ctx, &metapb.Empty{})
		cancel()
		if err == nil && r.Leader != "" {
			for _, p := range c.Metas {
				if p.Addr == r.Leader && p.Running() {
					return p
				}
			}
		}
		<-time.After(50 * time.Millisecond)
	}
	t.Fatal("no meta leader within 30s")
	return nil
}
