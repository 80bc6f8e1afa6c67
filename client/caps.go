package client

import (
	"container/list"
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"

	"cairn/capability"
	"cairn/proto/metapb"
)

// Data-plane capabilities (package capability). Meta answers a Resolve
// with the read capability of each extent's needle and an Assign with the
// write capability of the volume; a data server answers a write with the
// read and delete capability of the new needle. The client keeps them by
// needle (and by volume for writes) and presents them with every data
// call, so front ends that hold extents themselves (the mount, the S3
// gateway) read without knowing about capabilities, as long as their meta
// answers pass through WithCaps.
//
// A capability is renewed with meta (RenewCaps) when it is about to expire
// or a data server refused it: a mount that has held a file's extents for
// longer than a capability lives keeps reading.

// capStore holds the capabilities of one client. It is a capability.Keeper.
//
// The needles' capabilities are kept least recently used first out, up to
// max bytes: a client that reads a million files would otherwise keep a
// million tokens for the ten hours they live. One evicted is no loss of
// access, only of a shortcut: a refused read looks the file up again
// (readPart, and the mount's readAt), which brings the capability back.
type capStore struct {
	meta metapb.MetaClient
	now  func() time.Time
	max  int64 // bytes of needles' capabilities kept (capCost each)

	mu      sync.Mutex
	used    int64
	needles map[needleID]*list.Element // of *capItem
	lru     *list.List                 // of *capItem, most recent first
	writes  map[uint32]capEntry        // by volume (a few: not bounded)
}

type needleID struct {
	vid uint32
	key uint64
}

type capEntry struct {
	tok     string
	expires time.Time
	margin  time.Duration // renewed when less than this is left
}

type capItem struct {
	id needleID
	capEntry
}

// capOverhead is what a kept capability costs besides its token's bytes:
// the map entry, the list element and the item (about 130 bytes, rounded
// up).
const capOverhead = 160

func capCost(e capEntry) int64 { return int64(len(e.tok)) + capOverhead }

// renewMargin is the most a capability is renewed before it expires (for
// clocks a little apart); a short-lived one is renewed in its last quarter.
const renewMargin = 30 * time.Second

func newCapStore(meta metapb.MetaClient, max int64) *capStore {
	return &capStore{
		meta: meta, now: time.Now, max: max,
		needles: map[needleID]*list.Element{}, lru: list.New(), writes: map[uint32]capEntry{},
	}
}

func (s *capStore) entry(tok string) (capEntry, bool) {
	c, _, _, err := capability.Parse(tok)
	if err != nil {
		return capEntry{}, false
	}
	return capEntry{tok: tok, expires: c.Expires, margin: min(renewMargin, c.Expires.Sub(s.now())/4)}, true
}

// Keep stores the capability of needle (vid, key).
func (s *capStore) Keep(vid uint32, key uint64, tok string) {
	e, ok := s.entry(tok)
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id := needleID{vid, key}
	if el, ok := s.needles[id]; ok {
		it := el.Value.(*capItem)
		s.used += capCost(e) - capCost(it.capEntry)
		it.capEntry = e
		s.lru.MoveToFront(el)
	} else {
		s.needles[id] = s.lru.PushFront(&capItem{id: id, capEntry: e})
		s.used += capCost(e)
	}
	for s.used > s.max && s.lru.Len() > 0 {
		it := s.lru.Remove(s.lru.Back()).(*capItem)
		delete(s.needles, it.id)
		s.used -= capCost(it.capEntry)
	}
}

// has says whether the capability of id is kept.
func (s *capStore) has(id needleID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.needles[id]
	return ok
}

// needle returns the capability of id, marking it used.
func (s *capStore) needle(id needleID) (capEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.needles[id]
	if !ok {
		return capEntry{}, false
	}
	s.lru.MoveToFront(el)
	return el.Value.(*capItem).capEntry, true
}

func (s *capStore) keepWrite(vid uint32, tok string) {
	if tok == "" { // a meta that signs nothing: nothing to renew either
		s.mu.Lock()
		s.writes[vid] = capEntry{expires: time.Unix(1<<40, 0)}
		s.mu.Unlock()
		return
	}
	if e, ok := s.entry(tok); ok {
		s.mu.Lock()
		s.writes[vid] = e
		s.mu.Unlock()
	}
}

