package cli

import (
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"cairn/proto/metapb"
)

// certCmd is `cairn admin cert`: the cluster's certificates.
func certCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "cert", Short: "Manage the cluster's certificates (revocation)"}
	cmd.AddCommand(certRevokeCmd())
	return cmd
}

// certRevokeCmd is `cairn admin cert revoke ID`.
func certRevokeCmd() *cobra.Command {
	metaAddr := defaultMeta
	if env := os.Getenv("CAIRN_META"); env != "" {
		metaAddr = env
	}
	var serial string
	cmd := &cobra.Command{
		Use:   "revoke ID | --serial HEX",
		Short: "Revoke a data server's or gateway's certificate",
		Long: `Revoke every certificate issued so far to ID (a data server's advertised
address or a gateway's name: the certificate's CommonName), or one
certificate by serial (lower-case hex). Meta refuses its holder at once, on
new connections and on calls over old ones; data servers refuse it from
their next heartbeat answer (a second). A revoked data server can no longer
heartbeat, so it loses its lease and serves nothing. To bring the server
back, remove its DIR/tls/ and join it again with a new token: its new
certificate is issued after the revocation. Needs root.`,
		Args: nArgs(0, 1),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			req := &metapb.RevokedCert{Serial: serial}
			if len(args) == 1 {
				req.Id = args[0]
			}
			resp, err := mc.RevokeCert(cmd.Context(), req)
			if err != nil {
				return err
			}
			for _, r := range resp.Revoked {
				what := "id " + r.Id
				if r.Serial != "" {
					what = "serial " + r.Serial
				}
				fmt.Fprintf(cmd.OutOrStdout(), "revoked %s (%s)\n", what, time.Unix(0, r.RevokedNs).UTC().Format(time.RFC3339))
			}
			return nil
		}),
	}
	fs := cmd.Flags()
	fs.StringVar(&metaAddr, "meta", metaAddr, "meta gRPC address (default $CAIRN_META or "+defaultMeta+")")
	fs.StringVar(&serial, "serial", "", "revoke one certificate by its serial (hex) instead of an id")
	return cmd
}
