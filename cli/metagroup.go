package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"cairn/errors"
	"cairn/meta"
	"cairn/pki"
	"cairn/proto/metapb"
)

// metaGroupCommand is `cairn admin meta ls | add | remove | snapshot`:
// the meta group's membership and backups, over meta's gRPC API (--meta
// takes every member, "a,b,c"; calls follow the leader).
func metaGroupCommand() *cobra.Command {
	var metaAddr string
	def := "127.0.0.1:8090"
	if env := os.Getenv("CAIRN_META"); env != "" {
		def = env
	}
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "The meta group: list, add and remove members; back the state up",
	}
	cmd.PersistentFlags().StringVar(&metaAddr, "meta", def, "meta gRPC addresses, comma separated (default $CAIRN_META or 127.0.0.1:8090)")
	ls := &cobra.Command{
		Use:   "ls",
		Short: "List the members of the meta group and its leader",
		Args:  nArgs(0, 0),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, _ []string) error {
			r, err := mc.MetaMembers(cmd.Context(), &metapb.Empty{})
			if err != nil {
				return err
			}
			printMetaMembers(cmd.OutOrStdout(), r)
			return nil
		}),
	}
	add := &cobra.Command{
		Use:   "add GRPC-ADDR RAFT-ADDR",
		Short: "Add a meta (started with --raft-listen and no --bootstrap) to the group",
		Args:  nArgs(2, 2),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			if _, err := mc.MetaAddMember(cmd.Context(), &metapb.MetaMemberRequest{Id: args[0], RaftAddr: args[1]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: added; it catches up from the leader\n", args[0])
			return nil
		}),
	}
	remove := &cobra.Command{
		Use:   "remove GRPC-ADDR",
		Short: "Remove a member from the meta group",
		Args:  nArgs(1, 1),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			if _, err := mc.MetaRemoveMember(cmd.Context(), &metapb.MetaMemberRequest{Id: args[0]}); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: removed\n", args[0])
			return nil
		}),
	}
	snapshot := &cobra.Command{
		Use:   "snapshot FILE",
		Short: "Write a backup of meta's whole state to FILE (cairn meta --restore FILE starts a meta from it)",
		Args:  nArgs(1, 1),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			n, err := metaSnapshot(cmd, mc, args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %d bytes\n", args[0], n)
			return nil
		}),
	}
	cmd.AddCommand(ls, add, remove, snapshot)
	return cmd
}

