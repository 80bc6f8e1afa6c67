package chunk

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"cairn"
	"cairn/capability"
	"cairn/errors"
	"cairn/volume"
)

var _ cairn.Replicas = (*Remote)(nil)

// clusterRoutes are the routes replication adds to the data plane:
//
//	PUT  /admin/volumes/{vid}/replicas?gen=G&addrs=a,b,c   SetReplicas -> 204
//	GET  /admin/volumes/{vid}/needles                      [{"k":key,"n":size}...]
//	POST /admin/volumes/{vid}/copy?gen=G&from=ADDR&rate=N  CopyFrom -> 204
//	POST /admin/volumes/{vid}/seal?gen=G                   Seal -> 204
//	POST /v/{vid}/{key}/repair                             RepairNeedle -> 204
func (s *Store) clusterRoutes(mux *http.ServeMux) {
	admin := need{capability.Admin, true, false}
	mux.HandleFunc("PUT /admin/volumes/{vid}/replicas", s.guard(admin, func(w http.ResponseWriter, r *http.Request) {
		s.admin(w, r, "chunk.http.SetReplicas", func(vid uint32, gen uint64) error {
			return s.SetReplicas(r.Context(), vid, gen, splitAddrs(r.URL.Query().Get("addrs")))
		})
	}))
	mux.HandleFunc("POST /admin/volumes/{vid}/copy", s.guard(admin, func(w http.ResponseWriter, r *http.Request) {
		s.admin(w, r, "chunk.http.CopyFrom", func(vid uint32, gen uint64) error {
			rate, _ := strconv.ParseInt(r.URL.Query().Get("rate"), 10, 64)
			return s.CopyFrom(r.Context(), vid, gen, r.URL.Query().Get("from"), rate)
		})
	}))
	mux.HandleFunc("POST /admin/volumes/{vid}/seal", s.guard(admin, func(w http.ResponseWriter, r *http.Request) {
		s.admin(w, r, "chunk.http.Seal", func(vid uint32, gen uint64) error {
			return s.Seal(r.Context(), vid, gen)
		})
	}))
	mux.HandleFunc("GET /admin/volumes/{vid}/needles", s.guard(admin, func(w http.ResponseWriter, r *http.Request) {
		vid, err := parseVid(r)
		var ns []volume.NeedleInfo
		if err == nil {
			ns, err = s.Needles(r.Context(), vid)
		}
		if err != nil {
			writeError(w, r, errors.E(errors.Op("chunk.http.Needles"), err))
			return
		}
		writeJSON(w, ns)
	}))
	// A reader that got a corrupt copy asks for its repair with its read
	// capability: the repair only restores the needle from a replica.
	mux.HandleFunc("POST /v/{vid}/{key}/repair", s.guard(need{capability.Read, true, true}, func(w http.ResponseWriter, r *http.Request) {
		vid, err := parseVid(r)
		if err == nil {
			var key uint64
			if key, err = parseKey(r); err == nil {
				err = s.RepairNeedle(r.Context(), vid, key)
			}
		}
		if err != nil {
			writeError(w, r, errors.E(errors.Op("chunk.http.Repair"), err))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
}

// admin runs an admin call that takes a volume id and a generation.
func (s *Store) admin(w http.ResponseWriter, r *http.Request, op errors.Op, fn func(vid uint32, gen uint64) error) {
	vid, err := parseVid(r)
	if err == nil {
		var gen uint64
		if gen, err = parseGen(r); err == nil {
			err = fn(vid, gen)
		}
	}
	if err != nil {
		writeError(w, r, errors.E(op, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func splitAddrs(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

func (r *Remote) volURL(vid uint32) string {
	return r.base + "/admin/volumes/" + strconv.FormatUint(uint64(vid), 10)
}

// SetReplicas records a volume's replica set on the server; see cairn.Replicas.
func (r *Remote) SetReplicas(ctx context.Context, vid uint32, g uint64, addrs []string) error {
	resp, err := r.do(ctx, "chunk.Remote.SetReplicas", http.MethodPut,
		r.volURL(vid)+"/replicas"+gen(g)+"&addrs="+strings.Join(addrs, ","), r.token(ctx, capability.Admin, vid, 0), []byte{}, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// CopyFrom has the server copy a volume from another; see cairn.Replicas.
func (r *Remote) CopyFrom(ctx context.Context, vid uint32, g uint64, from string, rate int64) error {
	resp, err := r.do(ctx, "chunk.Remote.CopyFrom", http.MethodPost,
		r.volURL(vid)+"/copy"+gen(g)+"&from="+from+"&rate="+strconv.FormatInt(rate, 10), r.token(ctx, capability.Admin, vid, 0), []byte{}, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// Seal has the server seal its copy of a volume; see cairn.Replicas.
func (r *Remote) Seal(ctx context.Context, vid uint32, g uint64) error {
	resp, err := r.do(ctx, "chunk.Remote.Seal", http.MethodPost, r.volURL(vid)+"/seal"+gen(g), r.token(ctx, capability.Admin, vid, 0), []byte{}, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}

// Needles lists a volume's live needles.
func (r *Remote) Needles(ctx context.Context, vid uint32) ([]volume.NeedleInfo, error) {
	const op errors.Op = "chunk.Remote.Needles"
	resp, err := r.do(ctx, op, http.MethodGet, r.volURL(vid)+"/needles", r.token(ctx, capability.Admin, vid, 0), nil, nil)
	if err != nil {
		return nil, err
	}
	defer drain(resp)
	var out []volume.NeedleInfo
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, errors.E(op, errors.IO, err)
	}
	return out, nil
}

// RepairNeedle asks the server to restore a needle it served corrupt from
// another replica.
func (r *Remote) RepairNeedle(ctx context.Context, vid uint32, key uint64) error {
	resp, err := r.do(ctx, "chunk.Remote.RepairNeedle", http.MethodPost, r.needleURL(vid, key)+"/repair", r.token(ctx, capability.Read, vid, key), []byte{}, nil)
	if err != nil {
		return err
	}
	drain(resp)
	return nil
}
