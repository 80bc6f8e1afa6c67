// Package ports picks loopback ports for tests that must know a server's
// address before it listens, or start it again on the same one.
//
// A port the kernel hands out for ":0" comes from the ephemeral range
// (ip_local_port_range, 32768-60999 by default), which is also where every
// outgoing connection takes its source port: once the picking listener
// closes, another test's connection or listener can take the port before
// the server binds it, or while a restarted server is down ("address
// already in use", seen on a loaded machine). Ports here come from below
// that range, where only listeners that ask for them by number go.
package ports

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// low and high bound the ports handed out: below the kernel's default
// ephemeral range, above the well-known and most registered services.
const low, high = 20000, 32767

// Free returns host:port with a port that no one listens on now, outside
// the ephemeral range. It fails tb if none is found.
func Free(tb testing.TB, host string) string {
	tb.Helper()
	for range 100 {
		addr := net.JoinHostPort(host, strconv.Itoa(low+rand.IntN(high-low+1)))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		return addr
	}
	tb.Fatalf("no free port on %s in %d-%d", host, low, high)
	return ""
}
