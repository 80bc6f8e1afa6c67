package errors

import (
	"fmt"
	"testing"
)

func TestKindSurvivesWrapping(t *testing.T) {
	inner := E(Op("volume.Read"), Corrupt, Path("ns/a"), "crc mismatch")
	outer := E(Op("gateway.Get"), inner)
	if !Is(Corrupt, outer) {
		t.Fatalf("kind lost: %v", outer)
	}
	wrapped := fmt.Errorf("context: %w", outer)
	if KindOf(wrapped) != Corrupt {
		t.Fatalf("kind lost through fmt wrapping: %v", wrapped)
	}
	if PathOf(wrapped) != "ns/a" {
		t.Fatalf("path lost: %q", PathOf(wrapped))
	}
}

func TestErrorString(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{E(Op("meta.Stat"), NotExist, Path("ns/x")), "meta.Stat ns/x: does not exist"},
		{E(Op("meta.Stat"), NotExist, "does not exist: ns/x"), "meta.Stat: does not exist: ns/x"},
		{E(Invalid, "bad range"), "invalid argument: bad range"},
		{E(Op("x"), New("boom")), "x: boom"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
	if Is(NotExist, nil) {
		t.Error("nil has no kind")
	}
	if KindOf(New("plain")) != Other {
		t.Error("plain error should be Other")
	}
}
