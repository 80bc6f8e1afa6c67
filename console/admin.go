package console

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// The admin pages call meta's admin RPCs; the console serves them to root
// sessions only (Console.root), and meta checks the signed-in user's
// rights again itself: every call names the user (meta.OnBehalfOf).

type serverJSON struct {
	ID            string            `json:"id"`
	Addr          string            `json:"addr"`
	Labels        map[string]string `json:"labels,omitempty"`
	Alive         bool              `json:"alive"`
	Suspect       bool              `json:"suspect"`
	Draining      bool              `json:"draining"`
	LastHeartbeat string            `json:"last_heartbeat,omitempty"`
	Capacity      uint64            `json:"capacity"`
	Free          uint64            `json:"free"`
	Used          uint64            `json:"used"`
	Volumes       uint32            `json:"volumes"`
}

type volumeJSON struct {
	ID          uint32   `json:"id"`
	Servers     []string `json:"servers"`
	Live        uint32   `json:"live"`
	Replication uint32   `json:"replication"`
	Health      string   `json:"health"`
	ReadOnly    bool     `json:"read_only"`
	Size        uint64   `json:"size"`
}

type repairJSON struct {
	Volume     uint32 `json:"volume"`
	Kind       string `json:"kind"`
	From       string `json:"from"`
	To         string `json:"to"`
	BytesDone  uint64 `json:"bytes_done"`
	BytesTotal uint64 `json:"bytes_total"`
	Started    string `json:"started"`
}

func nsTime(ns int64) string {
	if ns == 0 {
		return ""
	}
	return time.Unix(0, ns).UTC().Format(time.RFC3339Nano)
}

// cluster: GET /api/cluster, meta's ClusterStatus for the cluster page.
func (c *Console) cluster(w http.ResponseWriter, r *http.Request, s *session) {
	// Meta decides, as the signed-in user (the console holds no rights).
	st, err := c.cfg.Meta.ClusterStatus(meta.OnBehalfOf(r.Context(), s.Key), &metapb.Empty{})
	if err != nil {
		writeError(w, err)
		return
	}
	out := struct {
		Servers     []serverJSON `json:"servers"`
		Volumes     []volumeJSON `json:"volumes"`
		Repairs     []repairJSON `json:"repairs"`
		RepairsDone uint64       `json:"repairs_done"`
		RepairRate  uint64       `json:"repair_bytes_per_sec"`
		Now         string       `json:"now"`
	}{Servers: []serverJSON{}, Volumes: []volumeJSON{}, Repairs: []repairJSON{},
		RepairsDone: st.RepairsDone, RepairRate: st.RepairBytesPerSec, Now: time.Now().UTC().Format(time.RFC3339Nano)}
	for _, sv := range st.Servers {
		out.Servers = append(out.Servers, serverJSON{ID: sv.Id, Addr: sv.Addr, Labels: sv.Labels, Alive: sv.Alive,
			Suspect: sv.Suspect, Draining: sv.Draining, LastHeartbeat: nsTime(sv.LastHeartbeatNs),
			Capacity: sv.Capacity, Free: sv.Free, Used: sv.Used, Volumes: sv.Volumes})
	}
	for _, v := range st.Volumes {
		vol := v.Volume
		if vol == nil {
			continue
		}
		out.Volumes = append(out.Volumes, volumeJSON{ID: vol.Id, Servers: vol.Servers, Live: v.Live,
			Replication: max(vol.Replication, 1), Health: v.Health, ReadOnly: vol.ReadOnly, Size: vol.Size})
	}
	for _, rp := range st.Repairs {
		out.Repairs = append(out.Repairs, repairJSON{Volume: rp.Volume, Kind: rp.Kind, From: rp.From, To: rp.To,
			BytesDone: rp.BytesDone, BytesTotal: rp.BytesTotal, Started: nsTime(rp.StartedNs)})
	}
	sort.Slice(out.Servers, func(i, j int) bool { return out.Servers[i].Addr < out.Servers[j].Addr })
	writeJSON(w, http.StatusOK, out)
}

type keyJSON struct {
	AccessKey string            `json:"access_key"`
	User      string            `json:"user"`
	Root      bool              `json:"root"`
	Created   string            `json:"created"`
	Grants    map[string]string `json:"grants"`
	Secret    string            `json:"secret,omitempty"` // only in the answer to create
}

