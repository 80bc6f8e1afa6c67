package cli

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/spf13/cobra"

	"cairn/api"
	"cairn/errors"
	"cairn/pathname"
)

func putCmd(o *options) *cobra.Command {
	var recursive bool
	var jobs int
	var contentType string
	cmd := &cobra.Command{
		Use:   "put [-r] SRC ns/path",
		Short: "Upload a file (- for stdin) or, with -r, a directory",
		Long: `Upload SRC to ns/path. A destination ending in '/' (or a bare namespace)
is a directory: the file keeps its name there. With -r, SRC is a directory
whose files are uploaded in parallel (-j at a time) under ns/path.`,
		Args: nArgs(2, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dst, err := parseTarget(args[1])
			if err != nil {
				return err
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			up := &uploader{c: c, contentType: contentType, stderr: cmd.ErrOrStderr()}
			if args[0] == "-" {
				return up.stdin(cmd.Context(), cmd.InOrStdin(), dst)
			}
			fi, err := os.Stat(args[0])
			if err != nil {
				return err
			}
			if fi.IsDir() {
				if !recursive {
					return fmt.Errorf("%s is a directory (use put -r)", args[0])
				}
				return up.tree(cmd.Context(), args[0], dst, max(jobs, 1))
			}
			return up.file(cmd.Context(), args[0], fi.Size(), remoteName(dst, args[0]))
		},
	}
	cmd.Flags().BoolVarP(&recursive, "recursive", "r", false, "upload a directory tree")
	cmd.Flags().IntVarP(&jobs, "jobs", "j", 8, "files uploaded in parallel with -r")
	cmd.Flags().StringVar(&contentType, "content-type", "", "Content-Type (default: from the file name's extension)")
	return cmd
}

// remoteName is where local file src goes when the destination is dst: dst
// itself, or dst/basename when dst is a directory.
func remoteName(dst target, src string) target {
	if dst.dir {
		dst.path = pathname.Join(dst.path, filepath.Base(src))
		dst.dir = false
	}
	return dst
}

type uploader struct {
	c           *api.Client
	contentType string
	stderr      io.Writer
}

func (u *uploader) typeOf(name string) string {
	if u.contentType != "" {
		return u.contentType
	}
	return mime.TypeByExtension(path.Ext(name))
}

func (u *uploader) stdin(ctx context.Context, r io.Reader, dst target) error {
	if dst.dir {
		return fmt.Errorf("uploading stdin needs a file name: ns/path, not %s/", dst)
	}
	p := newProgress(u.stderr, dst.String(), -1)
	defer p.Done()
	_, err := u.c.Put(ctx, dst.ns, dst.path, p.reader(r), -1, api.PutOptions{ContentType: u.typeOf(dst.path)})
	return err
}

func (u *uploader) file(ctx context.Context, src string, size int64, dst target) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	p := newProgress(u.stderr, dst.String(), size)
	defer p.Done()
	_, err = u.c.Put(ctx, dst.ns, dst.path, p.reader(f), size, api.PutOptions{ContentType: u.typeOf(src)})
	return err
}

// upload is one file of a tree.
type upload struct {
	local string
	size  int64
	dst   target
}

// tree uploads every regular file under dir, jobs at a time, and creates
// the empty directories. It goes on past a failed file and reports how many
// failed, each on its own line.
func (u *uploader) tree(ctx context.Context, dir string, dst target, jobs int) error {
	if dst.dir {
		dst = remoteName(dst, filepath.Clean(dir))
	}
	files, dirs, err := u.walk(dir, dst)
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if err := u.c.Mkdir(ctx, d.ns, d.path); err != nil {
			return err
		}
	}
	var total int64
	for _, f := range files {
		total += f.size
	}
	p := newProgress(u.stderr, fmt.Sprintf("%d files", len(files)), total)
	failed := u.parallel(ctx, files, jobs, p)
	p.Done()
	if failed > 0 {
		return fmt.Errorf("%d of %d files failed to upload", failed, len(files))
	}
	return nil
}

// walk lists the regular files under dir and the directories that hold
// none (which would not exist remotely otherwise). Other file types
// (symlinks, devices) are skipped with a warning.
func (u *uploader) walk(dir string, dst target) (files []upload, empty []target, err error) {
	err = filepath.WalkDir(dir, func(local string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, local)
		if err != nil {
			return err
		}
		remote := dst
		if rel != "." {
			remote.path = pathname.Join(dst.path, filepath.ToSlash(rel))
		}
		switch {
		case d.IsDir():
			if ents, err := os.ReadDir(local); err == nil && len(ents) == 0 {
				empty = append(empty, remote)
			}
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			files = append(files, upload{local, fi.Size(), remote})
		default:
			fmt.Fprintf(u.stderr, "cairn: skipping %s: not a regular file\n", local)
		}
		return nil
	})
	return files, empty, err
}

// parallel uploads files with jobs workers and returns how many failed.
func (u *uploader) parallel(ctx context.Context, files []upload, jobs int, p *progress) int {
	work := make(chan upload)
	var failed atomic.Int32
	var mu sync.Mutex // one error line at a time
	var wg sync.WaitGroup
	for range min(jobs, max(len(files), 1)) {
		wg.Go(func() {
			for f := range work {
				if err := u.one(ctx, f, p); err != nil {
					failed.Add(1)
					mu.Lock()
					fmt.Fprintf(u.stderr, "\ncairn: %s\n", ErrorLine(err))
					mu.Unlock()
				}
			}
		})
	}
	for _, f := range files {
		if ctx.Err() != nil {
			failed.Add(1)
			continue
		}
		work <- f
	}
	close(work)
	wg.Wait()
	return int(failed.Load())
}

func (u *uploader) one(ctx context.Context, f upload, p *progress) error {
	if _, _, err := pathname.Clean(f.dst.path); err != nil {
		return errors.E(errors.Path(f.local), err)
	}
	r, err := os.Open(f.local)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = u.c.Put(ctx, f.dst.ns, f.dst.path, p.reader(r), f.size, api.PutOptions{ContentType: u.typeOf(f.local)})
	return err
}
