package chunk

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"cairn"
	"cairn/capability"
	"cairn/ec"
	"cairn/errors"
)

var _ cairn.Shards = (*Store)(nil)
var _ cairn.Shards = (*Remote)(nil)

// The erasure-coding routes (admin capability, or a meta or data-server
// identity): meta asks for encodes and rebuilds, data servers move shards
// and their bytes between each other.
//
//	PUT  /ec/{vid}/index            store the needle index (.ecx)
//	GET  /ec/{vid}/index            the needle index
//	GET  /ec/{vid}/index/{key}      the same, for a reader of needle key
//	PUT  /ec/{vid}/shards/{i}       store shard i (a whole shard file)
//	GET  /ec/{vid}/shards/{i}?off=&n=  n cell bytes of shard i from off
//	POST /ec/{vid}/encode           encode this server's copy (JSON ecEncodeRequest)
//	POST /ec/{vid}/rebuild/{i}      rebuild shard i here (JSON ecRebuildRequest)
//	GET  /ec/ranges                 upgrade to a stream of shard ranges (ec_ranges.go)
func (s *Store) ecRoutes(mux *http.ServeMux) {
	admin := need{capability.Admin, true, false}
	mux.HandleFunc("PUT /ec/{vid}/index", s.guard(admin, s.handlePutIndex))
	mux.HandleFunc("GET /ec/{vid}/index", s.guard(admin, s.handleGetIndex))
	// A reader holding the read capability of one needle may have the
	// index (offsets and sizes, no content) to find the needle's shard.
	mux.HandleFunc("GET /ec/{vid}/index/{key}", s.guard(need{capability.Read, true, true}, s.handleGetIndex))
	mux.HandleFunc("PUT /ec/{vid}/shards/{i}", s.guard(admin, s.handlePutShard))
	mux.HandleFunc("GET /ec/{vid}/shards/{i}", s.guard(admin, s.handleGetShard))
	mux.HandleFunc("POST /ec/{vid}/encode", s.guard(admin, s.handleEncode))
	mux.HandleFunc("POST /ec/{vid}/rebuild/{i}", s.guard(admin, s.handleRebuild))
	mux.HandleFunc("GET /ec/ranges", s.handleRanges) // authorises itself (ec_ranges.go)
	s.ecCompactRoutes(mux)
}

type ecEncodeRequest struct {
	Gen  uint64   `json:"gen"`
	K    int      `json:"k"`
	M    int      `json:"m"`
	Cell int64    `json:"cell"`
	To   []string `json:"to"`
}

type ecRebuildRequest struct {
	K       int      `json:"k"`
	M       int      `json:"m"`
	Cell    int64    `json:"cell"`
	Size    int64    `json:"size"`
	Servers []string `json:"servers"`
}

func parseShardIndex(r *http.Request) (int, error) {
	i, err := strconv.Atoi(r.PathValue("i"))
	if err != nil || i < 0 || i >= ec.MaxShards {
		return 0, errors.Errorf(errors.Op("chunk.http"), errors.Invalid, "bad shard index %q", r.PathValue("i"))
	}
	return i, nil
}

// ecRequest parses what an ec route names: the volume, the shard index
// if shard, and the JSON body into body if not nil.
func ecRequest(r *http.Request, shard bool, body any) (vid uint32, i int, err error) {
	if vid, err = parseVid(r); err != nil {
		return 0, 0, err
	}
	if shard {
		if i, err = parseShardIndex(r); err != nil {
			return 0, 0, err
		}
	}
	if body != nil {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(body); err != nil {
			return 0, 0, errors.E(errors.Op("chunk.http.ec"), errors.Invalid, err)
		}
	}
	return vid, i, nil
}

