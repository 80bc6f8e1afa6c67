package client

import (
	"bytes"
	"fmt"
	"testing"
)

// TestBufPoolSizeClasses: a buffer from the pool holds what was asked and
// less than twice that, whatever sizes went back before. With one pool
// for every size, a 155 KiB read got back the 8 MiB buffer an extent had
// grown.
func TestBufPoolSizeClasses(t *testing.T) {
	sizes := []int64{1, 100, 4 << 10, 155 << 10, 1 << 20, 8<<20 + bytes.MinRead, 8 << 20, 40 << 20}
	for round := 0; round < 3; round++ {
		for _, put := range sizes {
			b := getBuf(put)
			b.Write(make([]byte, put)) // a buffer used to the full
			putBuf(b)
			for _, n := range sizes {
				g := getBuf(n)
				if g.Len() != 0 {
					t.Fatalf("getBuf(%d) after a %d-byte buffer went back: %d bytes in it", n, put, g.Len())
				}
				if c := int64(g.Cap()); c < n || c >= 2*max(n, 4<<10) {
					t.Fatalf("getBuf(%d) after a %d-byte buffer went back: capacity %d", n, put, c)
				}
				putBuf(g)
			}
		}
	}
}

func BenchmarkBufPool(b *testing.B) {
	for _, n := range []int64{155 << 10, 8<<20 + bytes.MinRead} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				putBuf(getBuf(n))
			}
		})
	}
}
