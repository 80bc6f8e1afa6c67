package chunk

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"
	"time"

	"cairn/chunk/chunktest"
	"cairn/errors"
	"cairn/internal/await"
	"cairn/volume"
)

// A needle found corrupt by a direct read is restored from a replica by
// the server itself; one nobody reads is found by the scrub; both show in
// the disk health that heartbeats report.
func TestCorruptRepairedAndReported(t *testing.T) {
	ss := servers(t, 2, true)
	ctx := context.Background()
	set := []string{ss[0].Addr, ss[1].Addr}
	for _, s := range ss {
		if err := s.S.SetReplicas(ctx, 1, 1, set); err != nil {
			t.Fatal(err)
		}
	}
	primary, replica := ss[0].S.(*Store), ss[1].S.(*Store)
	read, unread := chunktest.Data(1, 10000), chunktest.Data(2, 10000)
	k1, err := primary.Put(ctx, 1, 1, read)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := primary.Put(ctx, 1, 1, unread)
	if err != nil {
		t.Fatal(err)
	}
	// Damage both on the replica: the first needle's data starts after the
	// 64-byte superblock and its 24-byte header, the second's after the
	// first record (10000 bytes of data, one checksum, padded to 8).
	dat, _ := volume.FileNames(replica.cfg.Dir, 1)
	f, err := os.OpenFile(dat, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xde, 0xad}, 64+24+5000)
	f.WriteAt([]byte{0xbe, 0xef}, 64+24+10008+24+5000)
	f.Close()

	if _, err := signed(ss[1].Addr).ReadTo(ctx, 1, k1, 0, 10000, io.Discard); !errors.Is(errors.Corrupt, err) {
		t.Fatalf("direct read of a damaged needle: %v, want Corrupt", err)
	}
	if h := replica.DiskHealth(); h.Corrupt != 1 || h.ScrubPasses != 0 {
		t.Fatalf("health after one corrupt read, before any scrub: %+v", h)
	}
	replica.cfg.ScrubPeriod = 100 * time.Millisecond
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { replica.Run(rctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	v, err := replica.volume("test", 1)
	if err != nil {
		t.Fatal(err)
	}
	intact := func(k uint64, want []byte) bool {
		var b bytes.Buffer
		_, err := v.ReadTo(k, 0, int64(len(want)), &b)
		return err == nil && bytes.Equal(b.Bytes(), want)
	}
	await.Until(t, 10*time.Second, "the repair of the needle a read found corrupt", func() bool { return intact(k1, read) })
	await.Until(t, 10*time.Second, "the scrub's repair of the needle nobody read", func() bool { return intact(k2, unread) })
	await.Until(t, 10*time.Second, "a scrub pass after the repairs", func() bool { return replica.DiskHealth().ScrubPasses >= 2 })
	h := replica.DiskHealth()
	if h.Corrupt < 2 || h.Repaired != 2 || h.ScrubNeedles < 4 || h.ScrubLastPassNs == 0 || h.ScrubBytesPerSec == 0 {
		t.Fatalf("health after the repairs: %+v", h)
	}
}