func (s *Store) handlePutIndex(w http.ResponseWriter, r *http.Request) {
	vid, _, err := ecRequest(r, false, nil)
	if err == nil {
		var b []byte
		if b, err = io.ReadAll(io.LimitReader(r.Body, 1<<30)); err == nil {
			var servers []string
			if h := r.Header.Get("Cairn-Ec-Servers"); h != "" {
				servers = strings.Split(h, ",")
			}
			err = s.PutShardIndex(vid, b, servers)
		}
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (s *Store) handleGetIndex(w http.ResponseWriter, r *http.Request) {
	vid, _, err := ecRequest(r, false, nil)
	if err != nil {
		writeError(w, r, err)
		return
	}
	ev := s.ecVolume(vid)
	if ev == nil {
		writeError(w, r, errors.E(errors.Op("chunk.http.GetIndex"), errors.NotExist, volPath(vid), "no shards of the volume here"))
		return
	}
	w.Write(s.liveIndex(ev))
}

func (s *Store) handlePutShard(w http.ResponseWriter, r *http.Request) {
	vid, i, err := ecRequest(r, true, nil)
	if err == nil {
		err = s.PutShard(vid, i, r.Body)
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (s *Store) handleGetShard(w http.ResponseWriter, r *http.Request) {
	vid, i, err := ecRequest(r, true, nil)
	if err != nil {
		writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	off, err1 := strconv.ParseInt(q.Get("off"), 10, 64)
	n, err2 := strconv.ParseInt(q.Get("n"), 10, 64)
	if err1 != nil || err2 != nil || off < 0 || n < 0 || n > 64<<20 {
		writeError(w, r, errors.E(errors.Op("chunk.http.GetShard"), errors.Invalid, "bad off or n"))
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	if handled, err := s.sendShard(w, vid, i, off, n); handled {
		if err != nil {
			panic(http.ErrAbortHandler) // the length promised was not sent
		}
		return
	}
	w.Header().Del("Content-Length")
	bp := getECBuf(n)
	defer putECBuf(bp)
	if err := s.readShard(vid, i, *bp, off); err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
	w.Write(*bp)
}

// handleEncode and handleRebuild run for as long as the volume takes:
// interim answers keep the caller's watchdog content meanwhile.
func (s *Store) handleEncode(w http.ResponseWriter, r *http.Request) {
	var req ecEncodeRequest
	vid, _, err := ecRequest(r, false, &req)
	var size int64
	if err == nil {
		ka := startKeepAlive(w)
		size, err = s.EncodeVolume(r.Context(), vid, req.Gen, req.K, req.M, req.Cell, req.To)
		ka.stop()
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, map[string]int64{"size": size})
}

func (s *Store) handleRebuild(w http.ResponseWriter, r *http.Request) {
	var req ecRebuildRequest
	vid, i, err := ecRequest(r, true, &req)
	if err == nil {
		ka := startKeepAlive(w)
		err = s.RebuildShard(r.Context(), vid, i, ec.Layout{K: req.K, M: req.M, Cell: req.Cell, Size: req.Size}, req.Servers)
		ka.stop()
	}
	if err != nil {
		writeError(w, r, err)
	}
}

func (r *Remote) ecURL(vid uint32, rest string) string {
	return r.base + "/ec/" + strconv.FormatUint(uint64(vid), 10) + rest
}

// PutShardIndex sends a volume's needle index.
func (r *Remote) PutShardIndex(ctx context.Context, vid uint32, b []byte, servers []string) error {
	var hdr http.Header
	if len(servers) > 0 {
		hdr = http.Header{"Cairn-Ec-Servers": {strings.Join(servers, ",")}}
	}
	resp, err := r.do(ctx, "chunk.Remote.PutShardIndex", http.MethodPut, r.ecURL(vid, "/index"), r.token(ctx, capability.Admin, vid, 0), b, hdr)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// ShardIndex fetches a volume's needle index.
func (r *Remote) ShardIndex(ctx context.Context, vid uint32) ([]byte, error) {
	resp, err := r.do(ctx, "chunk.Remote.ShardIndex", http.MethodGet, r.ecURL(vid, "/index"), r.token(ctx, capability.Admin, vid, 0), nil, nil)
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, errors.E(errors.Op("chunk.Remote.ShardIndex"), errors.IO, err)
	}
	return b, nil
}

// PutShard streams a whole shard file of size bytes from body.
func (r *Remote) PutShard(ctx context.Context, vid uint32, i int, body io.Reader, size int64) error {
	return r.putStream(ctx, "chunk.Remote.PutShard", r.ecURL(vid, "/shards/"+strconv.Itoa(i)), vid, body, size)
}

// putStream PUTs size bytes from body to url under an admin capability
// for volume vid (a shard file, whole or staged).
func (r *Remote) putStream(ctx context.Context, op errors.Op, url string, vid uint32, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, body)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	req.ContentLength = size
	if tok := r.token(ctx, capability.Admin, vid, 0); tok != "" {
		req.Header[capability.Header] = []string{tok}
	}
	resp, err := r.c.Do(req)
	if err != nil {
		return errors.E(op, errors.Unavailable, errors.Path(r.addr), err)
	}
	defer drain(resp)
	if resp.StatusCode >= 300 {
		return decodeError(op, resp)
	}
	return nil
}

// ReadShard reads len(p) cell bytes of shard i from off.
func (r *Remote) ReadShard(ctx context.Context, vid uint32, i int, p []byte, off int64) (int, error) {
	const op errors.Op = "chunk.Remote.ReadShard"
	url := r.ecURL(vid, "/shards/"+strconv.Itoa(i)+"?off="+strconv.FormatInt(off, 10)+"&n="+strconv.Itoa(len(p)))
	resp, err := r.do(ctx, op, http.MethodGet, url, r.token(ctx, capability.Admin, vid, 0), nil, nil)
	if err != nil {
		return 0, err
	}
	defer drain(resp)
	n, err := io.ReadFull(resp.Body, p)
	if err != nil {
		return n, errors.E(op, errors.IO, errors.Path(r.addr), err)
	}
	return n, nil
}

// EncodeVolume asks the server to encode its copy of vid; see cairn.Shards.
func (r *Remote) EncodeVolume(ctx context.Context, vid uint32, gen uint64, k, m int, cell int64, to []string) (int64, error) {
	return r.postForSize(ctx, "chunk.Remote.EncodeVolume", vid, "/encode", ecEncodeRequest{Gen: gen, K: k, M: m, Cell: cell, To: to})
}

// postForSize POSTs req as JSON to volume vid's ec route rest and returns
// the {"size": N} it answers: an encode and a compaction answer so, with
// the size of the file they encoded.
func (r *Remote) postForSize(ctx context.Context, op errors.Op, vid uint32, rest string, req any) (int64, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return 0, errors.E(op, errors.Invalid, err)
	}
	resp, err := r.do(ctx, op, http.MethodPost, r.ecURL(vid, rest), r.token(ctx, capability.Admin, vid, 0), body, nil)
	if err != nil {
		return 0, err
	}
	defer drain(resp)
	var out struct {
		Size int64 `json:"size"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, errors.E(op, errors.IO, err)
	}
	return out.Size, nil
}

// RebuildShard asks the server to rebuild shard i; see cairn.Shards.
func (r *Remote) RebuildShard(ctx context.Context, vid uint32, i int, l ec.Layout, servers []string) error {
	const op errors.Op = "chunk.Remote.RebuildShard"
	body, _ := json.Marshal(ecRebuildRequest{K: l.K, M: l.M, Cell: l.Cell, Size: l.Size, Servers: servers})
	resp, err := r.do(ctx, op, http.MethodPost, r.ecURL(vid, "/rebuild/"+strconv.Itoa(i)), r.token(ctx, capability.Admin, vid, 0), body, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// NeedleIndex fetches an encoded volume's needle index as a reader of
// needle key (client/ec.go).
func (r *Remote) NeedleIndex(ctx context.Context, vid uint32, key uint64) ([]byte, error) {
	resp, err := r.do(ctx, "chunk.Remote.NeedleIndex", http.MethodGet, r.ecURL(vid, "/index/"+strconv.FormatUint(key, 10)), r.token(ctx, capability.Read, vid, key), nil, nil)
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<30))
	if err != nil {
		return nil, errors.E(errors.Op("chunk.Remote.NeedleIndex"), errors.IO, err)
	}
	return b, nil
}
