package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"cairn/api"
	"cairn/errors"
)

// objectData fills buf with object i's content: distinct per object, the
// same wherever it is written, so cairn and a plain web server serve
// identical bytes.
func objectData(i int, buf []byte) { fill(buf, uint64(i)+1<<32) }

// PrepareDir writes n objects of size bytes as files dir/obj-NNNNNN, for a
// plain web server to serve in the same GET benchmark. Files that already
// have the right size are kept.
func PrepareDir(dir string, n int, size int64) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	buf := make([]byte, size)
	for i := range n {
		name := filepath.Join(dir, ObjectName(i))
		if fi, err := os.Stat(name); err == nil && fi.Size() == size {
			continue
		}
		objectData(i, buf)
		if err := os.WriteFile(name, buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Setup describes the objects a GET benchmark reads from cairn.
type Setup struct {
	Namespace   string
	Objects     int
	Size        int64
	Public      bool // make the namespace public (anonymous GETs, as a web server's)
	Concurrency int  // parallel uploads
}

// Prepare makes sure namespace s.Namespace holds s.Objects objects of
// s.Size bytes, uploading only those missing or of another size, so a
// second run of a benchmark starts at once. It returns how many it
// uploaded.
func Prepare(ctx context.Context, c *api.Client, s Setup) (int, error) {
	if err := ensureNamespace(ctx, c, s.Namespace, s.Public); err != nil {
		return 0, err
	}
	have := map[string]bool{}
	for e, err := range c.Entries(ctx, s.Namespace, api.ListOptions{Prefix: "obj-", Delimiter: "/"}) {
		if err != nil {
			return 0, err
		}
		if !e.Dir && e.Size == s.Size {
			have[e.Name] = true
		}
	}
	var missing []int
	for i := range s.Objects {
		if !have[ObjectName(i)] {
			missing = append(missing, i)
		}
	}
	return len(missing), upload(ctx, c, s, missing)
}

func ensureNamespace(ctx context.Context, c *api.Client, ns string, public bool) error {
	vis := api.Private
	if public {
		vis = api.Public
	}
	_, err := c.CreateNamespace(ctx, ns, vis)
	if errors.Is(errors.Exist, err) {
		_, err = c.SetVisibility(ctx, ns, vis)
	}
	return err
}

// upload puts the objects numbered in which, s.Concurrency at a time, and
// stops at the first error.
func upload(ctx context.Context, c *api.Client, s Setup, which []int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range max(s.Concurrency, 1) {
		wg.Go(func() {
			buf := make([]byte, s.Size)
			for {
				k := int(next.Add(1)) - 1
				if k >= len(which) || ctx.Err() != nil {
					return
				}
				objectData(which[k], buf)
				_, err := c.Put(ctx, s.Namespace, ObjectName(which[k]), bytes.NewReader(buf), s.Size, api.PutOptions{})
				if err != nil {
					once.Do(func() { first = fmt.Errorf("preparing objects: %w", err); cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}
