package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn/api"
	"cairn/bench"
	"cairn/errors"
)

func getCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "get ns/path [DST]",
		Short: "Download a file (DST: a file, a directory, or - for stdout)",
		Args:  nArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, err := parseFile(args[0])
			if err != nil {
				return err
			}
			dst := filepath.Base(src.path)
			if len(args) == 2 {
				dst = args[1]
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			if dst == "-" {
				return download(cmd.Context(), c, src, cmd.OutOrStdout(), cmd.ErrOrStderr())
			}
			if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
				dst = filepath.Join(dst, filepath.Base(src.path))
			}
			return downloadFile(cmd.Context(), c, src, dst, cmd.ErrOrStderr())
		},
	}
}

// download copies a remote file to w, with a progress bar on stderr.
func download(ctx context.Context, c *api.Client, src target, w, stderr io.Writer) error {
	body, st, err := c.Get(ctx, src.ns, src.path, api.GetOptions{})
	if err != nil {
		return err
	}
	defer body.Close()
	p := newProgress(stderr, src.String(), st.Size)
	defer p.Done()
	if _, err := io.Copy(p.writer(w), body); err != nil {
		return errors.E(errors.Path(src.String()), errors.IO, err)
	}
	return nil
}

// downloadFile writes a remote file to a temporary file next to dst and
// renames it into place, so dst is never left half-written, then sets its
// modification time to the remote one.
func downloadFile(ctx context.Context, c *api.Client, src target, dst string, stderr io.Writer) error {
	body, st, err := c.Get(ctx, src.ns, src.path, api.GetOptions{})
	if err != nil {
		return err
	}
	defer body.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".cairn-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	p := newProgress(stderr, src.String(), st.Size)
	_, err = io.Copy(p.writer(tmp), body)
	p.Done()
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return errors.E(errors.Path(src.String()), errors.IO, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return err
	}
	if !st.Mtime.IsZero() {
		os.Chtimes(dst, time.Now(), st.Mtime)
	}
	return nil
}

func catCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "cat ns/path...",
		Short: "Print files to stdout",
		Args:  nArgs(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			srcs := make([]target, len(args))
			for i, a := range args {
				t, err := parseFile(a)
				if err != nil {
					return err
				}
				srcs[i] = t
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			for _, src := range srcs {
				if err := download(cmd.Context(), c, src, cmd.OutOrStdout(), io.Discard); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

func statCmd(o *options) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stat ns/path",
		Short: "Show a file's or directory's attributes",
		Args:  nArgs(1, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			st, err := c.Stat(cmd.Context(), t.ns, t.path)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			printStat(cmd.OutOrStdout(), t, st)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func printStat(w io.Writer, t target, st *api.Stat) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	kind := "file"
	if st.Dir {
		kind = "directory"
	}
	fmt.Fprintf(tw, "path:\t%s\n", t)
	fmt.Fprintf(tw, "type:\t%s\n", kind)
	fmt.Fprintf(tw, "size:\t%d (%s)\n", st.Size, bench.FormatSize(st.Size))
	fmt.Fprintf(tw, "modified:\t%s\n", st.Mtime.Local().Format(time.RFC3339Nano))
	if !st.Dir {
		fmt.Fprintf(tw, "etag:\t%s\n", st.ETag)
		fmt.Fprintf(tw, "content-type:\t%s\n", st.ContentType)
	}
	fmt.Fprintf(tw, "mode:\t%#o\n", st.Mode)
	fmt.Fprintf(tw, "version:\t%d\n", st.Version)
	if st.StorageClass != "" {
		fmt.Fprintf(tw, "storage class:\t%s (moved by tiering; else the namespace's)\n", st.StorageClass)
	}
	tw.Flush()
}

func rmCmd(o *options) *cobra.Command {
	var recursive bool
	cmd := &cobra.Command{
		Use:   "rm [-r] ns/path...",
		Short: "Remove files, or with -r directories and everything under them",
		Args:  nArgs(1, -1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ts := make([]target, len(args))
			for i, a := range args {
				t, err := parseTarget(a)
				if err != nil {
					return err
				}
				if t.path == "" {
					return fmt.Errorf("%s is a namespace: remove it with 'cairn ns rm %s'", t.ns, t.ns)
				}
				ts[i] = t
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			for _, t := range ts {
				del := c.Delete
				if recursive {
					del = c.DeleteAll
				}
				if err := del(cmd.Context(), t.ns, t.path); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "remove directories and their contents")
	return cmd
}

func mvCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "mv ns/from ns/to",
		Short: "Rename a file or directory (within one namespace)",
		Args:  nArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			from, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			to, err := parseTarget(args[1])
			if err != nil {
				return err
			}
			switch {
			case from.path == "":
				return fmt.Errorf("cannot rename namespace %s", from.ns)
			case from.ns != to.ns:
				return fmt.Errorf("mv works within one namespace (%s -> %s): copy with get and put instead", from.ns, to.ns)
			}
			to = remoteName(to, from.path)
			c, err := o.client()
			if err != nil {
				return err
			}
			_, err = c.Rename(cmd.Context(), from.ns, from.path, to.path)
			return err
		},
	}
}

func appendCmd(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "append SRC|- ns/path",
		Short: "Append a local file (or stdin) to a file, atomically",
		Args:  nArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dst, err := parseFile(args[1])
			if err != nil {
				return err
			}
			var r io.Reader = cmd.InOrStdin()
			size := int64(-1)
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
					size = fi.Size()
				}
				r = f
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			p := newProgress(cmd.ErrOrStderr(), dst.String(), size)
			defer p.Done()
			_, err = c.Append(cmd.Context(), dst.ns, dst.path, p.reader(r), size)
			return err
		},
	}
}
