package meta

import (
	"sync"

	"cairn/errors"
	"cairn/proto/metapb"
)

// hub fans committed events out to watchers. It keeps the most recent
// events in a ring so that a watcher that reconnects can catch up; one that
// fell further behind is told to reset. Publishing never blocks: a watcher
// whose buffer is full is cut off and catches up from the ring (or resets)
// on its own goroutine, so a slow client never slows apply.
type hub struct {
	mu       sync.Mutex
	last     uint64
	ring     []*metapb.Event // circular; len == capacity
	head, n  int             // oldest index, number held
	watchers map[*watcher]struct{}
	closed   bool
}

type watcher struct{ ch chan *metapb.Event }

func newHub(last uint64, size int) *hub {
	return &hub{last: last, ring: make([]*metapb.Event, size), watchers: map[*watcher]struct{}{}}
}

// publish is called in sequence order (under the apply mutex).
func (h *hub) publish(evs []*metapb.Event) {
	if len(evs) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range evs {
		if h.n < len(h.ring) {
			h.ring[(h.head+h.n)%len(h.ring)] = e
			h.n++
		} else {
			h.ring[h.head] = e
			h.head = (h.head + 1) % len(h.ring)
		}
		h.last = e.Seq
		for w := range h.watchers {
			select {
			case w.ch <- e:
			default:
				delete(h.watchers, w)
				close(w.ch)
			}
		}
	}
}

// subscribe registers a watcher that receives every event after `after`
// (0: from now). reset reports that the caller must be sent a reset: the
// events after `after` are no longer held, or there are none to replay.
// The second case matters as much as the first: a client may only trust
// its cache once the stream has proven live, and a quiet store would
// otherwise send nothing for minutes, leaving every client on TTLs. last
// is the sequence the watcher starts from. A nil watcher means the hub is
// closed.
func (h *hub) subscribe(after uint64) (w *watcher, reset bool, last uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, false, h.last
	}
	// The buffer can hold the whole ring, so a backfill never overflows.
	w = &watcher{ch: make(chan *metapb.Event, len(h.ring)+256)}
	if after == 0 || after == h.last {
		reset = true
	} else {
		oldest := h.last + 1
		if h.n > 0 {
			oldest = h.ring[h.head].Seq
		}
		if after+1 < oldest || after > h.last {
			reset = true
		} else {
			for i := 0; i < h.n; i++ {
				if e := h.ring[(h.head+i)%len(h.ring)]; e.Seq > after {
					w.ch <- e
				}
			}
		}
	}
	h.watchers[w] = struct{}{}
	return w, reset, h.last
}

func (h *hub) unsubscribe(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.watchers[w]; ok {
		delete(h.watchers, w)
		close(w.ch)
	}
}

func (h *hub) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for w := range h.watchers {
		delete(h.watchers, w)
		close(w.ch)
	}
}

func (h *hub) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// Watch streams events after req.After. The first event proves the stream
// live: a replayed event, or a reset carrying the current sequence. A
// watcher that was cut off for being slow resumes from the ring where it
// left off, or gets reset=true.
func (s *Service) Watch(req *metapb.WatchRequest, stream metapb.Meta_WatchServer) error {
	const op = errors.Op("meta.Watch")
	ctx := stream.Context()
	after := req.After
	for {
		w, reset, last := s.hub.subscribe(after)
		if w == nil {
			return errors.E(op, errors.Unavailable, "meta is shutting down")
		}
		if reset {
			if err := stream.Send(&metapb.Event{Seq: last, Reset_: true}); err != nil {
				s.hub.unsubscribe(w)
				return err
			}
		}
		if reset || after == 0 {
			after = last
		}
	recv:
		for {
			select {
			case e, ok := <-w.ch:
				if !ok {
					break recv
				}
				if err := stream.Send(e); err != nil {
					s.hub.unsubscribe(w)
					return err
				}
				after = e.Seq
			case <-ctx.Done():
				s.hub.unsubscribe(w)
				return errors.E(op, errors.Canceled, ctx.Err())
			}
		}
		if s.hub.isClosed() {
			return errors.E(op, errors.Unavailable, "meta is shutting down")
		}
	}
}
