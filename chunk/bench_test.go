package chunk

import (
	"context"
	"io"
	"testing"

	"cairn"
	"cairn/chunk/chunktest"
)

func benchStore(b *testing.B) *Store {
	cfg := testConfig(b.TempDir())
	cfg.MaxVolumeSize = 30 << 30
	cfg.MaxNeedle = 64 << 20
	s := openStore(b, cfg)
	if err := s.CreateVolume(context.Background(), 1, 1); err != nil {
		b.Fatal(err)
	}
	return s
}

func benchPut(b *testing.B, c cairn.Chunks) {
	data := chunktest.Data(1, 4096)
	b.SetBytes(4096)
	b.ReportAllocs()
	b.SetParallelism(32) // many clients in flight, as a data server sees
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Put(context.Background(), 1, 1, data); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkPut4KInProcess(b *testing.B) { benchPut(b, benchStore(b)) }
func BenchmarkPut4KHTTP(b *testing.B)      { benchPut(b, serve(b, benchStore(b))) }

func BenchmarkGet155KHTTP(b *testing.B) {
	s := benchStore(b)
	r := serve(b, s)
	const size = 155 << 10
	var keys []uint64
	for i := range 64 {
		k, err := s.Put(context.Background(), 1, 1, chunktest.Data(uint64(i), size))
		if err != nil {
			b.Fatal(err)
		}
		keys = append(keys, k)
	}
	b.SetBytes(size)
	b.ReportAllocs()
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := r.ReadTo(context.Background(), 1, keys[i%len(keys)], 0, size, io.Discard); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
}
