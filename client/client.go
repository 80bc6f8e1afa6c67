package client

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"cairn"
	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// Config configures a Client. Meta and Dial are required.
type Config struct {
	// Meta is the metadata service (meta.Dial gives one with Cairn errors).
	Meta metapb.MetaClient
	// Dial returns the data plane of the data server at addr. It is called
	// once per address; the result is kept.
	Dial func(addr string) cairn.Chunks
	// ExtentSize is the largest needle a write creates; larger files are
	// split. Default 8 MiB.
	ExtentSize int64
	// Parallel bounds concurrent needle uploads of one write and concurrent
	// range reads of one read. Default 4.
	Parallel int
	// CacheEntries bounds the metadata cache in files. Default
	// 1,000,000; -1 disables.
	CacheEntries int
	// CacheBytes bounds the metadata cache in bytes (an estimate of the
	// inodes, extent lists and paths it keeps, cache.go), whichever of it
	// and CacheEntries comes first. Default 64 MiB (some 90,000 small
	// files); -1: no byte bound.
	CacheBytes int64
	// CacheTTL is how long a cached entry is trusted while the change
	// stream is down. Default 1s.
	CacheTTL time.Duration
	// CapCacheSize bounds the bytes of the data-plane capabilities kept
	// by needle (caps.go), least recently used out. Default 8 MiB (some
	// 25,000 needles); an evicted one costs a lookup when next read.
	CapCacheSize int64
	// NoWatch disables the change stream (then only CacheTTL bounds
	// staleness).
	NoWatch bool
	Logger  *slog.Logger
}

func (c *Config) setDefaults() error {
	if c.Meta == nil || c.Dial == nil {
		return errors.E(errors.Op("client.New"), errors.Invalid, "Config.Meta and Config.Dial are required")
	}
	if c.ExtentSize <= 0 {
		c.ExtentSize = 8 << 20
	}
	if c.Parallel <= 0 {
		c.Parallel = 4
	}
	if c.CacheEntries == 0 {
		c.CacheEntries = 1_000_000
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = 64 << 20
	}
	if c.CacheTTL <= 0 {
		c.CacheTTL = time.Second
	}
	if c.CapCacheSize <= 0 {
		c.CapCacheSize = 8 << 20
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Client talks to meta and the data servers. It is safe for concurrent use.
type Client struct {
	cfg   Config
	meta  metapb.MetaClient // Config.Meta, keeping capabilities (caps.go)
	cache *cache
	caps  *capStore

	mu      sync.Mutex
	chunks  map[string]cairn.Chunks
	volumes map[uint32]*metapb.Volume
	assign  map[string]*metapb.Volume // namespace -> writable volume

	cancel context.CancelFunc
	done   chan struct{}

	dataLoss atomic.Uint64 // see DataLoss
	notes    readNotes     // reads to report for tiering (readnotes.go)

	ecIdx sync.Map // volume id -> ecCachedIndex: encoded volumes' needle indexes (ec.go)
}

// New returns a Client; Close stops its change-stream watcher.
func New(cfg Config) (*Client, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	caps := newCapStore(cfg.Meta, cfg.CapCacheSize)
	c := &Client{
		cfg:     cfg,
		meta:    &capMeta{MetaClient: cfg.Meta, caps: caps},
		caps:    caps,
		cache:   newCache(cfg.CacheEntries, max(cfg.CacheBytes, 0), cfg.CacheTTL),
		chunks:  map[string]cairn.Chunks{},
		volumes: map[uint32]*metapb.Volume{},
		assign:  map[string]*metapb.Volume{},
		cancel:  cancel,
		done:    make(chan struct{}),
		notes:   readNotes{pending: map[readNote]struct{}{}, done: make(chan struct{})},
	}
	go c.reportReads(ctx)
	if cfg.NoWatch || cfg.CacheEntries < 0 {
		close(c.done)
	} else {
		go c.watch(ctx)
	}
	return c, nil
}

// Close stops background work. It does not close Config.Meta.
func (c *Client) Close() error {
	c.cancel()
	<-c.done
	<-c.notes.done
	return nil
}

// Meta returns the metadata client, for calls this package does not wrap.
func (c *Client) Meta() metapb.MetaClient { return c.meta }

// OnChange registers f to be called with every change event received, for
// caches layered above the client (the gateway's hot-object cache). f must
// not block. A reset event means: drop everything.
func (c *Client) OnChange(f func(*metapb.Event)) {
	c.cache.mu.Lock()
	c.cache.listeners = append(c.cache.listeners, f)
	c.cache.mu.Unlock()
}

func (c *Client) chunkFor(addr string) cairn.Chunks {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := c.chunks[addr]
	if ch == nil {
		ch = c.cfg.Dial(addr)
		c.chunks[addr] = ch
	}
	return ch
}

// ---- Namespaces ----------------------------------------------------------

// Namespace returns a namespace record, cached and kept coherent like
// file metadata (the gateway's access decisions rest on it).
func (c *Client) Namespace(ctx context.Context, name string) (*metapb.Namespace, error) {
	if n, ok := c.cache.getNS(name); ok {
		return n, nil
	}
	epoch := c.cache.epochNow()
	n, err := c.meta.GetNamespace(ctx, &metapb.NamespaceRequest{Name: name})
	if err != nil {
		return nil, err
	}
	c.cache.putNS(name, n, epoch)
	return n, nil
}

// CreateNamespace creates a namespace owned by owner.
func (c *Client) CreateNamespace(ctx context.Context, name, owner string, vis metapb.Visibility) (*metapb.Namespace, error) {
	if err := pathname.ValidNamespace(name); err != nil {
		return nil, err
	}
	defer c.cache.invalidateNS(name)
	return c.meta.CreateNamespace(ctx, &metapb.CreateNamespaceRequest{Name: name, Owner: owner, Visibility: vis})
}

// CreateNamespaceClass is CreateNamespace with a storage class ("": the
// default, replicated).
func (c *Client) CreateNamespaceClass(ctx context.Context, name, owner string, vis metapb.Visibility, class string) (*metapb.Namespace, error) {
	if err := pathname.ValidNamespace(name); err != nil {
		return nil, err
	}
	defer c.cache.invalidateNS(name)
	return c.meta.CreateNamespace(ctx, &metapb.CreateNamespaceRequest{Name: name, Owner: owner, Visibility: vis, StorageClass: class})
}

// SetVisibility changes a namespace's visibility.
func (c *Client) SetVisibility(ctx context.Context, name string, vis metapb.Visibility) (*metapb.Namespace, error) {
	defer c.cache.invalidateNS(name)
	return c.meta.SetVisibility(ctx, &metapb.SetVisibilityRequest{Name: name, Visibility: vis})
}

// DeleteNamespace removes an empty namespace.
func (c *Client) DeleteNamespace(ctx context.Context, name string) error {
	defer c.cache.invalidateNS(name)
	_, err := c.meta.DeleteNamespace(ctx, &metapb.NamespaceRequest{Name: name})
	return err
}

// ListNamespaces lists every namespace; callers filter by access.
func (c *Client) ListNamespaces(ctx context.Context) ([]*metapb.Namespace, error) {
	l, err := c.meta.ListNamespaces(ctx, &metapb.Empty{})
	if err != nil {
		return nil, err
	}
	return l.Namespaces, nil
}
