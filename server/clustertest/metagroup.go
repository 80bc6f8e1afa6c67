package clustertest

import (
	"context"
	"crypto/tls"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"cairn/meta"
	"cairn/pki"
	"cairn/proto/metapb"
)

// harnessTLS is the test's identity: meta made the cluster CA in dir (its
// data directory) at its start; the test holds its key, as an operator
// would, and issues itself a meta peer's certificate, which may call
// everything, as the tests need.
func harnessTLS(t testing.TB, dir string) *tls.Config {
	t.Helper()
	ca, err := pki.LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	self, err := ca.Node(pki.RoleMeta, "clustertest", nil)
	if err != nil {
		t.Fatal(err)
	}
	return self.Client()
}

// startMetaGroup starts Options.MetaGroup metas as one group and returns
// their gRPC addresses, comma separated. The first founds the group alone
// and creates the cluster's secrets (CA, S3 master key, capability keys);
// the others are given nothing but a meta join token and the first's
// address (`cairn meta --join TOKEN --meta ADDR`): each buys its
// certificate, adds itself to the group and learns the secrets from the
// replicated state (docs/architecture.md, "The meta group").
func (c *Cluster) startMetaGroup(t testing.TB) string {
	t.Helper()
	n := c.opt.MetaGroup
	var grpcAddrs []string
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
	}
	c.MetaRaft = raftAddrs
	var first metapb.MetaClient
	var token string
	for i := range n {
		dir := filepath.Join(c.Dir, "meta"+strconv.Itoa(i))
		args := []string{"meta", "--data", dir, "--listen", grpcAddrs[i], "--raft-listen", raftAddrs[i],
			"--admin", "off", "--dead-after", c.opt.DeadAfter.String()}
		if i == 0 {
			args = append(args, "--bootstrap", grpcAddrs[0]+"="+raftAddrs[0])
		} else {
			args = append(args, "--join", token, "--meta", grpcAddrs[0])
		}
		p := c.proc("meta"+strconv.Itoa(i), grpcAddrs[i], prefixes[i], append(args, c.opt.MetaArgs...))
		p.Dir = dir
		p.Start(t)
		c.Metas = append(c.Metas, p)
		if i == 0 {
			mc, conn, err := meta.Dial(grpcAddrs[0], meta.DialTLS(harnessTLS(t, dir)))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			first = mc
			WaitFor(t, 30*time.Second, "a meta join token from the first member", func() bool {
				resp, err := mc.CreateJoinToken(context.Background(), &metapb.CreateJoinTokenRequest{
					Role: "meta", Uses: uint32(n - 1), TtlNs: int64(time.Hour), AccessKey: Root, Secret: RootSecret})
				if err == nil {
					token = resp.Token
				}
				return err == nil
			})
		}
	}
	WaitFor(t, 60*time.Second, "every meta in the group", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := first.MetaMembers(ctx, &metapb.Empty{})
		return err == nil && len(r.Members) == n && r.Leader != ""
	})
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
