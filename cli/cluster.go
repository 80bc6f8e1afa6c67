package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"cairn/bench"
	"cairn/proto/metapb"
)

// clusterAdminCommands are `cairn admin status | drain | rebalance`: they
// talk to meta's gRPC API (--meta, default $CAIRN_META or 127.0.0.1:8090).
func clusterAdminCommands() []*cobra.Command {
	var metaAddr string
	metaFlag := func(fs *pflag.FlagSet) {
		def := "127.0.0.1:8090"
		if env := os.Getenv("CAIRN_META"); env != "" {
			def = env
		}
		fs.StringVar(&metaAddr, "meta", def, "meta gRPC address (default $CAIRN_META or 127.0.0.1:8090)")
	}
	status := &cobra.Command{
		Use:   "status [--meta ADDR]",
		Short: "Show data servers, volume replica health and repairs in progress",
		Args:  nArgs(0, 0),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, _ []string) error {
			st, err := mc.ClusterStatus(cmd.Context(), &metapb.Empty{})
			if err != nil {
				return err
			}
			printClusterStatus(cmd.OutOrStdout(), st, time.Now())
			return nil
		}),
	}
	metaFlag(status.Flags())
	var undo bool
	drain := &cobra.Command{
		Use:   "drain SERVER [--undo]",
		Short: "Move every replica off a data server (by id or address) before removing it",
		Args:  nArgs(1, 1),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			if _, err := mc.ClusterDrain(cmd.Context(), &metapb.ClusterDrainRequest{Server: args[0], Undo: undo}); err != nil {
				return err
			}
			if undo {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: drain stopped\n", args[0])
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: draining; `cairn admin status` shows progress, it is empty when VOLUMES is 0\n", args[0])
			}
			return nil
		}),
	}
	metaFlag(drain.Flags())
	drain.Flags().BoolVar(&undo, "undo", false, "stop draining")
	rebalance := &cobra.Command{
		Use:   "rebalance [--meta ADDR]",
		Short: "Move volumes (throttled) until the data servers hold about the same bytes",
		Args:  nArgs(0, 0),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, _ []string) error {
			if _, err := mc.ClusterRebalance(cmd.Context(), &metapb.Empty{}); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "rebalance started; `cairn admin status` shows the moves")
			return nil
		}),
	}
	metaFlag(rebalance.Flags())
	return []*cobra.Command{status, drain, rebalance}
}

// withMeta runs fn with a client of the meta at *addr.
func withMeta(addr *string, fn func(*cobra.Command, metapb.MetaClient, []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		mc, conn, err := dialMeta(*addr)
		if err != nil {
			return err
		}
		defer conn.Close()
		return fn(cmd, mc, args)
	}
}

func printClusterStatus(w io.Writer, st *metapb.ClusterStatusResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tADDR\tSTATE\tLAST HEARTBEAT\tCAPACITY\tFREE\tUSED\tVOLUMES\tLABELS")
	for _, s := range st.Servers {
		state := "dead"
		switch {
		case s.Alive && s.Draining:
			state = "draining"
		case s.Alive && s.Suspect:
			state = "suspect"
		case s.Alive:
			state = "alive"
		}
		last := "never"
		if s.LastHeartbeatNs > 0 {
			last = bench.FormatDuration(now.Sub(time.Unix(0, s.LastHeartbeatNs))) + " ago"
		}
		var labels []string
		for k, v := range s.Labels {
			labels = append(labels, k+"="+v)
		}
		sort.Strings(labels)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Id, s.Addr, state, last,
			bench.FormatSize(int64(s.Capacity)), bench.FormatSize(int64(s.Free)), bench.FormatSize(int64(s.Used)),
			s.Volumes, strings.Join(labels, ","))
	}
	tw.Flush()
	printDiskHealth(w, st.Servers, now)
	health := map[string]int{}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VOLUME\tGEN\tREPLICAS\tHEALTH\tMODE\tSIZE\tSERVERS")
	for _, v := range st.Volumes {
		health[v.Health]++
		mode := "rw"
		if v.Volume.ReadOnly {
			mode = "ro"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d/%d\t%s\t%s\t%s\t%s\n", v.Volume.Id, v.Volume.Generation, v.Live,
			max(v.Volume.Replication, 1), v.Health, mode, bench.FormatSize(int64(v.Volume.Size)), strings.Join(v.Volume.Servers, ","))
	}
	tw.Flush()
	printShards(w, st)
	fmt.Fprintf(w, "\nvolumes: %d ok, %d degraded, %d repairing, %d lost; repairs done since meta started: %d; throttle %s/s\n",
		health["ok"], health["degraded"], health["repairing"], health["lost"], st.RepairsDone, bench.FormatSize(int64(st.RepairBytesPerSec)))
	if len(st.Repairs) > 0 {
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "REPAIR\tVOLUME\tFROM\tTO\tDONE\tRUNNING")
		for _, r := range st.Repairs {
			pct := 100.0
			if r.BytesTotal > 0 {
				pct = 100 * float64(r.BytesDone) / float64(r.BytesTotal)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s/%s (%.0f%%)\t%s\n", r.Kind, r.Volume, r.From, r.To,
				bench.FormatSize(int64(r.BytesDone)), bench.FormatSize(int64(r.BytesTotal)), pct,
				bench.FormatDuration(now.Sub(time.Unix(0, r.StartedNs))))
		}
		tw.Flush()
	}
}

