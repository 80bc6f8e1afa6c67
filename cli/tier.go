package cli

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn/bench"
	"cairn/errors"
	"cairn/proto/metapb"
)

// tierCmd is `cairn admin tier status | policy get | policy set`:
// automatic tiering (meta/tier.go).
func tierCmd() *cobra.Command {
	var metaAddr string
	metaFlag := func(c *cobra.Command) {
		c.Flags().StringVar(&metaAddr, "meta", defaultMetaAddr(), "meta gRPC address (default $CAIRN_META or 127.0.0.1:8090)")
	}
	tier := &cobra.Command{Use: "tier", Short: "Automatic tiering: move files between storage classes by policy"}
	status := &cobra.Command{
		Use:   "status [--meta ADDR]",
		Short: "Show bytes per storage class, moves in progress and done, and the policies",
		Args:  nArgs(0, 0),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, _ []string) error {
			st, err := mc.TierStatus(cmd.Context(), &metapb.Empty{})
			if err != nil {
				return err
			}
			printTierStatus(cmd.OutOrStdout(), st, time.Now())
			return nil
		}),
	}
	metaFlag(status)
	policy := &cobra.Command{Use: "policy", Short: "Show or set a tiering policy (a namespace's, or the global one)"}
	get := &cobra.Command{
		Use:   "get [NS] [--meta ADDR]",
		Short: "Show NS's policy, or every policy",
		Args:  nArgs(0, 1),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			req := &metapb.TierPolicyRequest{}
			if len(args) == 1 {
				req.Ns = args[0]
			}
			l, err := mc.TierGetPolicy(cmd.Context(), req)
			if err != nil {
				return err
			}
			if len(l.Policies) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no tiering policy: files stay in their class")
			}
			for _, p := range l.Policies {
				fmt.Fprintln(cmd.OutOrStdout(), FormatTierPolicy(p))
			}
			return nil
		}),
	}
	metaFlag(get)
	var rules []string
	var promoteTo, promoteRead string
	var rate int64
	set := &cobra.Command{
		Use:   "set [NS] [--rule to=CLASS[,unread=DUR][,min=SIZE][,max=SIZE][,prefix=P]]... [--promote-to CLASS --promote-read DUR] [--rate SIZE]",
		Short: "Set NS's policy (without NS the global one); no rule, promotion or rate removes it",
		Long: `Rules are tried in order and the first that matches a file decides its class:
  to=CLASS       the class the file goes to (required)
  unread=DUR     not read for at least DUR (30s, 12h, 30d)
  min=SIZE       at least SIZE bytes (155KiB, 1GiB)
  max=SIZE       at most SIZE bytes
  prefix=P       its path in the namespace starts with P
A file no rule matches that was read within --promote-read moves to --promote-to.
--rate (global policy only) bounds the bytes per second all moves copy.`,
		Args: nArgs(0, 1),
		RunE: withMeta(&metaAddr, func(cmd *cobra.Command, mc metapb.MetaClient, args []string) error {
			p := &metapb.TierPolicy{PromoteTo: promoteTo, Rate: uint64(rate)}
			if len(args) == 1 {
				p.Ns = args[0]
			}
			for _, r := range rules {
				tr, err := ParseTierRule(r)
				if err != nil {
					return err
				}
				p.Rules = append(p.Rules, tr)
			}
			if promoteRead != "" {
				d, err := parseDays(promoteRead)
				if err != nil {
					return errors.E(errors.Op("cli.tier"), errors.Invalid, fmt.Sprintf("--promote-read %q: %v", promoteRead, err))
				}
				p.PromoteReadNs = int64(d)
			}
			got, err := mc.TierSetPolicy(cmd.Context(), p)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), FormatTierPolicy(got))
			return nil
		}),
	}
	metaFlag(set)
	set.Flags().StringArrayVar(&rules, "rule", nil, "a rule: to=CLASS[,unread=DUR][,min=SIZE][,max=SIZE][,prefix=P] (repeat; first match wins)")
	set.Flags().StringVar(&promoteTo, "promote-to", "", "class a file read within --promote-read goes back to")
	set.Flags().StringVar(&promoteRead, "promote-read", "", "read window for promotion (e.g. 1h, 7d)")
	sizeFlag(set.Flags(), &rate, "rate", "bytes per second all moves together copy (global policy; default 32MiB)")
	policy.AddCommand(get, set)
	tier.AddCommand(status, policy)
	return tier
}

func defaultMetaAddr() string {
	if env := os.Getenv("CAIRN_META"); env != "" {
		return env
	}
	return "127.0.0.1:8090"
}

