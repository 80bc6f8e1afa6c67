package cli

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"cairn/api"
	"cairn/errors"
)

func lsCmd(o *options) *cobra.Command {
	var long, recursive, stale bool
	cmd := &cobra.Command{
		Use:   "ls [-l] [-R] [ns/prefix]",
		Short: "List namespaces, or the files under a path",
		Long: `With no argument, list the namespaces. Given ns or ns/dir/, list that
directory. Given ns/name, list the directory if it is one, the file if it is
one, and otherwise every entry whose path begins with name.`,
		Args: nArgs(0, 1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			l := lister{c: c, w: cmd.OutOrStdout(), long: long}
			ctx := cmd.Context()
			if stale {
				ctx = api.StaleOK(ctx)
			}
			if len(args) == 0 {
				return l.namespaces(ctx)
			}
			t, err := parseTarget(args[0])
			if err != nil {
				return err
			}
			return l.list(ctx, t, recursive)
		},
	}
	cmd.Flags().BoolVarP(&long, "long", "l", false, "show size, modification time and ETag")
	cmd.Flags().BoolVarP(&recursive, "recursive", "R", false, "list everything below, not one level")
	cmd.Flags().BoolVar(&stale, "stale", false, "accept a listing that may miss the latest writes: any member of a meta group answers it")
	return cmd
}

type lister struct {
	c    *api.Client
	w    io.Writer
	long bool
}

func (l *lister) namespaces(ctx context.Context) error {
	list, err := l.c.Namespaces(ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(l.w, 0, 0, 2, ' ', 0)
	for _, ns := range list {
		if l.long {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ns.Visibility, ns.Owner, ns.Created.Local().Format(time.DateTime), cmp.Or(ns.Class, "replicated"), ns.Name)
		} else {
			fmt.Fprintln(tw, ns.Name)
		}
	}
	return tw.Flush()
}

// list lists t as the command's help describes. Names are shown relative
// to the directory listed (full paths with -R).
func (l *lister) list(ctx context.Context, t target, recursive bool) error {
	prefix := ""
	if t.path != "" {
		prefix = t.path + "/"
	}
	if !t.dir {
		st, err := l.c.Stat(ctx, t.ns, t.path)
		switch {
		case err == nil && !st.Dir:
			return l.print([]api.Entry{{Name: t.path, Size: st.Size, Mtime: st.Mtime, ETag: st.ETag}}, "")
		case errors.Is(errors.NotExist, err):
			prefix = t.path // not a file or directory: a prefix of names
		case err != nil:
			return err
		}
	}
	opts := api.ListOptions{Prefix: prefix, Delimiter: "/"}
	strip := prefix[:strings.LastIndexByte(prefix, '/')+1]
	if recursive {
		opts.Delimiter, strip = "", ""
	}
	return l.entries(ctx, t, opts, strip)
}

// entries prints a listing page by page, so a directory of millions of
// files starts printing at once and never sits in memory.
func (l *lister) entries(ctx context.Context, t target, opts api.ListOptions, strip string) error {
	n := 0
	var page []api.Entry
	for e, err := range l.c.Entries(ctx, t.ns, opts) {
		if err != nil {
			return err
		}
		page = append(page, e)
		n++
		if len(page) == 1000 {
			if err := l.print(page, strip); err != nil {
				return err
			}
			page = page[:0]
		}
	}
	if err := l.print(page, strip); err != nil {
		return err
	}
	if n == 0 && !t.dir && opts.Prefix == t.path {
		return errors.E(errors.Path(t.String()), errors.NotExist, "no such file, directory or prefix")
	}
	return nil
}

func (l *lister) print(entries []api.Entry, strip string) error {
	tw := tabwriter.NewWriter(l.w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, e := range entries {
		name := strings.TrimPrefix(strings.TrimSuffix(e.Name, "/"), strip)
		if e.Dir {
			name += "/"
		}
		if !l.long {
			fmt.Fprintln(l.w, name)
			continue
		}
		size, etag := fmt.Sprint(e.Size), e.ETag
		if e.Dir {
			size, etag = "-", "-"
		}
		mtime := "-"
		if !e.Mtime.IsZero() {
			mtime = e.Mtime.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t  %s\t  %s\t  %s\t\n", size, mtime, etag, name)
	}
	return tw.Flush()
}
