package client

import (
	"bytes"
	"math/bits"
	"sync"
)

// Buffers for extents in flight, pooled by size class. One pool for every
// size let a 155 KiB read take a buffer an 8 MiB extent had grown, so
// under a mixed load every pooled buffer drifted to the largest size seen
// and a gateway's heap held one such buffer per request in flight (113 MB
// in the soak). A class holds buffers whose capacity is in [2^c, 2^(c+1)):
// a request takes from its own class, so it wastes at most half of what
// it holds, and buffers past maxPooledBuf are left to the collector.
const (
	minBufClass  = 12 // 4 KiB: smaller requests share this class
	maxBufClass  = 25 // 32 MiB
	maxPooledBuf = 1 << maxBufClass
)

var bufPools [maxBufClass + 1]sync.Pool

func bufClass(n int) int {
	if n < 1<<minBufClass {
		return minBufClass
	}
	return bits.Len(uint(n)) - 1
}

// getBuf returns an empty buffer that holds at least n bytes.
func getBuf(n int64) *bytes.Buffer {
	want := max(int(n), 1<<minBufClass)
	if want <= maxPooledBuf {
		if b, _ := bufPools[bufClass(want)].Get().(*bytes.Buffer); b != nil && b.Cap() >= want {
			b.Reset()
			return b
		}
		// A smaller buffer of the class is dropped: requests of one size
		// (extents, parts of one file) soon fill the class with theirs.
	}
	return bytes.NewBuffer(make([]byte, 0, want))
}

// putBuf returns b to the class its capacity falls in.
func putBuf(b *bytes.Buffer) {
	if c := b.Cap(); c >= 1<<minBufClass && c <= maxPooledBuf {
		bufPools[bufClass(c)].Put(b)
	}
}
