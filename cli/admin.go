package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn/bench"
	"cairn/metrics"
)

// defaultAdmin is `cairn server`'s admin listener unless told otherwise.
const defaultAdmin = "127.0.0.1:8092"

func adminCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "admin",
		Short: "Look inside running servers",
	}
	var addrs []string
	profile := &cobra.Command{
		Use:   "profile [--admin ADDR,...]",
		Short: "Show per-operation calls, latency and errors of each server",
		Long: `Fetch /debug/profile from each admin listener and print one table: for
every role and operation, the calls, p50, p99 and max latency and errors
since the server started.`,
		Args: nArgs(0, 0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rows, err := fetchProfiles(cmd.Context(), addrs, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			printProfile(cmd.OutOrStdout(), rows, len(addrs) > 1)
			return nil
		},
	}
	def := []string{defaultAdmin}
	if env := os.Getenv("CAIRN_ADMIN"); env != "" {
		def = strings.Split(env, ",")
	}
	profile.Flags().StringSliceVar(&addrs, "admin", def, "admin listener addresses, host:port or URL (default $CAIRN_ADMIN or "+defaultAdmin+")")
	cmd.AddCommand(profile)
	cmd.AddCommand(clusterAdminCommands()...)
	cmd.AddCommand(joinTokenCmd())
	cmd.AddCommand(certCmd())
	cmd.AddCommand(metaGroupCommand())
	cmd.AddCommand(s3AdminCommands()...)
	cmd.AddCommand(tierCmd())
	return cmd
}

// profileRow is a metrics.OpStat and the server it came from.
type profileRow struct {
	addr string
	metrics.OpStat
}

// fetchProfiles asks each address for its profile. An address that fails
// is reported on stderr and skipped; only if all fail is it an error.
func fetchProfiles(ctx context.Context, addrs []string, stderr io.Writer) ([]profileRow, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	var rows []profileRow
	var lastErr error
	for _, addr := range addrs {
		stats, err := fetchProfile(ctx, hc, addr)
		if err != nil {
			lastErr = err
			fmt.Fprintf(stderr, "cairn: %v\n", err)
			continue
		}
		for _, s := range stats {
			rows = append(rows, profileRow{addr, s})
		}
	}
	if lastErr != nil && rows == nil {
		return nil, fmt.Errorf("no profile from %s", strings.Join(addrs, ", "))
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Role != b.Role {
			return a.Role < b.Role
		}
		if a.Op != b.Op {
			return a.Op < b.Op
		}
		return a.addr < b.addr
	})
	return rows, nil
}

func fetchProfile(ctx context.Context, hc *http.Client, addr string) ([]metrics.OpStat, error) {
	u := strings.TrimSuffix(addr, "/")
	if !strings.Contains(u, "://") {
		u = "http://" + u
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/debug/profile", nil)
	if err != nil {
		return nil, fmt.Errorf("admin address %q: %w", addr, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("admin %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("admin %s: %s", addr, resp.Status)
	}
	var stats []metrics.OpStat
	if err := json.NewDecoder(resp.Body).Decode(&stats); err != nil {
		return nil, fmt.Errorf("admin %s: bad profile: %w", addr, err)
	}
	return stats, nil
}

func printProfile(w io.Writer, rows []profileRow, showAddr bool) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "ROLE\tOPERATION\tCALLS\tP50\tP99\tMAX\tERRORS\t"
	if showAddr {
		head = "SERVER\t" + head
	}
	fmt.Fprintln(tw, head)
	for _, r := range rows {
		if showAddr {
			fmt.Fprintf(tw, "%s\t", r.addr)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%d\t\n", r.Role, r.Op, r.Calls,
			bench.FormatDuration(r.P50), bench.FormatDuration(r.P99), bench.FormatDuration(r.Max), r.Errors)
	}
	tw.Flush()
}
