package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"cairn/api"
	"cairn/bench"
	"cairn/errors"
)

func benchCmd(o *options) *cobra.Command {
	var cpuProfile string
	var profile *os.File
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency (get, put, stream, meta, mount, ec)",
		// The load generator shares the machine with what it measures;
		// the servers' GC setting keeps its own CPU share down too.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			tuneGC(garbageHeadroom)
			if cpuProfile == "" {
				return nil
			}
			f, err := os.Create(cpuProfile)
			if err != nil {
				return err
			}
			profile = f
			return pprof.StartCPUProfile(f)
		},
		PersistentPostRunE: func(*cobra.Command, []string) error {
			if profile == nil {
				return nil
			}
			pprof.StopCPUProfile()
			return profile.Close()
		},
	}
	// What the load generator itself costs is part of every figure on a
	// machine it shares with the servers.
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write the load generator's own CPU profile to this file")
	cmd.AddCommand(benchGetCmd(o), benchPutCmd(o), benchStreamCmd(o), benchMultipartCmd(o), benchMountCmd(), benchECCmd())
	cmd.AddCommand(benchMetaCommands()...)
	return cmd
}

// loadFlags are the flags every closed-loop benchmark takes.
type loadFlags struct {
	size        string
	concurrency []int
	duration    time.Duration
	warmup      time.Duration
	noKeepAlive bool
	asJSON      bool
	ns          string
}

func (f *loadFlags) register(fs *pflag.FlagSet, size string, conc []int) {
	fs.StringVar(&f.size, "size", size, "object size, like 4KiB, 155KiB, 1GiB")
	fs.IntSliceVar(&f.concurrency, "concurrency", conc, "concurrent requests; a list runs each level in turn")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "measured time per concurrency level")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured time before each level")
	fs.BoolVar(&f.noKeepAlive, "no-keepalive", false, "a new connection per request")
	fs.BoolVar(&f.asJSON, "json", false, "print results as JSON")
	fs.StringVar(&f.ns, "ns", "bench", "namespace for benchmark objects")
}

func (f *loadFlags) parseSize() (int64, error) {
	n, err := bench.ParseSize(f.size)
	if err != nil {
		return 0, fmt.Errorf("--size: %s", messageOf(err))
	}
	return n, nil
}

