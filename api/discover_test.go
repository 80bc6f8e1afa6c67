package api

import (
	"net"
	"testing"
)

func TestSeenFrom(t *testing.T) {
	for _, tc := range []struct{ endpoint, advertised, want string }{
		{"http://127.0.0.1:8080", "127.0.0.1:8090", "127.0.0.1:8090"},
		{"http://10.1.2.3:8080", "127.0.0.1:8090", "10.1.2.3:8090"},
		{"http://store.example:8080", "[::]:8090", "store.example:8090"},
		{"http://[fd00::5]:8080", "0.0.0.0:8090", "[fd00::5]:8090"},
		{"http://10.1.2.3:8080", "meta:8090", "meta:8090"},
		{"http://10.1.2.3:8080", "10.9.9.9:7000", "10.9.9.9:7000"},
		{"http://localhost:8080", "localhost:8090", "localhost:8090"},
	} {
		got, err := seenFrom(tc.endpoint, tc.advertised)
		if err != nil || got != tc.want {
			t.Errorf("seenFrom(%q, %q) = %q, %v; want %q", tc.endpoint, tc.advertised, got, err, tc.want)
		}
	}
	for _, bad := range []string{"", "meta", "meta:", "::1", "[::1]"} {
		if got, err := seenFrom("http://10.1.2.3:8080", bad); err == nil {
			t.Errorf("seenFrom(%q) = %q, want an error", bad, got)
		}
	}
}

// FuzzSeenFrom: whatever a gateway advertises, the answer is an error or
// an address a dialer can split, with the advertised port.
func FuzzSeenFrom(f *testing.F) {
	f.Add("http://10.1.2.3:8080", "127.0.0.1:8090")
	f.Add("http://[fd00::5]:8080", "[::]:1")
	f.Add("https://h/p", "h:x")
	f.Fuzz(func(t *testing.T, endpoint, advertised string) {
		got, err := seenFrom(endpoint, advertised)
		if err != nil {
			return
		}
		_, port, err := net.SplitHostPort(got)
		if err != nil {
			t.Fatalf("seenFrom(%q, %q) = %q: %v", endpoint, advertised, got, err)
		}
		if _, want, _ := net.SplitHostPort(advertised); port != want {
			t.Fatalf("seenFrom(%q, %q) = %q: port changed", endpoint, advertised, got)
		}
	})
}
