package chunk

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"cairn/capability"
	"cairn/errors"
	"cairn/internal/cork"
)

// kindStatus is the one translation of an error Kind to HTTP on the data
// plane: a status and the code carried in the JSON body, which Remote maps
// back to the Kind. Indexed by Kind.
var kindStatus = [...]struct {
	status int
	code   string
}{
	errors.Other:           {http.StatusInternalServerError, "Other"},
	errors.Invalid:         {http.StatusBadRequest, "Invalid"},
	errors.NotExist:        {http.StatusNotFound, "NotExist"},
	errors.Exist:           {http.StatusConflict, "Exist"},
	errors.NotEmpty:        {http.StatusConflict, "NotEmpty"},
	errors.IsDir:           {http.StatusBadRequest, "IsDir"},
	errors.NotDir:          {http.StatusBadRequest, "NotDir"},
	errors.Permission:      {http.StatusForbidden, "Permission"},
	errors.Unauthenticated: {http.StatusUnauthorized, "Unauthenticated"},
	errors.Precondition:    {http.StatusPreconditionFailed, "Precondition"},
	errors.TooLarge:        {http.StatusRequestEntityTooLarge, "TooLarge"},
	errors.Range:           {http.StatusRequestedRangeNotSatisfiable, "Range"},
	errors.Corrupt:         {http.StatusInternalServerError, "Corrupt"},
	errors.IO:              {http.StatusInternalServerError, "IO"},
	errors.Unavailable:     {http.StatusServiceUnavailable, "Unavailable"},
	errors.ReadOnly:        {http.StatusConflict, "ReadOnly"},
	errors.NameTooLong:     {http.StatusBadRequest, "NameTooLong"},
	errors.Stale:           {http.StatusConflict, "Stale"},
	errors.Canceled:        {499, "Canceled"}, // the client went away; nginx's code
	errors.NoSpace:         {http.StatusInsufficientStorage, "NoSpace"},
	errors.DataLoss:        {http.StatusInternalServerError, "DataLoss"},
}

func statusOf(k errors.Kind) (int, string) {
	if int(k) < len(kindStatus) && kindStatus[k].code != "" {
		return kindStatus[k].status, kindStatus[k].code
	}
	return http.StatusInternalServerError, "Other"
}