// metaSnapshot streams the backup into file, synced before it is named.
func metaSnapshot(cmd *cobra.Command, mc metapb.MetaClient, file string) (int64, error) {
	st, err := mc.MetaSnapshot(cmd.Context(), &metapb.Empty{})
	if err != nil {
		return 0, err
	}
	tmp := file + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	var n int64
	for {
		c, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err == nil {
			_, err = f.Write(c.Data)
		}
		if err != nil {
			f.Close()
			os.Remove(tmp)
			return 0, err
		}
		n += int64(len(c.Data))
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return n, os.Rename(tmp, file)
}

func printMetaMembers(w io.Writer, r *metapb.MetaMembersResponse) {
	if !r.Group {
		fmt.Fprintln(w, "meta runs alone (no --raft-listen): no group")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tRAFT\tROLE")
	for _, m := range r.Members {
		role := "follower"
		switch {
		case m.Leader:
			role = "leader"
		case !m.Voter:
			role = "non-voter"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", m.Id, m.RaftAddr, role)
	}
	tw.Flush()
	if r.Leader == "" {
		fmt.Fprintln(w, "no leader known: a majority is not reachable")
	}
}

// restoreFlag starts a meta from a backup (cairn meta --restore FILE).
func restoreBackup(dir, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	return meta.RestoreBackup(dir, f)
}

// metaGroupFlags are cairn meta's flags for a member of a meta group.
type metaGroupFlags struct {
	raftListen, raftAdvertise, advertise, bootstrap, restore string
	join, meta                                               string // a member that joins (identity)
}

func (f *metaGroupFlags) flags(fs *pflag.FlagSet) {
	fs.StringVar(&f.raftListen, "raft-listen", "", "join a meta group: the Raft transport's listen address (mutual TLS between metas); empty: meta runs alone")
	fs.StringVar(&f.raftAdvertise, "raft-advertise", "", "the Raft address other members dial (default --raft-listen)")
	fs.StringVar(&f.advertise, "advertise", "", "the gRPC address clients dial, this member's id in the group (default --listen)")
	fs.StringVar(&f.bootstrap, "bootstrap", "", `the founding members, "grpc=raft,grpc=raft,...", the same on each (ignored once the member has state); empty: wait for `+"`cairn admin meta add`")
	fs.StringVar(&f.restore, "restore", "", "start from a backup (`cairn admin meta snapshot FILE`); --data must hold no store yet")
	fs.StringVar(&f.join, "join", os.Getenv("CAIRN_META_JOIN"), "join an existing meta group with a token from `cairn admin join-token --role meta` (default $CAIRN_META_JOIN): the member buys its certificate, adds itself and learns the group's secrets from it; no files are copied")
	fs.StringVar(&f.meta, "meta", "", "with --join: gRPC addresses of the group's members, comma separated")
}

// identity is the member's certificate. A meta that holds the cluster
// CA's key (the first of a cluster, which makes it at its first start)
// issues its own at every start; a member that joined (--join) keeps the
// one its token bought in dir/tls and holds no CA key: the group's
// secrets reach it through the log (meta/secrets.go). fresh reports a
// member that joined just now and must still be added to the group.
func (f *metaGroupFlags) identity(ctx context.Context, dir, id string, sans []string) (node *pki.Node, ca *pki.CA, fresh bool, err error) {
	kept := filepath.Join(nodeDir(dir), pki.CertFile)
	_, keyErr := os.Stat(filepath.Join(dir, pki.CAKey))
	_, keptErr := os.Stat(kept)
	if keyErr != nil && keptErr != nil && f.join == "" && f.meta != "" {
		// Meant to join, but without a token: making a CA of its own
		// would found another cluster.
		return nil, nil, false, errors.E(errors.Invalid, "--meta names a group to join: give --join TOKEN (cairn admin join-token --role meta)")
	}
	if keyErr == nil || (f.join == "" && keptErr != nil) {
		if ca, err = pki.LoadOrCreateCA(dir, "cairn cluster"); err != nil {
			return nil, nil, false, err
		}
		node, err = ca.Node(pki.RoleMeta, "meta", sans)
		return node, ca, false, err
	}
	if f.raftListen == "" {
		return nil, nil, false, errors.E(errors.Invalid, "--join makes a member of a meta group: it needs --raft-listen")
	}
	fresh = keptErr != nil
	if fresh && f.meta == "" {
		return nil, nil, false, errors.E(errors.Invalid, "--join needs --meta: the addresses of the group's members")
	}
	if node, err = meta.JoinCluster(ctx, f.meta, f.join, nodeDir(dir), id, sans); err != nil {
		return nil, nil, false, err
	}
	// The CA's certificate where a founding member has it (CAIRN_CA for
	// the CLI on this host); public, and never with a key beside it.
	if err := pki.WriteFileSync(filepath.Join(dir, pki.CAFile), node.CA.PEM, 0o644); err != nil {
		return nil, nil, false, err
	}
	return node, nil, fresh, nil
}

// addSelf asks the group (through --meta) to add this member, which just
// joined: its Raft transport listens already. Its meta certificate is
// the credential. A leader may be changing: retried for a minute.
func (f *metaGroupFlags) addSelf(ctx context.Context, node *pki.Node, id string) error {
	mc, conn, err := meta.Dial(f.meta, meta.DialTLS(node.Client()))
	if err != nil {
		return err
	}
	defer conn.Close()
	raftAddr := cmp.Or(f.raftAdvertise, f.raftListen)
	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 35*time.Second)
		_, err := mc.MetaAddMember(cctx, &metapb.MetaMemberRequest{Id: id, RaftAddr: raftAddr})
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// config is the group configuration the flags describe; nil: meta alone.
func (f *metaGroupFlags) config(listen string, node *pki.Node) (*meta.GroupConfig, error) {
	if f.raftListen == "" {
		if f.bootstrap != "" || f.raftAdvertise != "" || f.join != "" {
			return nil, errors.E(errors.Invalid, "--bootstrap, --raft-advertise and --join need --raft-listen")
		}
		return nil, nil
	}
	peers, err := meta.ParsePeers(f.bootstrap)
	if err != nil {
		return nil, err
	}
	id := cmp.Or(f.advertise, listen)
	return &meta.GroupConfig{ID: id, RaftListen: f.raftListen, RaftAdvertise: f.raftAdvertise, Bootstrap: peers, TLS: node}, nil
}

// sans are the addresses meta's certificate names: the listener's, and the
// advertised gRPC and Raft addresses of a member.
func (f *metaGroupFlags) sans(listen string) []string {
	out := []string{listen}
	for _, a := range []string{f.advertise, f.raftListen, f.raftAdvertise} {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}
