package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"cairn/bench"
	"cairn/meta"
	"cairn/proto/metapb"
)

// defaultMeta is `cairn server`'s meta listener unless told otherwise.
const defaultMeta = "127.0.0.1:8090"

func benchMetaCommands() []*cobra.Command {
	var f loadFlags
	var addr string
	var conns int
	var stale, anyMember bool
	cmd := &cobra.Command{
		Use:   "meta [--meta ADDR] [--concurrency 32]",
		Short: "Whole-path resolutions per second, straight to the metadata service",
		Long: `Create the directory ` + bench.MetaPath + ` in namespace --ns, then resolve it
over gRPC, one unbatched Resolve call per operation, for --duration at each
concurrency level.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var mcs []metapb.MetaClient
			for range max(conns, 1) {
				mc, conn, err := dialMeta(addr)
				if err != nil {
					return err
				}
				defer conn.Close()
				mcs = append(mcs, mc)
			}
			if err := bench.PrepareMeta(cmd.Context(), mcs[0], f.ns); err != nil {
				return fmt.Errorf("preparing %s/%s at %s: %w", f.ns, bench.MetaPath, addr, err)
			}
			op := bench.ResolveOp(mcs, f.ns)
			if stale { // any member of a group answers (meta.StaleOK)
				op = staleOps(op)
			}
			if anyMember { // any member answers, linearizably (meta.AnyMember)
				op = markOps(op, meta.AnyMember)
			}
			return f.runLevels(cmd.Context(), cmd.OutOrStdout(), "meta resolve", op)
		},
	}
	f.register(cmd.Flags(), "0", []int{32})
	cmd.Flags().MarkHidden("size")
	cmd.Flags().MarkHidden("no-keepalive")
	cmd.Flags().StringVar(&addr, "meta", defaultMeta, "meta service gRPC address")
	cmd.Flags().IntVar(&conns, "conns", 4, "gRPC connections the workers share round robin (a meta serves many gateways; one HTTP/2 connection topped out near 44k calls/s on 2 cores)")
	cmd.Flags().BoolVar(&stale, "stale", false, "mark the resolves stale-tolerant: every member of a group answers them, round robin")
	cmd.Flags().BoolVar(&anyMember, "any-member", false, "mark the resolves AnyMember: every member of a group answers them, round robin, followers through the leader's read index")
	return []*cobra.Command{cmd, benchMetaWriteCmd()}
}