// ParseTierRule reads a --rule flag: to=CLASS[,unread=DUR][,min=SIZE]
// [,max=SIZE][,prefix=P]. The prefix comes last when it holds a comma.
func ParseTierRule(s string) (*metapb.TierRule, error) {
	const op = errors.Op("cli.ParseTierRule")
	r := &metapb.TierRule{}
	rest := s
	for rest != "" {
		var item string
		if strings.HasPrefix(rest, "prefix=") {
			item, rest = rest, "" // the rest is the prefix, commas and all
		} else {
			item, rest, _ = strings.Cut(rest, ",")
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return nil, errors.Errorf(op, errors.Invalid, "rule %q: %q is not KEY=VALUE", s, item)
		}
		switch k {
		case "to":
			if v == "" {
				return nil, errors.Errorf(op, errors.Invalid, "rule %q: empty class", s)
			}
			r.To = v
		case "unread":
			d, err := parseDays(v)
			if err != nil {
				return nil, errors.Errorf(op, errors.Invalid, "rule %q: unread %q: %v", s, v, err)
			}
			r.UnreadNs = int64(d)
		case "min", "max":
			n, err := bench.ParseSize(v)
			if err != nil {
				return nil, errors.Errorf(op, errors.Invalid, "rule %q: %s %q: %v", s, k, v, err)
			}
			if k == "min" {
				r.MinSize = uint64(n)
			} else {
				r.MaxSize = uint64(n)
			}
		case "prefix":
			r.Prefix = v
		default:
			return nil, errors.Errorf(op, errors.Invalid, "rule %q: unknown key %q (to, unread, min, max, prefix)", s, k)
		}
	}
	if r.To == "" {
		return nil, errors.Errorf(op, errors.Invalid, "rule %q: no to=CLASS", s)
	}
	if r.MaxSize > 0 && r.MaxSize < r.MinSize {
		return nil, errors.Errorf(op, errors.Invalid, "rule %q: max below min", s)
	}
	return r, nil
}

// parseDays is time.ParseDuration that also takes whole days ("30d"),
// and refuses negative durations.
func parseDays(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok && n != "" && !strings.ContainsAny(n, "+-") {
		days, err := strconv.ParseUint(n, 10, 16)
		if err != nil {
			return 0, fmt.Errorf("want a duration like 12h or 30d")
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("want a duration like 12h or 30d")
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration")
	}
	return d, nil
}

// FormatTierPolicy is one policy on one line, in the flags' own syntax.
func FormatTierPolicy(p *metapb.TierPolicy) string {
	var b strings.Builder
	name := p.Ns
	if name == "" {
		name = "(global)"
	}
	b.WriteString(name + ":")
	for _, r := range p.Rules {
		b.WriteString(" --rule to=" + r.To)
		if r.UnreadNs > 0 {
			b.WriteString(",unread=" + time.Duration(r.UnreadNs).String())
		}
		if r.MinSize > 0 {
			fmt.Fprintf(&b, ",min=%d", r.MinSize)
		}
		if r.MaxSize > 0 {
			fmt.Fprintf(&b, ",max=%d", r.MaxSize)
		}
		if r.Prefix != "" {
			b.WriteString(",prefix=" + r.Prefix)
		}
	}
	if p.PromoteTo != "" {
		fmt.Fprintf(&b, " --promote-to %s --promote-read %s", p.PromoteTo, time.Duration(p.PromoteReadNs))
	}
	if p.Rate > 0 {
		fmt.Fprintf(&b, " --rate %d", p.Rate)
	}
	return b.String()
}

func printTierStatus(w io.Writer, st *metapb.TierStatusResponse, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tFILES\tBYTES")
	for _, c := range st.Classes {
		fmt.Fprintf(tw, "%s\t%d\t%d\n", c.Class, c.Files, c.Bytes)
	}
	tw.Flush()
	scanned := "no scan yet"
	if st.ScannedNs > 0 {
		scanned = fmt.Sprintf("last scan %s ago", now.Sub(time.Unix(0, st.ScannedNs)).Round(time.Second))
	}
	fmt.Fprintf(w, "\n%s (every %s); %d files were due to move\n", scanned, time.Duration(st.IntervalNs), st.Due)
	fmt.Fprintf(w, "moves since meta started: %d moved (%d bytes), %d stale (the file changed; copy discarded), %d failed\n",
		st.Moved, st.MovedBytes, st.Stale, st.Failed)
	fmt.Fprintf(w, "move intents: %d open; %d unfinished moves' copies released; %d reads reported from client caches\n",
		st.Intents, st.UnfinishedReleased, st.CachedReads)
	if len(st.Moving) > 0 {
		fmt.Fprintln(w, "in progress:")
		for _, m := range st.Moving {
			fmt.Fprintln(w, "  "+m)
		}
	}
	if len(st.Policies) == 0 {
		fmt.Fprintln(w, "no tiering policy: files stay in their class")
		return
	}
	fmt.Fprintln(w, "policies:")
	for _, p := range st.Policies {
		fmt.Fprintln(w, "  "+FormatTierPolicy(p))
	}
}