// writeFresh says whether the write capability of vid is good for a while.
func (s *capStore) writeFresh(vid uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.writes[vid]
	return ok && s.now().Add(e.margin).Before(e.expires)
}

// keepResolved stores the capabilities of a Resolve answer's extents.
func (s *capStore) keepResolved(r *metapb.ResolveResponse) {
	for i, e := range r.GetExtents() {
		if i < len(r.Caps) && r.Caps[i] != "" {
			s.Keep(e.Volume, e.Key, r.Caps[i])
		}
	}
}

// Token is the capability for op on needle key of volume vid; a needle's
// is renewed first if it is about to expire.
func (s *capStore) Token(ctx context.Context, op capability.Op, vid uint32, key uint64) string {
	if op == capability.Write {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.writes[vid].tok
	}
	e, ok := s.needle(needleID{vid, key})
	if !ok {
		return ""
	}
	if s.now().Add(e.margin).Before(e.expires) {
		return e.tok
	}
	s.renew(ctx, needleID{vid, key})
	e, _ = s.needle(needleID{vid, key})
	return e.tok
}

// renew asks meta to re-sign the capability of needle id, and with it
// every other about to expire (a mount's open files expire together).
// It reports whether id's was renewed.
func (s *capStore) renew(ctx context.Context, id needleID) bool {
	s.mu.Lock()
	el, ok := s.needles[id]
	if !ok || el.Value.(*capItem).tok == "" {
		s.mu.Unlock()
		return false // evicted: only a fresh lookup brings it back
	}
	ids := []needleID{id}
	toks := []string{el.Value.(*capItem).tok}
	now := s.now()
	for el := s.lru.Front(); el != nil && len(ids) < 1000; el = el.Next() {
		it := el.Value.(*capItem)
		if it.id != id && !now.Add(it.margin).Before(it.expires) {
			ids, toks = append(ids, it.id), append(toks, it.tok)
		}
	}
	s.mu.Unlock()
	r, err := s.meta.RenewCaps(ctx, &metapb.RenewCapsRequest{Caps: toks})
	if err != nil {
		return false
	}
	renewed := false
	for i, tok := range r.Caps {
		if i < len(ids) && tok != "" {
			s.Keep(ids[i].vid, ids[i].key, tok)
			renewed = renewed || i == 0
		}
	}
	return renewed
}

// capMeta is a meta client whose answers feed a capStore.
type capMeta struct {
	metapb.MetaClient
	caps *capStore
}

func (m *capMeta) Resolve(ctx context.Context, in *metapb.ResolveRequest, opts ...grpc.CallOption) (*metapb.ResolveResponse, error) {
	r, err := m.MetaClient.Resolve(ctx, in, opts...)
	if err == nil {
		m.caps.keepResolved(r)
	}
	return r, err
}

func (m *capMeta) BatchResolve(ctx context.Context, in *metapb.BatchResolveRequest, opts ...grpc.CallOption) (*metapb.BatchResolveResponse, error) {
	r, err := m.MetaClient.BatchResolve(ctx, in, opts...)
	if err == nil {
		for _, res := range r.Results {
			if res.Response != nil {
				m.caps.keepResolved(res.Response)
			}
		}
	}
	return r, err
}

func (m *capMeta) Assign(ctx context.Context, in *metapb.AssignRequest, opts ...grpc.CallOption) (*metapb.AssignResponse, error) {
	r, err := m.MetaClient.Assign(ctx, in, opts...)
	if err == nil && r.Volume != nil {
		m.caps.keepWrite(r.Volume.Id, r.WriteCap)
	}
	return r, err
}

// WithCaps returns mc with the data-plane capabilities of its answers
// kept for this client's data calls. A front end that calls meta itself
// for extents it then reads through the client (the mount) passes its
// meta client through this.
func (c *Client) WithCaps(mc metapb.MetaClient) metapb.MetaClient {
	if m, ok := mc.(*capMeta); ok && m.caps == c.caps {
		return mc
	}
	return &capMeta{MetaClient: mc, caps: c.caps}
}

// capCtx is ctx carrying the client's capabilities for data calls.
func (c *Client) capCtx(ctx context.Context) context.Context {
	return capability.NewContext(ctx, c.caps)
}
