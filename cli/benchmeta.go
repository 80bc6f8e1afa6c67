package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"cairn/bench"
	"cairn/meta"
)

// defaultMeta is `cairn server`'s meta listener unless told otherwise.
const defaultMeta = "127.0.0.1:8090"

func benchMetaCommands() []*cobra.Command {
	var f loadFlags
	var addr string
	cmd := &cobra.Command{
		Use:   "meta [--meta ADDR] [--concurrency 32]",
		Short: "Whole-path resolutions per second, straight to the metadata service",
		Long: `Create the directory ` + bench.MetaPath + ` in namespace --ns, then resolve it
over gRPC, one unbatched Resolve call per operation, for --duration at each
concurrency level.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			mc, conn, err := meta.Dial(addr)
			if err != nil {
				return err
			}
			defer conn.Close()
			if err := bench.PrepareMeta(cmd.Context(), mc, f.ns); err != nil {
				return fmt.Errorf("preparing %s/%s at %s: %w", f.ns, bench.MetaPath, addr, err)
			}
			return f.runLevels(cmd.Context(), cmd.OutOrStdout(), "meta resolve", bench.ResolveOp(mc, f.ns))
		},
	}
	f.register(cmd.Flags(), "0", []int{32})
	cmd.Flags().MarkHidden("size")
	cmd.Flags().MarkHidden("no-keepalive")
	cmd.Flags().StringVar(&addr, "meta", defaultMeta, "meta service gRPC address")
	return []*cobra.Command{cmd}
}
