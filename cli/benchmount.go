package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"cairn/bench"
	"cairn/fusefs"
)

// mountRow is one line of `cairn bench mount`: a workload on the local
// disk and on the mount, and their ratio.
type mountRow struct {
	Test   string  `json:"test"`
	Local  float64 `json:"local"`
	Mount  float64 `json:"mount"`
	Unit   string  `json:"unit"`
	Ratio  float64 `json:"ratio"` // mount over local (for times: lower is better)
	Target string  `json:"target"`
}

func benchMountCmd() *cobra.Command {
	var (
		local, seqSize, second string
		tests                  []string
		files, small, creates  int
		asJSON                 bool
	)
	cmd := &cobra.Command{
		Use:   "mount MOUNTDIR [--local DIR] [--tests lstat,untar,small,seq,random] [--second DIR --tests twomounts]",
		Short: "the mount's speed figures: a mounted directory against the local disk (and FUSE's ceiling), in one run",
		Long: `mount runs the file-system workloads of the mount's speed targets in a new
directory under MOUNTDIR (a Cairn mount, or any other file system to compare)
and under --local, and prints each pair with its ratio:

  lstat   warm lstat of a 4-deep path, best of 7 rounds of 50,000
  untar   GNU tar extracting --files files of 4 KB in files/17 directories
          (the local side: best of 3)
  small   --small-files files of 64 KB in 4-deep paths, written then read back

lstat, untar and small also run on an in-memory FUSE file system that does
nothing else (rows marked "floor"): what FUSE's round trips alone cost here, the
best any FUSE mount could do against this local disk; needs root.
  seq     a --seq-size file written through the mount, dropped from the page
          cache and read with 1 MiB reads, against a do-nothing FUSE file
          system (the ceiling of any FUSE file system here); needs root. Make
          it larger than the mount's --cache-size, or the mount serves most
          of it from its own memory
  random  4 KiB reads at random offsets of a cached 64 MiB file, best of 7
  twomounts
          two writers at once, one through MOUNTDIR and one through --second
          (another mount of the same namespace), each creating --creates
          files of 4 KB: in a directory each, then both in one directory,
          best of 3 rounds each, taken in turns; the local side runs two
          writers the same way. What one directory shared by two mounts
          costs: a look at the directory recalls the other mount's queued
          creates in it (the last column counts the recalls per create;
          in a directory each, none)

The directories it makes are removed at the end.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			size, err := bench.ParseSize(seqSize)
			if err != nil {
				return fmt.Errorf("--seq-size: %s", messageOf(err))
			}
			for _, t := range tests {
				if !slices.Contains([]string{"lstat", "untar", "small", "seq", "random", "twomounts"}, t) {
					return fmt.Errorf("--tests: unknown test %q", t)
				}
				if t == "twomounts" && second == "" {
					return fmt.Errorf("--tests twomounts needs --second, a second mount of the namespace MOUNTDIR mounts")
				}
			}
			mdir, err := os.MkdirTemp(args[0], "cairn-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(mdir)
			var mdir2 string // mdir as the second mount shows it
			if second != "" {
				mdir2 = filepath.Join(second, filepath.Base(mdir))
				if st, err := os.Stat(mdir2); err != nil || !st.IsDir() {
					return fmt.Errorf("--second %s does not show %s: not a mount of the same namespace as %s", second, filepath.Base(mdir), args[0])
				}
			}
			ldir, err := os.MkdirTemp(local, "cairn-bench-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(ldir)
			var rows []mountRow
			w := cmd.OutOrStdout()
			const row = "%-38s %12s %12s %-8s %8s  %s\n"
			if !asJSON {
				fmt.Fprintf(w, row, "test", "local", "mount", "unit", "ratio", "target")
			}
			for _, t := range tests {
				var res []mountRow
				var err error
				if t == "twomounts" {
					res, err = twoMounts(mdir, mdir2, ldir, creates)
				} else {
					res, err = runMountTest(t, mdir, ldir, files, small, size)
				}
				if err != nil {
					return fmt.Errorf("%s: %w", t, err)
				}
				for _, r := range res {
					rows = append(rows, r)
					if !asJSON {
						fmt.Fprintf(w, row, r.Test, num(r.Local), num(r.Mount), r.Unit, fmt.Sprintf("%.3gx", r.Ratio), r.Target)
					}
				}
			}
			if asJSON {
				return writeJSON(w, rows)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&local, "local", os.TempDir(), "local directory to compare with")
	fl.StringSliceVar(&tests, "tests", []string{"lstat", "untar", "small", "seq", "random"}, "workloads to run")
	fl.IntVar(&files, "files", 17_477, "files in the untar tree")
	fl.IntVar(&small, "small-files", 5000, "files of the small-files test")
	fl.StringVar(&seqSize, "seq-size", "2GB", "size of the sequential-read file")
	fl.StringVar(&second, "second", "", "a second mount of the namespace MOUNTDIR mounts, for --tests twomounts")
	fl.IntVar(&creates, "creates", 2000, "files each writer of the twomounts test creates per round")
	fl.BoolVar(&asJSON, "json", false, "print results as JSON")
	return cmd
}

func runMountTest(test, mdir, ldir string, files, small int, seqSize int64) ([]mountRow, error) {
	sub := func(d string) (string, error) {
		p := filepath.Join(d, test)
		return p, os.Mkdir(p, 0o755)
	}
	md, err := sub(mdir)
	if err != nil {
		return nil, err
	}
	ld, err := sub(ldir)
	if err != nil {
		return nil, err
	}
	switch test {
	case "lstat":
		lp, err := bench.LstatPath(ld)
		if err != nil {
			return nil, err
		}
		mp, err := bench.LstatPath(md)
		if err != nil {
			return nil, err
		}
		lat := func(p string) func() (time.Duration, error) {
			return func() (time.Duration, error) { return bench.Lstat(p, 50_000) }
		}
		if _, err := lat(mp)(); err != nil { // warm
			return nil, err
		}
		l, m, err := bench.BestOf(7, lat(lp), lat(mp))
		if err != nil {
			return nil, err
		}
		var f time.Duration
		if err := onFloor(ldir, func(d string) error {
			fp, err := bench.LstatPath(d)
			if err != nil {
				return err
			}
			_, f, err = bench.BestOf(7, lat(lp), lat(fp))
			return err
		}); err != nil {
			return nil, err
		}
		return []mountRow{
			timeRow("lstat, warm, 4-deep", l, m, "ns", "<= 1.2x"),
			timeRow("lstat, warm, 4-deep, do-nothing FUSE (floor)", l, f, "ns", ""),
		}, nil
	case "untar":
		tarball := filepath.Join(ldir, "tree.tar")
		if err := bench.MakeTree(tarball, files, max(1, files/17), 4096); err != nil {
			return nil, err
		}
		defer os.Remove(tarball)
		var l time.Duration
		for i := range 3 {
			d := filepath.Join(ld, fmt.Sprint(i))
			if err := os.Mkdir(d, 0o755); err != nil {
				return nil, err
			}
			t, err := bench.Untar(tarball, d)
			if err != nil {
				return nil, err
			}
			if i == 0 || t < l {
				l = t
			}
		}
		m, err := bench.Untar(tarball, md)
		if err != nil {
			return nil, err
		}
		var f time.Duration
		if err := onFloor(ldir, func(d string) (err error) { f, err = bench.Untar(tarball, d); return err }); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("untar, %d x 4 KB", files)
		return []mountRow{
			timeRow(name, l, m, "s", "<= 3x"),
			timeRow(name+", do-nothing FUSE (floor)", l, f, "s", ""),
		}, nil
	case "small":
		lw, lr, err := bench.SmallFiles(ld, small, 64<<10)
		if err != nil {
			return nil, err
		}
		mw, mr, err := bench.SmallFiles(md, small, 64<<10)
		if err != nil {
			return nil, err
		}
		var fw, fr float64
		if err := onFloor(ldir, func(d string) (err error) { fw, fr, err = bench.SmallFiles(d, small, 64<<10); return err }); err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%d x 64 KB, ", small)
		return []mountRow{
			{Test: name + "write", Local: lw, Mount: mw, Unit: "files/s", Ratio: mw / lw, Target: ">= 0.3x"},
			{Test: name + "write, do-nothing FUSE (floor)", Local: lw, Mount: fw, Unit: "files/s", Ratio: fw / lw},
			{Test: name + "read back", Local: lr, Mount: mr, Unit: "files/s", Ratio: mr / lr, Target: ">= 0.3x"},
			{Test: name + "read back, do-nothing FUSE (floor)", Local: lr, Mount: fr, Unit: "files/s", Ratio: fr / lr},
		}, nil
	case "seq":
		p := filepath.Join(md, "big")
		if err := writeFile(p, io.LimitReader(bench.NewPatterned(0), seqSize)); err != nil {
			return nil, err
		}
		if err := bench.DropCached(p); err != nil {
			return nil, err
		}
		ceil := filepath.Join(ldir, "ceiling")
		if err := os.Mkdir(ceil, 0o755); err != nil {
			return nil, err
		}
		unmount, err := bench.CeilingFS(ceil, seqSize)
		if err != nil {
			return nil, fmt.Errorf("the do-nothing FUSE file system: %w", err)
		}
		defer unmount()
		fusefs.SetReadahead(ceil, 1<<20) // the mount's kernel settings
		c, m, err := bench.SeqReadVs(filepath.Join(ceil, "file"), p, 3)
		if err != nil {
			return nil, err
		}
		return []mountRow{{Test: "sequential read, vs do-nothing FUSE (best of 3 each)", Local: c, Mount: m, Unit: "MB/s", Ratio: m / c, Target: ">= 0.85x"}}, nil
	case "random":
		const size = 64 << 20
		open := func(d string) (*os.File, error) {
			p := filepath.Join(d, "f")
			if err := writeFile(p, io.LimitReader(bench.NewPatterned(1), size)); err != nil {
				return nil, err
			}
			if _, err := bench.SeqRead(p); err != nil { // cached
				return nil, err
			}
			return os.Open(p)
		}
		lf, err := open(ld)
		if err != nil {
			return nil, err
		}
		defer lf.Close()
		mf, err := open(md)
		if err != nil {
			return nil, err
		}
		defer mf.Close()
		lat := func(f *os.File) func() (time.Duration, error) {
			return func() (time.Duration, error) { return bench.RandomRead(f, size, 20_000) }
		}
		l, m, err := bench.BestOf(7, lat(lf), lat(mf))
		if err != nil {
			return nil, err
		}
		return []mountRow{timeRow("random 4 KiB read, cached", l, m, "ns", "close to local")}, nil
	}
	return nil, fmt.Errorf("unknown test %q", test)
}

// twoMounts is the twomounts test: creates/s of two writers, one per
// mount (mdir and mdir2 show one directory through two mounts), in a
// directory each and in one shared directory, against two local writers
// doing the same in ldir. Rounds take turns, each in new directories.
func twoMounts(mdir, mdir2, ldir string, n int) ([]mountRow, error) {
	const rounds, size = 3, 4096
	var best [2][2]float64 // [shared][mount]
	var recalls [2]int64   // [shared]: recalls the two mounts answered, over the rounds
	for r := range rounds {
		for _, shared := range []bool{false, true} {
			sh := 0
			if shared {
				sh = 1
			}
			for side, base := range [][2]string{{ldir, ldir}, {mdir, mdir2}} {
				a := fmt.Sprintf("two%d-%d-a", r, sh)
				b := a
				if !shared {
					b = fmt.Sprintf("two%d-%d-b", r, sh)
				}
				if err := os.Mkdir(filepath.Join(base[0], a), 0o755); err != nil {
					return nil, err
				}
				if !shared {
					if err := os.Mkdir(filepath.Join(base[1], b), 0o755); err != nil {
						return nil, err
					}
				}
				r0 := mountRecalls(base[0]) + mountRecalls(base[1])
				v, err := bench.Creates([]string{filepath.Join(base[0], a), filepath.Join(base[1], b)}, n, size)
				if err != nil {
					return nil, err
				}
				if side == 1 {
					recalls[sh] += mountRecalls(base[0]) + mountRecalls(base[1]) - r0
				}
				if os.Getenv("CAIRN_BENCH_VERBOSE") != "" {
					fmt.Fprintf(os.Stderr, "twomounts round %d shared=%v %s: %.0f creates/s\n", r, shared, []string{"local", "mount"}[side], v)
				}
				best[sh][side] = max(best[sh][side], v)
			}
		}
	}
	name := fmt.Sprintf("2 writers x %d x 4 KB creates, ", n)
	// The recalls show what sharing costs: a mount is recalled when the
	// other looks at what its queued changes concern (the directory
	// shared), not for work in a directory of its own.
	per := func(sh int) string {
		return fmt.Sprintf("%.3f recalls/create", float64(recalls[sh])/float64(2*n*rounds))
	}
	return []mountRow{
		{Test: name + "a dir each", Local: best[0][0], Mount: best[0][1], Unit: "files/s", Ratio: best[0][1] / best[0][0], Target: per(0)},
		{Test: name + "one dir", Local: best[1][0], Mount: best[1][1], Unit: "files/s", Ratio: best[1][1] / best[1][0], Target: per(1)},
	}, nil
}

// mountRecalls is the count of recalls the Cairn mount holding dir has
// answered (its .cairn-stats file, found at the mount's root above dir);
// 0 when there is none.
func mountRecalls(dir string) int64 {
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, ".cairn-stats")); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				var calls int64
				if f := strings.Fields(line); len(f) > 1 && f[0] == "recall" {
					fmt.Sscan(f[1], &calls)
					return calls
				}
			}
			return 0
		}
		if filepath.Dir(d) == d {
			return 0
		}
	}
}

// onFloor runs a workload on an in-memory FUSE file system that does
// nothing else (bench.MemFS), mounted under dir for the run: what FUSE's
// round trips alone cost, the best any FUSE mount could do here.
func onFloor(dir string, run func(d string) error) error {
	d, err := os.MkdirTemp(dir, "floor")
	if err != nil {
		return err
	}
	defer os.Remove(d)
	unmount, err := bench.MemFS(d)
	if err != nil {
		return fmt.Errorf("the in-memory FUSE file system: %w", err)
	}
	defer unmount()
	return run(d)
}

// num prints a figure with 4 significant digits, without exponents.
func num(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 1:
		return fmt.Sprintf("%.4g", v)
	}
	return fmt.Sprintf("%.4f", v)
}

// timeRow is a row of durations, shown in unit (ns or s).
func timeRow(test string, l, m time.Duration, unit, target string) mountRow {
	scale := float64(time.Nanosecond)
	if unit == "s" {
		scale = float64(time.Second)
	}
	return mountRow{Test: test, Local: float64(l) / scale, Mount: float64(m) / scale, Unit: unit, Ratio: float64(m) / float64(l), Target: target}
}

func writeFile(p string, r io.Reader) error {
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(f, r, make([]byte, 1<<20)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