func kindOfCode(code string) errors.Kind {
	for k, ks := range kindStatus {
		if ks.code == code {
			return errors.Kind(k)
		}
	}
	return errors.Other
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		Path    string `json:"path,omitempty"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, code := statusOf(errors.KindOf(err))
	var body errorBody
	body.Error.Code = code
	body.Error.Path = string(errors.PathOf(err))
	var e *errors.Error
	if errors.As(err, &e) {
		body.Error.Message = e.Message()
	} else {
		body.Error.Message = err.Error()
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Del("Content-Length")
	w.Header().Del("Content-Range")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		json.NewEncoder(w).Encode(&body)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// Handler serves the data plane over HTTP/1.1; the routes are in doc.go.
func (s *Store) Handler() http.Handler {
	// Each route's capability is checked before its handler (auth.go);
	// handlePut checks its own, which it hands on.
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v/{vid}", s.handlePut)
	mux.HandleFunc("PUT /v/{vid}/{key}", s.handlePut)
	mux.HandleFunc("GET /v/{vid}/{key}", s.guard(need{capability.Read, true, true}, s.handleGet)) // and HEAD
	mux.HandleFunc("DELETE /v/{vid}/{key}", s.guard(need{capability.Delete, true, true}, s.handleDelete))
	mux.HandleFunc("GET /local", s.handleLocal) // the socket checks its peer (local.go)
	mux.HandleFunc("PUT /admin/volumes/{vid}", s.guard(need{capability.Admin, true, false}, s.handleCreate))
	mux.HandleFunc("GET /admin/volumes", s.guard(need{capability.Admin, false, false}, s.handleList))
	mux.HandleFunc("POST /admin/volumes/{vid}/compact", s.guard(need{capability.Admin, true, false}, s.handleCompact))
	s.clusterRoutes(mux)
	s.ecRoutes(mux)
	return mux
}

func parseVid(r *http.Request) (uint32, error) {
	v, err := strconv.ParseUint(r.PathValue("vid"), 10, 32)
	if err != nil {
		return 0, errors.E(errors.Invalid, fmt.Sprintf("bad volume id %q", r.PathValue("vid")))
	}
	return uint32(v), nil
}

func parseKey(r *http.Request) (uint64, error) {
	k, err := strconv.ParseUint(r.PathValue("key"), 10, 64)
	if err != nil {
		return 0, errors.E(errors.Invalid, fmt.Sprintf("bad needle key %q", r.PathValue("key")))
	}
	return k, nil
}

func parseGen(r *http.Request) (uint64, error) {
	g, err := strconv.ParseUint(r.URL.Query().Get("gen"), 10, 64)
	if err != nil {
		return 0, errors.E(errors.Invalid, fmt.Sprintf("bad or missing gen %q", r.URL.Query().Get("gen")))
	}
	return g, nil
}

// Bodies up to this size are read into pooled buffers; the volume copies
// the data into its record before Put returns, so a buffer is free again
// as soon as the needle is durable.
const pooledBody = 256 << 10

var bodyPool = sync.Pool{New: func() any { b := make([]byte, pooledBody); return &b }}

// handlePut stores a needle: POST (a new key) needs a write capability of
// the volume, PUT (the caller's key: replication, copies, repair) a
// replicate capability of the key. A POST is answered with the read and
// delete capability of the new needle.
func (s *Store) handlePut(w http.ResponseWriter, r *http.Request) {
	n := need{capability.Write, true, false}
	if r.PathValue("key") != "" {
		n = need{capability.Replicate, true, true}
	}
	c, err := s.authorize(r, n)
	if err != nil {
		writeError(w, r, errors.E(errors.Op("chunk.http.auth"), errors.Path(r.URL.Path), err))
		return
	}
	vid, key, err := s.put(w, r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if tok := s.newNeedleCap(c, vid, key); tok != "" && r.PathValue("key") == "" {
		fmt.Fprintf(w, "{\"key\":%d,\"cap\":%q}\n", key, tok)
		return
	}
	fmt.Fprintf(w, "{\"key\":%d}\n", key)
}

func (s *Store) put(w http.ResponseWriter, r *http.Request) (uint32, uint64, error) {
	op := errors.Op("chunk.http.Put")
	vid, err := parseVid(r)
	if err != nil {
		return 0, 0, errors.E(op, err)
	}
	gen, err := parseGen(r)
	if err != nil {
		return 0, 0, errors.E(op, err)
	}
	var key uint64
	if r.PathValue("key") != "" {
		if key, err = parseKey(r); err != nil {
			return 0, 0, errors.E(op, err)
		}
	}
	n := r.ContentLength
	switch {
	case n < 0:
		return 0, 0, errors.E(op, errors.Invalid, "Content-Length is required")
	case n > s.cfg.MaxNeedle:
		return 0, 0, errors.E(op, errors.TooLarge, fmt.Sprintf("needle of %d bytes over the limit of %d", n, s.cfg.MaxNeedle))
	}
	var data []byte
	if n <= pooledBody {
		bp := bodyPool.Get().(*[]byte)
		defer bodyPool.Put(bp)
		data = (*bp)[:n]
	} else {
		data = make([]byte, n)
	}
	if _, err := io.ReadFull(r.Body, data); err != nil {
		return 0, 0, errors.E(op, errors.Invalid, fmt.Errorf("reading body: %w", err))
	}
	// From here on the writer hears from us every KeepAliveEvery until
	// the answer, so that it can tell a slow disk or a slow replica (we
	// go on saying so) from a dead or cut-off server (silence).
	ka := startKeepAlive(w)
	defer ka.stop()
	if r.PathValue("key") != "" {
		if err := s.PutKey(r.Context(), vid, gen, key, data); err != nil {
			return 0, 0, err
		}
	} else if key, err = s.Put(r.Context(), vid, gen, data); err != nil {
		return 0, 0, err
	}
	return vid, key, nil
}

// Liveness of writes. A data server that has a write's body sends an
// interim "102 Processing" every KeepAliveEvery until the final answer;
// Remote gives up on a server that has said nothing (no body bytes taken,
// no interim, no answer) for Silence. A write to a dead or cut-off server
// (no reset, no answer) thus fails in about a second, while one that waits
// on a loaded disk's fdatasync or on a slow replica keeps waiting.
const (
	KeepAliveEvery = 200 * time.Millisecond
	Silence        = time.Second
)

// keepAlive sends the interim responses. stop must be called before the
// handler writes its own answer: the mutex keeps the two apart.
type keepAlive struct {
	mu   sync.Mutex
	w    http.ResponseWriter
	t    *time.Timer
	done bool
}

func startKeepAlive(w http.ResponseWriter) *keepAlive {
	k := &keepAlive{w: w}
	k.mu.Lock() // tick reads k.t
	k.t = time.AfterFunc(KeepAliveEvery, k.tick)
	k.mu.Unlock()
	return k
}

func (k *keepAlive) tick() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.done {
		return
	}
	k.w.WriteHeader(http.StatusProcessing) // net/http flushes a 1xx at once
	k.t.Reset(KeepAliveEvery)
}

func (k *keepAlive) stop() {
	k.mu.Lock()
	k.done = true
	k.mu.Unlock()
	k.t.Stop()
}

// parseRange parses a single-range "bytes=" header against a needle of
// size bytes, with RFC 9110 semantics: a last byte past the end is
// clamped; a first byte at or past the end is unsatisfiable.
func parseRange(h string, size int64) (off, length int64, err error) {
	spec, ok := strings.CutPrefix(h, "bytes=")
	if !ok || strings.Contains(spec, ",") {
		return 0, 0, errors.E(errors.Range, fmt.Sprintf("unsupported Range %q", h))
	}
	first, last, ok := strings.Cut(strings.TrimSpace(spec), "-")
	if !ok {
		return 0, 0, errors.E(errors.Range, fmt.Sprintf("bad Range %q", h))
	}
	if first == "" { // suffix: the last N bytes
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n <= 0 {
			return 0, 0, errors.E(errors.Range, fmt.Sprintf("bad Range %q", h))
		}
		n = min(n, size)
		return size - n, n, nil
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 {
		return 0, 0, errors.E(errors.Range, fmt.Sprintf("bad Range %q", h))
	}
	if a >= size {
		return 0, 0, errors.E(errors.Range, fmt.Sprintf("range starts at %d, needle is %d bytes", a, size))
	}
	b := size - 1
	if last != "" {
		if b, err = strconv.ParseInt(last, 10, 64); err != nil || b < a {
			return 0, 0, errors.E(errors.Range, fmt.Sprintf("bad Range %q", h))
		}
		b = min(b, size-1)
	}
	return a, b - a + 1, nil
}

// lazyWriter sends the status line with the first byte of the body, so an
// error found before any data is verified (a corrupt first block) can
// still become a proper error response.
type lazyWriter struct {
	w       http.ResponseWriter
	status  int
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.w.WriteHeader(l.status)
	}
	return l.w.Write(p)
}

func (s *Store) handleGet(w http.ResponseWriter, r *http.Request) {
	op := errors.Op("chunk.http.Get")
	defer cork.Request(r)() // one socket write per needle over TLS
	vid, err := parseVid(r)
	if err != nil {
		writeError(w, r, errors.E(op, err))
		return
	}
	key, err := parseKey(r)
	if err != nil {
		writeError(w, r, errors.E(op, err))
		return
	}
	size, err := s.Size(r.Context(), vid, key)
	if err != nil {
		writeError(w, r, err)
		return
	}
	off, length, status := int64(0), size, http.StatusOK
	h := w.Header()
	h.Set("Accept-Ranges", "bytes")
	if rh := r.Header.Get("Range"); rh != "" {
		if off, length, err = parseRange(rh, size); err != nil {
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", size))
			status, code := statusOf(errors.Range)
			h.Set("Content-Type", "application/json")
			w.WriteHeader(status)
			if r.Method != http.MethodHead {
				var body errorBody
				body.Error.Code, body.Error.Message = code, err.Error()
				json.NewEncoder(w).Encode(&body)
			}
			return
		}
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", off, off+length-1, size))
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	if r.Method == http.MethodHead || length == 0 {
		w.WriteHeader(status)
		return
	}
	lw := &lazyWriter{w: w, status: status}
	if _, err := s.ReadTo(r.Context(), vid, key, off, length, lw); err != nil {
		if !lw.started {
			writeError(w, r, err)
			return
		}
		// Headers and some verified bytes are gone; cutting the connection
		// is the only way left to tell the client the body is incomplete.
		panic(http.ErrAbortHandler)
	}
}

func (s *Store) handleDelete(w http.ResponseWriter, r *http.Request) {
	op := errors.Op("chunk.http.Delete")
	vid, err := parseVid(r)
	if err == nil {
		var key, gen uint64
		if key, err = parseKey(r); err == nil {
			if gen, err = parseGen(r); err == nil {
				err = s.Delete(r.Context(), vid, gen, key)
			}
		}
	}
	if err != nil {
		writeError(w, r, errors.E(op, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Store) handleCreate(w http.ResponseWriter, r *http.Request) {
	op := errors.Op("chunk.http.CreateVolume")
	vid, err := parseVid(r)
	if err == nil {
		var gen uint64
		if gen, err = parseGen(r); err == nil {
			err = s.CreateVolume(r.Context(), vid, gen)
		}
	}
	if err != nil {
		writeError(w, r, errors.E(op, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// VolumeInfo is one row of GET /admin/volumes.
type VolumeInfo struct {
	ID        uint32  `json:"id"`
	Gen       uint64  `json:"gen"`
	Size      int64   `json:"size"`
	Garbage   int64   `json:"garbage"`
	Ratio     float64 `json:"garbage_ratio"`
	Needles   int64   `json:"needles"`
	ReadOnly  bool    `json:"read_only"`
	Full      bool    `json:"full"`
	Syncs     uint64  `json:"syncs"`
	Corrupt   uint64  `json:"corrupt_reads"`
	Truncated int64   `json:"truncated_at_open"`
}

func (s *Store) handleList(w http.ResponseWriter, r *http.Request) {
	done := s.ops.Start("volumes")
	rows := []VolumeInfo{}
	for _, st := range s.VolumeStats() {
		rows = append(rows, VolumeInfo{
			ID: st.ID, Gen: st.Gen, Size: st.Size, Garbage: st.Garbage, Ratio: st.GarbageRatio(),
			Needles: st.Needles, ReadOnly: st.ReadOnly, Full: st.Full, Syncs: st.Syncs,
			Corrupt: st.Corrupt, Truncated: st.Truncated,
		})
	}
	done(nil)
	writeJSON(w, map[string]any{"server_id": s.id, "volumes": rows})
}

func (s *Store) handleCompact(w http.ResponseWriter, r *http.Request) {
	vid, err := parseVid(r)
	if err == nil {
		err = s.Compact(vid)
	}
	if err != nil {
		writeError(w, r, errors.E(errors.Op("chunk.http.Compact"), err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
