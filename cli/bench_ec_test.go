package cli_test

import (
	"encoding/json"
	"os"
	"testing"
)

// TestBenchEC runs `cairn bench ec` tiny (with a dead server holding one
// shard rebuilt) and checks that every figure came out, and that the
// servers' directories are gone after.
func TestBenchEC(t *testing.T) {
	dir := t.TempDir()
	out := cairn{t: t, endpoint: "http://127.0.0.1:1"}.ok("bench", "ec", "--dir", dir,
		"--volume", "17MiB", "--size", "64KiB", "--reads", "5", "--dead", "1MiB", "--json")
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, k := range []string{"stored_bytes", "space_replicated3", "space_4p2", "space_8p4", "space_4p2_unpadded", "space_8p4_unpadded",
		"encode_4p2_mb_per_sec", "encode_8p4_mb_per_sec", "encode_codec_4p2_mb_per_sec", "encode_codec_8p4_mb_per_sec",
		"healthy_x", "degraded_x", "healthy_x_p50", "degraded_x_p50",
		"rebuild_shard_bytes", "rebuild_ns", "rebuild_mb_per_sec", "rebuild_5gib_ns",
		"dead_shards", "dead_shard_bytes", "dead_rebuild_ns", "dead_rebuild_mb_per_sec"} {
		if v, ok := r[k].(float64); !ok || v <= 0 {
			t.Errorf("%s = %v, want a positive number", k, r[k])
		}
	}
	for _, k := range []string{"read_replicated", "read_healthy", "read_degraded"} {
		s, _ := r[k].(map[string]any)
		if s["reads"] != float64(5) || s["mean_ns"].(float64) <= 0 {
			t.Errorf("%s = %v, want 5 reads and a mean", k, r[k])
		}
	}
	// 3 copies take 3 bytes per byte and more (records' headers); the
	// codes' unpadded share (K+M)/K and a little more.
	if v := r["space_replicated3"].(float64); v < 3 || v > 3.2 {
		t.Errorf("space of 3 replicas %v, want 3 to 3.2", v)
	}
	for _, k := range []string{"space_4p2_unpadded", "space_8p4_unpadded"} {
		if v := r[k].(float64); v < 1.5 || v > 1.7 {
			t.Errorf("%s %v, want 1.5 to 1.7", k, v)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%s keeps %d entries", dir, len(ents))
	}
}
