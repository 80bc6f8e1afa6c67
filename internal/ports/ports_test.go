package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeIsOutsideTheEphemeralRangeAndBindable(t *testing.T) {
	seen := map[string]bool{}
	for range 20 {
		addr := Free(t, "127.0.0.1")
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(p)
		if n < low || n > high {
			t.Fatalf("port %d outside %d-%d", n, low, high)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("%s was handed out but cannot be bound: %v", addr, err)
		}
		l.Close()
		seen[addr] = true
	}
	if len(seen) < 2 {
		t.Fatal("the same port every time")
	}
}

func TestFreeSkipsABoundPort(t *testing.T) {
	// Hold most of the range's first picks busy is impractical; hold one
	// and check it is never returned while held.
	l, err := net.Listen("tcp", Free(t, "127.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 200 {
		if Free(t, "127.0.0.1") == l.Addr().String() {
			t.Fatalf("%s returned while bound", l.Addr())
		}
	}
}
