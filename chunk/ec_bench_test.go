package chunk

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/ec"
)

// The encoding, space and rebuild figures, on real stores over
// loopback HTTP with fsync (the codec alone: ec.BenchmarkEncode):
//
//	go test -run XXX -bench 'BenchmarkECEncodeVolume|BenchmarkECRebuildShard' -benchtime 3x ./chunk/
//	go test -run XXX -bench BenchmarkECRebuildShard -benchtime 2x ./chunk/ -args -ec.volume=1073741824
//
// The volume is -ec.volume bytes (256 MiB unless set; at most 1 GiB, the
// size limit of the test stores) of 1 MiB needles; production volumes
// are 8 GiB, whose figures differ in the padding of the last row of cells
// (K cells at most: 4 MiB of 8 GiB for 4+2) and in disk and page-cache
// behaviour at that size. Here all
// servers write to one disk, so the end-to-end rate is the disk's
// (shard-writes-MB/s) over (K+M)/K; the code itself runs at
// ec.BenchmarkEncode's rate.
var ecBenchVolume = flag.Int64("ec.volume", 256<<20, "bytes of needles in the volume of BenchmarkECEncodeVolume and BenchmarkECRebuildShard (at most 1 GiB)")

// ecBenchSetup starts k+m stores on loopback; store 0 holds volume 1 with
// -ec.volume bytes of needles. It returns the stores, their clients and
// the needles' data bytes.
func ecBenchSetup(b *testing.B, k, m int) ([]*Store, []*Remote, int64) {
	ctx := context.Background()
	var stores []*Store
	var rs []*Remote
	for range k + m {
		cfg := testConfig(b.TempDir())
		cfg.MaxVolumeSize = 1 << 30
		// Each store knows its address, as a data server does: the encoding
		// server writes its own shard straight to disk.
		lis := listen(b)
		cfg.Addr = lis.Addr().String()
		s := openStore(b, cfg)
		stores = append(stores, s)
		rs = append(rs, serveTunedOn(b, s, lis))
	}
	if err := stores[0].CreateVolume(ctx, 1, 1); err != nil {
		b.Fatal(err)
	}
	data := chunktest.Data(1, chunktest.MaxNeedle)
	var stored int64
	for stored+int64(len(data)) <= min(*ecBenchVolume, 1<<30-1<<20) {
		data[0]++ // needles differ
		if _, err := stores[0].Put(ctx, 1, 1, data); err != nil {
			b.Fatal(err)
		}
		stored += int64(len(data))
	}
	return stores, rs, stored
}

func addrsOf(rs []*Remote) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Addr())
	}
	return out
}

// filesSize is the bytes of the files in dirs that match pattern.
func filesSize(b *testing.B, dirs []string, pattern string) int64 {
	var n int64
	for _, d := range dirs {
		names, err := filepath.Glob(filepath.Join(d, pattern))
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range names {
			fi, err := os.Stat(name)
			if err != nil {
				b.Fatal(err)
			}
			n += fi.Size()
		}
	}
	return n
}

// BenchmarkECEncodeVolume encodes a sealed volume from its primary into
// K+M shards sent to K+M servers (each fsyncs its shard before it
// answers): MB/s is volume bytes encoded per second, end to end. It also
// reports bytes on disk per byte of needle data stored: the volume's
// replica (.dat and .idx) times 3 for 3x replication, every shard file and
// needle index for the code.
func BenchmarkECEncodeVolume(b *testing.B) {
	for _, c := range []struct{ k, m int }{{4, 2}, {8, 4}} {
		b.Run(fmt.Sprintf("%d+%d", c.k, c.m), func(b *testing.B) {
			stores, rs, stored := ecBenchSetup(b, c.k, c.m)
			var dirs []string
			for _, s := range stores {
				dirs = append(dirs, s.cfg.Dir)
			}
			replica := filesSize(b, dirs[:1], "1.dat") + filesSize(b, dirs[:1], "1.idx")
			dat := replica - filesSize(b, dirs[:1], "1.idx")
			b.SetBytes(dat)
			var took, cpu time.Duration
			for b.Loop() {
				start, cpu0 := time.Now(), cpuTime()
				if _, err := rs[0].EncodeVolume(context.Background(), 1, 1, c.k, c.m, ec.DefaultCell, addrsOf(rs)); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				cpu += cpuTime() - cpu0
			}
			// CPU (of every server: they share this process) per GB of
			// volume: what bounds the rate on a busy machine, where the
			// encode gets a share of the CPUs.
			b.ReportMetric(cpu.Seconds()/(float64(dat)*float64(b.N)/1e9), "cpu-s/GB")
			shards := filesSize(b, dirs, "1.ec[0-9]*") + filesSize(b, dirs, "1.ecx")
			// All K+M servers share this machine's one disk: shard bytes
			// written and fsynced per second is what bounds the above.
			b.ReportMetric(float64(shards)*float64(b.N)/took.Seconds()/1e6, "shard-writes-MB/s")
			b.ReportMetric(3*float64(replica)/float64(stored), "replicated3-disk/byte")
			b.ReportMetric(float64(shards)/float64(stored), "ec-disk/byte")
		})
	}
}

// BenchmarkECRebuildShard rebuilds a lost shard of a 4+2 volume on its
// server from the other five (what repair does for each shard of a dead
// server, one at a time): MB/s is shard-file bytes made per second.
// Rebuilding the shards of a dead server holding S bytes of them takes
// S / that rate.
func BenchmarkECRebuildShard(b *testing.B) {
	const k, m = 4, 2
	stores, rs, _ := ecBenchSetup(b, k, m)
	addrs := addrsOf(rs)
	size, err := rs[0].EncodeVolume(context.Background(), 1, 1, k, m, ec.DefaultCell, addrs)
	if err != nil {
		b.Fatal(err)
	}
	l := ec.Layout{K: k, M: m, Cell: ec.DefaultCell, Size: size}
	servers := append([]string(nil), addrs...)
	servers[1] = "" // shard 1 lost with its server
	b.SetBytes(l.FileSize())
	var took time.Duration
	for b.Loop() {
		os.Remove(ecShardPath(stores[1].cfg.Dir, 1, 1))
		start := time.Now()
		if err := rs[1].RebuildShard(context.Background(), 1, 1, l, servers); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
	}
	rate := float64(l.FileSize()) * float64(b.N) / took.Seconds()
	b.ReportMetric((5<<30)/rate, "s/5GiB-of-shards")
}