func toKeyJSON(k *metapb.S3KeyInfo) keyJSON {
	out := keyJSON{AccessKey: k.AccessKey, User: k.User, Root: k.Root, Created: nsTime(k.CreatedNs), Grants: map[string]string{}}
	for b, a := range k.Grants {
		out.Grants[b] = accessName[a]
	}
	return out
}

var accessName = map[metapb.S3Access]string{metapb.S3Access_S3_NONE: "none", metapb.S3Access_S3_READ: "read", metapb.S3Access_S3_WRITE: "write"}

func parseAccess(s string) (metapb.S3Access, error) {
	for a, n := range accessName {
		if n == s {
			return a, nil
		}
	}
	return 0, errors.E(errors.Invalid, "access is read, write or none")
}

// access serves the Access page (root):
//
//	GET    /api/access/users         users
//	POST   /api/access/users         {"name"}: create
//	DELETE /api/access/users/{name}  remove, with all its keys
//	GET    /api/access/keys          keys and grants (never secrets)
//	POST   /api/access/keys          {"user", "grants": {ns: read|write}}: the secret, shown once
//	DELETE /api/access/keys/{key}    revoke
//	POST   /api/access/grants/{key}  {"ns", "access": read|write|none}
func (c *Console) access(w http.ResponseWriter, r *http.Request, s *session) {
	what, name := r.PathValue("what"), r.PathValue("name")
	ctx := meta.OnBehalfOf(r.Context(), s.Key) // meta checks root itself

	var in struct {
		Name   string            `json:"name"`
		User   string            `json:"user"`
		Grants map[string]string `json:"grants"`
		NS     string            `json:"ns"`
		Access string            `json:"access"`
	}
	if r.Method == http.MethodPost {
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&in); err != nil {
			writeError(w, errors.E(errors.Invalid, "bad JSON body"))
			return
		}
	}
	var out any
	var err error
	switch {
	case what == "users" && name == "" && r.Method == http.MethodGet:
		var l *metapb.S3UserList
		if l, err = c.cfg.Meta.S3ListUsers(ctx, &metapb.Empty{}); err == nil {
			users := []map[string]string{}
			for _, u := range l.Users {
				users = append(users, map[string]string{"name": u.Name, "created": nsTime(u.CreatedNs)})
			}
			out = map[string]any{"users": users}
		}
	case what == "users" && name == "" && r.Method == http.MethodPost:
		_, err = c.cfg.Meta.S3CreateUser(ctx, &metapb.S3User{Name: in.Name})
		out = map[string]string{"name": in.Name}
	case what == "users" && name != "" && r.Method == http.MethodDelete:
		_, err = c.cfg.Meta.S3DeleteUser(ctx, &metapb.S3UserRequest{Name: name})
	case what == "keys" && name == "" && r.Method == http.MethodGet:
		var l *metapb.S3KeyList
		if l, err = c.cfg.Meta.S3ListKeys(ctx, &metapb.S3UserRequest{}); err == nil {
			keys := []keyJSON{}
			for _, k := range l.Keys {
				keys = append(keys, toKeyJSON(k))
			}
			out = map[string]any{"keys": keys}
		}
	case what == "keys" && name == "" && r.Method == http.MethodPost:
		grants := map[string]metapb.S3Access{}
		for ns, a := range in.Grants {
			if grants[ns], err = parseAccess(a); err != nil {
				break
			}
		}
		if err == nil {
			var k *metapb.S3KeySecret
			if k, err = c.cfg.Meta.S3CreateKey(ctx, &metapb.S3CreateKeyRequest{User: in.User, Grants: grants}); err == nil {
				kj := toKeyJSON(k.Key)
				kj.Secret = k.Secret
				out = kj
			}
		}
	case what == "keys" && name != "" && r.Method == http.MethodDelete:
		_, err = c.cfg.Meta.S3DeleteKey(ctx, &metapb.S3KeyRequest{AccessKey: name})
	case what == "grants" && name != "" && r.Method == http.MethodPost:
		var a metapb.S3Access
		if a, err = parseAccess(in.Access); err == nil {
			var k *metapb.S3KeyInfo
			if k, err = c.cfg.Meta.S3Grant(ctx, &metapb.S3GrantRequest{AccessKey: name, Bucket: in.NS, Access: a}); err == nil {
				out = toKeyJSON(k)
			}
		}
	default:
		err = errors.E(errors.Invalid, "no such access request")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	if out == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
