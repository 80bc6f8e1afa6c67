package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Netns is a network namespace joined to the test's namespace by a veth
// pair: HostIP on this side, NSIP inside. Cut takes the inside end down (a
// partition: nothing gets in or out, the processes inside keep running),
// Heal brings it back. Created by NewNetns, removed when the test ends.
type Netns struct {
	Name, HostIP, NSIP string
	hostIf, nsIf       string
}

// NewNetns creates a namespace and its veth pair. It needs root and
// iproute2 (`ip`).
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	if testing.Short() {
		t.Skip("network namespaces: not in the -short tier")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("network namespaces need iproute2's ip: %v", err)
	}
	id := os.Getpid() % 10000
	sub := 1 + os.Getpid()%250
	n := &Netns{
		Name: fmt.Sprintf("cairn-ct-%d", id), HostIP: fmt.Sprintf("10.231.%d.1", sub), NSIP: fmt.Sprintf("10.231.%d.2", sub),
		hostIf: fmt.Sprintf("ctv%da", id), nsIf: fmt.Sprintf("ctv%db", id),
	}
	n.run(t, "ip", "netns", "add", n.Name)
	t.Cleanup(func() {
		exec.Command("ip", "link", "del", n.hostIf).Run()
		exec.Command("ip", "netns", "del", n.Name).Run()
	})
	n.run(t, "ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", n.nsIf)
	n.run(t, "ip", "link", "set", n.nsIf, "netns", n.Name)
	n.run(t, "ip", "addr", "add", n.HostIP+"/30", "dev", n.hostIf)
	n.run(t, "ip", "link", "set", n.hostIf, "up")
	n.run(t, "ip", "netns", "exec", n.Name, "ip", "addr", "add", n.NSIP+"/30", "dev", n.nsIf)
	n.run(t, "ip", "netns", "exec", n.Name, "ip", "link", "set", "lo", "up")
	n.Heal(t)
	return n
}

// Prefix is the command prefix that runs a program inside the namespace.
func (n *Netns) Prefix() []string { return []string{"ip", "netns", "exec", n.Name} }

// Cut partitions the namespace from everything else.
func (n *Netns) Cut(t testing.TB) {
	n.run(t, "ip", "netns", "exec", n.Name, "ip", "link", "set", n.nsIf, "down")
}

// Heal reconnects it.
func (n *Netns) Heal(t testing.TB) {
	n.run(t, "ip", "netns", "exec", n.Name, "ip", "link", "set", n.nsIf, "up")
}

func (n *Netns) run(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// CutTCP drops, inside the namespace, every TCP segment to or from the
// given ports (either end): a partition of some connections only (a meta
// group's Raft traffic), while the rest still flows. HealTCP undoes it.
func (n *Netns) CutTCP(t testing.TB, ports ...string) {
	t.Helper()
	for _, p := range ports {
		for _, chain := range []string{"INPUT", "OUTPUT"} {
			for _, end := range []string{"--dport", "--sport"} {
				n.run(t, "ip", "netns", "exec", n.Name, "iptables", "-A", chain, "-p", "tcp", end, p, "-j", "DROP")
			}
		}
	}
}

// HealTCP removes what CutTCP added.
func (n *Netns) HealTCP(t testing.TB) {
	t.Helper()
	for _, chain := range []string{"INPUT", "OUTPUT"} {
		n.run(t, "ip", "netns", "exec", n.Name, "iptables", "-F", chain)
	}
}
