package cli

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn/proto/metapb"
)

// S3 users and access keys are kept by meta; these commands talk to it
// over gRPC (--meta), which, like every meta call, belongs on the trusted
// network (docs/architecture.md). defaultMeta is in benchmeta.go.

func s3AdminCommands() []*cobra.Command {
	metaAddr := defaultMeta
	if env := os.Getenv("CAIRN_META"); env != "" {
		metaAddr = env
	}
	// withMeta runs f with a connection to meta.
	withMeta := func(f func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, args []string) error {
			mc, conn, err := dialMeta(metaAddr)
			if err != nil {
				return err
			}
			defer conn.Close()
			return f(cmd, mc, args)
		}
	}
	user := &cobra.Command{Use: "user", Short: "S3 users: create, ls, rm"}
	key := &cobra.Command{Use: "key", Short: "S3 access keys: create, ls, rm, grant"}
	for _, c := range []*cobra.Command{user, key} {
		c.PersistentFlags().StringVar(&metaAddr, "meta", metaAddr, "meta gRPC address (default $CAIRN_META or "+defaultMeta+")")
	}

	user.AddCommand(&cobra.Command{
		Use: "create NAME", Short: "Create an S3 user (then give it keys)", Args: nArgs(1, 1),
		RunE: withMeta(func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			if _, err := mc.S3CreateUser(cmd.Context(), &metapb.S3User{Name: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created user %s\n", args[0])
			return nil
		}),
	}, &cobra.Command{
		Use: "ls", Short: "List S3 users", Args: nArgs(0, 0),
		RunE: withMeta(func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			l, err := mc.S3ListUsers(cmd.Context(), &metapb.Empty{})
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "USER\tCREATED")
			for _, u := range l.Users {
				fmt.Fprintf(tw, "%s\t%s\n", u.Name, time.Unix(0, u.CreatedNs).UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		}),
	}, &cobra.Command{
		Use: "rm NAME", Short: "Remove an S3 user and all their keys", Args: nArgs(1, 1),
		RunE: withMeta(func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			_, err := mc.S3DeleteUser(cmd.Context(), &metapb.S3UserRequest{Name: args[0]})
			return err
		}),
	})

	var grants []string
	create := &cobra.Command{
		Use:   "create USER [--grant BUCKET=read|write ...]",
		Short: "Create an access key for a user; the secret is shown only now",
		Long: `Create an access key and secret for USER. The key owns the buckets it
creates; --grant gives it read or write access to other buckets (repeatable).
The secret is printed once: meta keeps it sealed (SigV4 needs it to verify
signatures) and never shows it again.`,
		Args: nArgs(1, 1),
		RunE: withMeta(func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			g, err := parseGrants(grants)
			if err != nil {
				return err
			}
			k, err := mc.S3CreateKey(cmd.Context(), &metapb.S3CreateKeyRequest{User: args[0], Grants: g})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "AWS_ACCESS_KEY_ID=%s\nAWS_SECRET_ACCESS_KEY=%s\n", k.Key.AccessKey, k.Secret)
			return nil
		}),
	}
	create.Flags().StringArrayVar(&grants, "grant", nil, "BUCKET=read or BUCKET=write (repeatable)")
	var of string
	ls := &cobra.Command{
		Use: "ls [--user NAME]", Short: "List access keys and their grants (never secrets)", Args: nArgs(0, 0),
		RunE: withMeta(func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			l, err := mc.S3ListKeys(cmd.Context(), &metapb.S3UserRequest{Name: of})
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ACCESS KEY\tUSER\tGRANTS\tCREATED")
			for _, k := range l.Keys {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.AccessKey, k.User, formatGrants(k), time.Unix(0, k.CreatedNs).UTC().Format(time.RFC3339))
			}
			return tw.Flush()
		}),
	}
	ls.Flags().StringVar(&of, "user", "", "only this user's keys")
	key.AddCommand(create, ls, &cobra.Command{
		Use: "rm ACCESS_KEY", Short: "Delete an access key", Args: nArgs(1, 1),
		RunE: withMeta(func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			_, err := mc.S3DeleteKey(cmd.Context(), &metapb.S3KeyRequest{AccessKey: args[0]})
			return err
		}),
	}, &cobra.Command{
		Use: "grant ACCESS_KEY BUCKET read|write|none", Short: "Set a key's access to a bucket", Args: nArgs(3, 3),
		RunE: withMeta(func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			g, err := parseGrants([]string{args[1] + "=" + args[2]})
			if err != nil {
				return err
			}
			_, err = mc.S3Grant(cmd.Context(), &metapb.S3GrantRequest{AccessKey: args[0], Bucket: args[1], Access: g[args[1]]})
			return err
		}),
	})
	return []*cobra.Command{user, key}
}

func parseGrants(in []string) (map[string]metapb.S3Access, error) {
	out := map[string]metapb.S3Access{}
	for _, g := range in {
		b, a, ok := strings.Cut(g, "=")
		if !ok || b == "" {
			return nil, fmt.Errorf("grant %q: want BUCKET=read or BUCKET=write", g)
		}
		switch a {
		case "read":
			out[b] = metapb.S3Access_S3_READ
		case "write":
			out[b] = metapb.S3Access_S3_WRITE
		case "none":
			out[b] = metapb.S3Access_S3_NONE
		default:
			return nil, fmt.Errorf("grant %q: access is read, write or none", g)
		}
	}
	return out, nil
}

func formatGrants(k *metapb.S3KeyInfo) string {
	if k.Root {
		return "(root: all)"
	}
	var gs []string
	for b, a := range k.Grants {
		gs = append(gs, b+"="+strings.ToLower(strings.TrimPrefix(a.String(), "S3_")))
	}
	sort.Strings(gs)
	if len(gs) == 0 {
		return "-"
	}
	return strings.Join(gs, ",")
}