// runLevels runs the benchmark at each concurrency level and prints the
// results, each level's as soon as it is done.
func (f *loadFlags) runLevels(ctx context.Context, w io.Writer, name string, newOp func(worker int) bench.Op) error {
	var results []bench.Result
	table := bench.NewTable(w)
	for _, c := range f.concurrency {
		if c < 1 {
			return fmt.Errorf("--concurrency: %d is not a positive number", c)
		}
		r := bench.Run(ctx, name, bench.Load{Concurrency: c, Duration: f.duration, Warmup: f.warmup}, newOp)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		results = append(results, r)
		if !f.asJSON {
			if err := table.Add(r); err != nil {
				return err
			}
		}
	}
	if f.asJSON {
		return writeJSON(w, results)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func benchGetCmd(o *options) *cobra.Command {
	var f loadFlags
	var objects int
	var target, prepareDir string
	var private bool
	var s3b s3Bench
	cmd := &cobra.Command{
		Use:   "get [--size 155KiB] [--concurrency 1,10,50] [--objects N] [--target URL | --prepare-dir DIR]",
		Short: "GET throughput and latency of objects of one size",
		Long: `Upload --objects objects of --size into namespace --ns (once: existing
ones are kept), then GET them at random for --duration at each concurrency
level. The namespace is made public and GETs are anonymous, as from a web
server, unless --private.

--target URL instead GETs URL/obj-000000 ... with no credentials and no
setup: the same load against another server (nginx) serving the files that
--prepare-dir DIR writes.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := f.parseSize()
			if err != nil {
				return err
			}
			if objects < 1 {
				return fmt.Errorf("--objects must be at least 1")
			}
			if prepareDir != "" {
				return bench.PrepareDir(prepareDir, objects, size)
			}
			base, auth, err := getTarget(cmd, o, f, target, objects, size, private)
			if err != nil {
				return err
			}
			urls, err := bench.ObjectURLs(base, objects)
			if err != nil {
				return err
			}
			hc := bench.HTTPClient(maxInt(f.concurrency), !f.noKeepAlive)
			name := "get " + bench.FormatSize(size)
			op := bench.GetOp(hc, urls, auth, size)
			if on, err := s3b.on(); err != nil {
				return err
			} else if on && target == "" {
				if op, err = s3b.getOp(f, objects, size, private); err != nil {
					return err
				}
				name = "s3 " + name
			}
			return f.runLevels(cmd.Context(), cmd.OutOrStdout(), name, op)
		},
	}
	f.register(cmd.Flags(), "155KiB", []int{1, 10, 50})
	cmd.Flags().IntVar(&objects, "objects", 1, "distinct objects to read")
	cmd.Flags().StringVar(&target, "target", "", "GET TARGET/obj-NNNNNN from another server instead (no auth, no setup)")
	cmd.Flags().StringVar(&prepareDir, "prepare-dir", "", "only write the objects as files in this directory, for another server")
	cmd.Flags().BoolVar(&private, "private", false, "keep the namespace private and send credentials")
	s3b.register(cmd.Flags())
	return cmd
}

// getTarget returns the base URL the GETs go to and their Authorization
// header, uploading the objects first unless the target is another server.
func getTarget(cmd *cobra.Command, o *options, f loadFlags, target string, objects int, size int64, private bool) (string, string, error) {
	if target != "" {
		if _, err := url.Parse(target); err != nil {
			return "", "", fmt.Errorf("--target: %w", err)
		}
		return target, "", nil
	}
	c, err := o.client()
	if err != nil {
		return "", "", err
	}
	setup := bench.Setup{Namespace: f.ns, Objects: objects, Size: size, Public: !private, Concurrency: max(16, maxInt(f.concurrency))}
	fmt.Fprintf(cmd.ErrOrStderr(), "preparing %d objects of %s in %s/ ...\n", objects, bench.FormatSize(size), f.ns)
	n, err := bench.Prepare(cmd.Context(), c, setup)
	if err != nil {
		return "", "", err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "uploaded %d, kept %d\n", n, objects-n)
	auth := ""
	if private {
		auth = c.AuthHeader()
	}
	return c.Endpoint() + "/" + f.ns, auth, nil
}

func maxInt(xs []int) int {
	m := 1
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func benchPutCmd(o *options) *cobra.Command {
	var f loadFlags
	var s3b s3Bench
	cmd := &cobra.Command{
		Use:   "put [--size 4KiB] [--concurrency 1,10,50]",
		Short: "PUT throughput and latency of new objects of one size",
		Long: `PUT new objects of --size into namespace --ns, under put/<time>/, for
--duration at each concurrency level. Every PUT creates a new file.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, err := f.parseSize()
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if _, err := c.CreateNamespace(cmd.Context(), f.ns, api.Private); err != nil && !errors.Is(errors.Exist, err) {
				return err
			}
			base, err := url.Parse(c.Endpoint() + "/" + f.ns)
			if err != nil {
				return err
			}
			hc := bench.HTTPClient(maxInt(f.concurrency), !f.noKeepAlive)
			prefix := "put/" + strconv.FormatInt(time.Now().UnixNano(), 36)
			name := "put " + bench.FormatSize(size)
			op := bench.PutOp(hc, base, prefix, c.AuthHeader(), size)
			if on, err := s3b.on(); err != nil {
				return err
			} else if on {
				if op, err = s3b.putOp(f, prefix, size); err != nil {
					return err
				}
				name = "s3 " + name
			}
			return f.runLevels(cmd.Context(), cmd.OutOrStdout(), name, op)
		},
	}
	f.register(cmd.Flags(), "4KiB", []int{1, 10, 50})
	s3b.register(cmd.Flags())
	return cmd
}

func benchStreamCmd(o *options) *cobra.Command {
	var size, ns string
	var noVerify, asJSON, drop bool
	cmd := &cobra.Command{
		Use:   "stream [--size 1GiB]",
		Short: "One big PUT, then one big GET: streaming MB/s each way",
		Args:  nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			n, err := bench.ParseSize(size)
			if err != nil {
				return fmt.Errorf("--size: %s", messageOf(err))
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			var beforeGet func()
			if drop {
				beforeGet = func() { dropCaches(cmd.ErrOrStderr()) }
			}
			res, err := bench.Stream(cmd.Context(), c, ns, "stream/"+size, n, !noVerify, beforeGet)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "stream %s  PUT %.1f MB/s (%s)  GET %.1f MB/s (%s)  verified=%v\n", bench.FormatSize(n),
				res.PutMBps, res.Put.Round(time.Millisecond), res.GetMBps, res.Get.Round(time.Millisecond), res.Verified)
			return nil
		},
	}
	cmd.Flags().StringVar(&size, "size", "1GiB", "bytes to stream")
	cmd.Flags().StringVar(&ns, "ns", "bench", "namespace")
	cmd.Flags().BoolVar(&noVerify, "no-verify", false, "skip the CRC32C comparison of what was read with what was written")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&drop, "drop-caches", false, "drop the OS page cache between PUT and GET (needs root; on one machine with the server)")
	return cmd
}

// dropCaches empties the page cache, so a read after a write comes from
// the disk as dd's does in the comparison; without permission it says so.
func dropCaches(stderr io.Writer) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		fmt.Fprintf(stderr, "cairn: page cache not dropped: %v\n", err)
	}
}
