package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"cairn/api"
	"cairn/errors"
)

// Execute runs the cairn command. On failure it prints one line,
// "cairn: <message>", to stderr and exits 1. Ctrl-C cancels the running
// command's context, so transfers stop and temporary files are removed.
func Execute() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := Root().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cairn: "+ErrorLine(err))
		os.Exit(1)
	}
}

// Root returns the cairn command tree.
func Root() *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:   "cairn",
		Short: "Cairn, a distributed file and object store",
		Long: `Cairn stores files in namespaces. Client commands talk to a gateway's
native HTTP API at --endpoint (default $CAIRN_ENDPOINT or http://127.0.0.1:8080)
with the key pair in $CAIRN_ACCESS_KEY/$CAIRN_SECRET_KEY, else
$CAIRN_ROOT_USER/$CAIRN_ROOT_PASSWORD, else ./data/root.credentials.

Remote paths are written ns/path, like photos/2024/beach.jpg.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&o.endpoint, "endpoint", "", "gateway URL (default $CAIRN_ENDPOINT or "+api.DefaultEndpoint+")")
	root.PersistentFlags().Var(caFlag{}, "ca", "CA certificate (PEM) to trust for https endpoints, meta and data servers (default $CAIRN_CA, else ./data/meta/ca.pem if there, else the system's roots)")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return fmt.Errorf("%w (see 'cairn %s --help')", err, strings.TrimPrefix(cmd.CommandPath(), "cairn "))
	})
	root.AddCommand(
		putCmd(o), getCmd(o), catCmd(o), lsCmd(o), statCmd(o), rmCmd(o), mvCmd(o), appendCmd(o),
		nsCmd(o), adminCmd(), benchCmd(o), mountCmd(o),
	)
	root.AddCommand(roleCommands()...)
	return root
}

// caFlag is --ca: it sets $CAIRN_CA, which every TLS client of the
// process reads (api.TLSConfig), and children such as mount -d inherit.
type caFlag struct{}

func (caFlag) String() string        { return os.Getenv("CAIRN_CA") }
func (caFlag) Type() string          { return "file" }
func (caFlag) Set(file string) error { return os.Setenv("CAIRN_CA", file) }

// options are the global flags, shared by the commands that need them.
type options struct {
	endpoint string
}

// client returns an API client configured by the environment and flags.
func (o *options) client() (*api.Client, error) {
	cfg, err := api.ConfigFromEnv()
	if err != nil {
		return nil, err
	}
	if o.endpoint != "" {
		cfg.Endpoint = o.endpoint
	}
	return api.New(cfg.Endpoint, cfg.AccessKey, cfg.SecretKey), nil
}

// ErrorLine is err as the one line cairn prints: the path it concerns and
// what went wrong, without the internal operation names, and a hint when
// the server could not be reached.
func ErrorLine(err error) string {
	msg := err.Error()
	var e *errors.Error
	if errors.As(err, &e) {
		msg = e.Message()
		if p := errors.PathOf(err); p != "" {
			msg = string(p) + ": " + msg
		}
		if e.Kind == errors.Unavailable && strings.Contains(msg, "dial") {
			msg += " (is the gateway running? see --endpoint)"
		}
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
}

// messageOf is err's message without the operation and path it names.
func messageOf(err error) string {
	var e *errors.Error
	if errors.As(err, &e) {
		return e.Message()
	}
	return err.Error()
}

// nArgs checks a command's argument count, answering with its usage line.
func nArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || hi >= 0 && len(args) > hi {
			return fmt.Errorf("usage: %s", cmd.UseLine())
		}
		return nil
	}
}

// isTerminal reports whether w is a terminal, where progress is shown.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
