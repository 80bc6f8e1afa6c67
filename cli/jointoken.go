package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"cairn/api"
	"cairn/proto/metapb"
)

// joinTokenCmd is `cairn admin join-token`: a token a new data server or
// gateway trades for its cluster certificate (--join).
func joinTokenCmd() *cobra.Command {
	metaAddr := defaultMeta
	if env := os.Getenv("CAIRN_META"); env != "" {
		metaAddr = env
	}
	role, ttl, uses := "data", time.Hour, uint32(1)
	cmd := &cobra.Command{
		Use:   "join-token [--role data|gateway] [--ttl 1h] [--uses 1]",
		Short: "Make a token a new data server or gateway joins the cluster with",
		Long: `Make a join token (root credentials, as for the other commands). Start the
new server with --join TOKEN: it verifies meta by the CA fingerprint in the
token, trades the token for a certificate and keeps that in its data
directory. A token expires after --ttl and is spent after --uses joins.`,
		Args: nArgs(0, 0),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, _ []string) error {
			cfg, err := api.ConfigFromEnv()
			if err != nil {
				return err
			}
			resp, err := mc.CreateJoinToken(cmd.Context(), &metapb.CreateJoinTokenRequest{
				Role: role, TtlNs: int64(ttl), Uses: uses, AccessKey: cfg.AccessKey, Secret: cfg.SecretKey})
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), resp.Token)
			fmt.Fprintf(cmd.ErrOrStderr(), "%s token, %d use(s), expires %s\n", role, uses, time.Unix(0, resp.ExpiresNs).Format(time.RFC3339))
			return nil
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&metaAddr, "meta", metaAddr, "meta gRPC address (default $CAIRN_META or "+defaultMeta+")")
	fs.StringVar(&role, "role", role, `role of the server that joins: "data" or "gateway"`)
	fs.DurationVar(&ttl, "ttl", ttl, "how long the token stays valid")
	fs.Uint32Var(&uses, "uses", uses, "how many servers may join with it")
	return cmd
}
