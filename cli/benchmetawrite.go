package cli

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"cairn/bench"
	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// benchMetaWriteCmd measures meta's write path alone: each operation is
// one Mkdir of a new directory, a command replicated (in a group) and
// durable before it returns. Kill the leader during a run and the MAX
// column is the failover: the write in flight at the kill waits in the
// client's failover (meta/failover.go) until a new leader takes it.
func benchMetaWriteCmd() *cobra.Command {
	var f loadFlags
	var addr string
	var stale bool
	cmd := &cobra.Command{
		Use:   "meta-write [--meta ADDR[,ADDR...]] [--concurrency 16]",
		Short: "Metadata writes per second (mkdir of new directories), straight to meta or a meta group",
		Long: `Create directories under ` + "`bench-write/RUN/`" + ` in namespace --ns, one Mkdir per
operation, for --duration at each concurrency level. With --meta a,b,c the
writes go to the group's leader and follow it when it changes: kill the
leader during a run (kill -9, docker kill) and MAX is the longest a write
waited, the failover as a client sees it.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			mc, conn, err := dialMeta(addr)
			if err != nil {
				return err
			}
			defer conn.Close()
			ctx := cmd.Context()
			if err := bench.PrepareMeta(ctx, mc, f.ns); err != nil {
				return fmt.Errorf("preparing %s at %s: %w", f.ns, addr, err)
			}
			run := fmt.Sprintf("bench-write/%d", time.Now().UnixNano())
			if _, err := mc.Mkdir(ctx, &metapb.MkdirRequest{Ns: f.ns, Path: run, Parents: true}); err != nil {
				return err
			}
			var n atomic.Int64
			err = f.runLevels(ctx, cmd.OutOrStdout(), "meta mkdir", func(worker int) bench.Op {
				return func(ctx context.Context) (int64, error) {
					_, err := mc.Mkdir(ctx, &metapb.MkdirRequest{Ns: f.ns, Path: fmt.Sprintf("%s/%d-%d", run, worker, n.Add(1))})
					return 0, err
				}
			})
			if err != nil || !stale {
				return err
			}
			// The directories just made, listed by any member.
			r, err := mc.List(meta.StaleOK(ctx), &metapb.ListRequest{Ns: f.ns, Prefix: run + "/", Delimiter: "/", Limit: 10})
			if err != nil {
				return errors.E(errors.Op("bench meta-write"), err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stale list of %s: %d entries (first page)\n", run, len(r.Entries))
			return nil
		},
	}
	f.register(cmd.Flags(), "0", []int{16})
	cmd.Flags().MarkHidden("size")
	cmd.Flags().MarkHidden("no-keepalive")
	cmd.Flags().StringVar(&addr, "meta", defaultMeta, "meta service gRPC address, or a group's addresses comma separated")
	cmd.Flags().BoolVar(&stale, "stale", false, "afterwards, list the run's directories with a stale-tolerant read (any member answers)")
	return cmd
}

// staleOps marks every call of newOp's operations StaleOK.
func staleOps(newOp func(worker int) bench.Op) func(worker int) bench.Op {
	return markOps(newOp, meta.StaleOK)
}

// markOps gives every call of newOp's operations the context mark makes.
func markOps(newOp func(worker int) bench.Op, mark func(context.Context) context.Context) func(worker int) bench.Op {
	return func(w int) bench.Op {
		op := newOp(w)
		return func(ctx context.Context) (int64, error) { return op(mark(ctx)) }
	}
}
