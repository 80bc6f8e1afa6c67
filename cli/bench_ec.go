package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"cairn/bench"
)

func benchECCmd() *cobra.Command {
	var volume, size, dir, dead string
	var reads int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ec [--volume 256MiB] [--size 155KiB] [--reads 2000] [--dead 5GiB] [--json]",
		Short: "Erasure coding: space, encoding, healthy and degraded reads, rebuild",
		Long: `Start 12 data servers in this process, each on a directory of its own
(under --dir, removed after) and a loopback listener, as ` + "`cairn server`" + ` serves
them; fill a volume with --volume bytes of --size needles; and measure:

  space     bytes on disk per byte stored: 3 replicas, 4+2, 8+4
  encode    the sealed volume encoded 8+4 onto all twelve and 4+2 onto six,
            end to end (every shard fsynced on its server), and the codec
            alone over the same file
  read      --reads reads of one needle over HTTP of each kind, interleaved:
            from the replicated volume, from the 4+2 volume's server holding
            the needle's shard (healthy), and from another shard server
            once that one is down (degraded: rebuilt from four others);
            ratios are the replicated read's time over the other's
  rebuild   the lost shard rebuilt on a new server from the other five, and
            the time that rate gives for 5 GiB of shards
  dead      with --dead: six more servers take the 4+2 shards of volumes of
            --volume bytes (1 MiB needles) until one of them holds --dead
            bytes of shards; it is stopped, and a new server rebuilds every
            shard it held, one after the other, as repair does (the disk
            holds 7 times --dead, plus one volume, meanwhile)

Meta is left out (the benchmark tells the servers what it would), and so is
the network: all servers and the client share this machine.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			vol, err := bench.ParseSize(volume)
			if err != nil {
				return fmt.Errorf("--volume: %s", messageOf(err))
			}
			sz, err := bench.ParseSize(size)
			if err != nil {
				return fmt.Errorf("--size: %s", messageOf(err))
			}
			var deadBytes int64
			if dead != "" {
				if deadBytes, err = bench.ParseSize(dead); err != nil {
					return fmt.Errorf("--dead: %s", messageOf(err))
				}
			}
			cfg := bench.ECConfig{Dir: dir, Volume: vol, Size: sz, Reads: reads, Dead: deadBytes}
			errOut := cmd.ErrOrStderr()
			if !asJSON {
				cfg.Progress = func(s string) { fmt.Fprintln(errOut, s+"...") }
			}
			res, err := bench.EC(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), res)
			}
			return printEC(cmd.OutOrStdout(), res)
		},
	}
	cmd.Flags().StringVar(&volume, "volume", "256MiB", "bytes of needles in the volume encoded (production volumes are 8 GiB)")
	cmd.Flags().StringVar(&size, "size", "155KiB", "needle size")
	cmd.Flags().IntVar(&reads, "reads", 2000, "reads of each kind")
	cmd.Flags().StringVar(&dir, "dir", os.TempDir(), "where the servers' directories go (the disk measured)")
	cmd.Flags().StringVar(&dead, "dead", "", "rebuild for real the shards of a dead server holding this much of them (e.g. 5GiB)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the results as JSON")
	return cmd
}

func printEC(w io.Writer, r bench.ECResult) error {
	f := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	f("stored                 %s of needles\n", bench.FormatSize(r.StoredBytes))
	f("space 3 replicas       %.2f bytes on disk per byte\n", r.SpaceReplicated3)
	f("space 4+2              %.2f (%.2f without the last row's padding, as at 8 GiB)\n", r.Space4p2, r.Space4p2Full)
	f("space 8+4              %.2f (%.2f without the last row's padding, as at 8 GiB)\n", r.Space8p4, r.Space8p4Full)
	f("encode 4+2             %.0f MB/s end to end, %.0f MB/s codec\n", r.Encode4p2MBps, r.EncodeCodec4p2MBps)
	f("encode 8+4             %.0f MB/s end to end, %.0f MB/s codec\n", r.Encode8p4MBps, r.EncodeCodec8p4MBps)
	row := func(name string, s bench.ReadStats, x, xp50 float64) {
		f("%-22s mean %-8s p50 %-8s p99 %-8s", name, bench.FormatDuration(s.Mean), bench.FormatDuration(s.P50), bench.FormatDuration(s.P99))
		if x > 0 {
			f(" %.2fx (p50 %.2fx)", x, xp50)
		}
		f("\n")
	}
	row("read replicated", r.ReadReplicated, 0, 0)
	row("read 4+2 healthy", r.ReadHealthy, r.HealthyX, r.HealthyXP50)
	row("read 4+2 shard lost", r.ReadDegraded, r.DegradedX, r.DegradedXP50)
	f("rebuild 4+2 shard      %s of shard in %s, %.0f MB/s; 5 GiB of shards in %s\n",
		bench.FormatSize(r.RebuildShardBytes), bench.FormatDuration(r.Rebuild), r.RebuildMBps, bench.FormatDuration(r.Rebuild5GiB))
	if r.DeadShards > 0 {
		f("rebuild dead server    %d shards, %s, in %s, %.0f MB/s\n",
			r.DeadShards, bench.FormatSize(r.DeadShardBytes), bench.FormatDuration(r.DeadRebuild), r.DeadRebuildMBps)
	}
	return nil
}
