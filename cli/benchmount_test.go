package cli_test

import (
	"encoding/json"
	"os"
	"testing"
)

// TestBenchMount runs every workload of `cairn bench mount` with small
// sizes, a plain directory standing in for the mount (the do-nothing FUSE
// file system of the seq row is mounted for real), and for both mounts of
// twomounts, and checks that each row has figures on both sides and that
// nothing is left behind.
func TestBenchMount(t *testing.T) {
	if testing.Short() {
		t.Skip("a FUSE mount: not in the -short tier")
	}
	mdir, ldir := t.TempDir(), t.TempDir()
	out := cairn{t: t, endpoint: "http://127.0.0.1:1"}.ok("bench", "mount", mdir, "--local", ldir,
		"--files", "60", "--small-files", "30", "--seq-size", "8MB", "--json",
		"--tests", "lstat,untar,small,seq,random,twomounts", "--second", mdir, "--creates", "20")
	var rows []struct {
		Test                string
		Local, Mount, Ratio float64
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(rows) != 12 {
		t.Fatalf("%d rows, want 12: %s", len(rows), out)
	}
	for _, r := range rows {
		if r.Local <= 0 || r.Mount <= 0 || r.Ratio <= 0 {
			t.Errorf("row %q: local %v, mount %v, ratio %v", r.Test, r.Local, r.Mount, r.Ratio)
		}
	}
	for _, d := range []string{mdir, ldir} {
		if ents, _ := os.ReadDir(d); len(ents) != 0 {
			t.Errorf("%s keeps %d entries", d, len(ents))
		}
	}
}