// printDiskHealth is the table of what each server's disk went through:
// the scrub (needles verified, passes, when the last ended, its pace), the
// corrupt needles found and repaired, volumes out of the write path
// because the disk was full or an fdatasync failed.
func printDiskHealth(w io.Writer, servers []*metapb.ClusterServer, now time.Time) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tSCRUBBED\tPASSES\tLAST PASS\tSCRUB PACE\tCORRUPT\tREPAIRED\tFULL VOLS\tFAILED VOLS")
	for _, s := range servers {
		d := s.Disk
		if d == nil {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\n", s.Id)
			continue
		}
		last := "none yet"
		if d.ScrubLastPassNs > 0 {
			last = bench.FormatDuration(now.Sub(time.Unix(0, d.ScrubLastPassNs))) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s/s\t%d\t%d\t%d\t%d\n", s.Id, d.ScrubNeedles, d.ScrubPasses, last,
			bench.FormatSize(int64(d.ScrubBytesPerSec)), d.Corrupt, d.Repaired, d.NoSpaceVolumes, d.FailedVolumes)
	}
	tw.Flush()
}

// printShards shows the storage classes and, per erasure-coded volume,
// the health of each shard and where it lies.
func printShards(w io.Writer, st *metapb.ClusterStatusResponse) {
	var ecs []*metapb.ClusterVolume
	for _, v := range st.Volumes {
		if v.Volume.Ec != nil {
			ecs = append(ecs, v)
		}
	}
	if len(ecs) == 0 && len(st.Classes) <= 1 {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tCODE\tREPLICAS\tMEDIA")
	for _, c := range st.Classes {
		code := "replicated"
		if c.K > 0 {
			code = fmt.Sprintf("ec %d+%d", c.K, c.M)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", c.Name, code, c.Replication, c.Media)
	}
	tw.Flush()
	if len(ecs) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EC VOLUME\tCLASS\tCODE\tSHARDS\tHEALTH\tSIZE\tSHARD HEALTH (server)")
	for _, v := range ecs {
		e := v.Volume.Ec
		var per []string
		for i, h := range v.ShardHealth {
			addr := ""
			if i < len(e.ShardServers) {
				addr = e.ShardServers[i]
			}
			per = append(per, fmt.Sprintf("%d:%s(%s)", i, h, addr))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d+%d\t%d/%d\t%s\t%s\t%s\n", v.Volume.Id, v.Volume.StorageClass, e.K, e.M, v.Live, e.K+e.M,
			v.Health, bench.FormatSize(int64(e.Size)), strings.Join(per, " "))
	}
	tw.Flush()
	fmt.Fprintf(w, "erasure coding since meta started: %d volumes encoded, %d shards rebuilt\n", st.EcEncoded, st.EcRebuilt)
}
