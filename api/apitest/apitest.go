// Package apitest is an in-memory implementation of Cairn's native HTTP
// API, for testing clients of it (package api, the cairn command) without
// a cluster. It is a working server, not a mock: files are stored, listed,
// renamed and served with Range and conditional GET, and it enforces the
// API's authentication and visibility rules. It keeps everything in memory,
// so it is for small data only.
package apitest

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"cairn/pathname"
)

// Server is a running fake gateway.
type Server struct {
	URL       string // http://127.0.0.1:port
	AccessKey string
	SecretKey string

	srv *httptest.Server
	mu  sync.Mutex
	ns  map[string]*namespace
}

type namespace struct {
	name, visibility, owner string
	class                   string // storage class
	created                 time.Time
	files                   map[string]*file
	dirs                    map[string]bool // explicit directories (mkdir)
}

type file struct {
	data    []byte
	mtime   time.Time
	etag    string
	ctype   string
	version uint64
}

// NewServer starts a fake gateway on a loopback port that accepts one key
// pair. Close it when done.
func NewServer(accessKey, secretKey string) *Server {
	s := &Server{AccessKey: accessKey, SecretKey: secretKey, ns: map[string]*namespace{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close stops the server.
func (s *Server) Close() { s.srv.Close() }

// apiError is an error response: status, code and message.
type apiError struct {
	status        int
	code, message string
}

func fail(status int, code, msg string) *apiError { return &apiError{status, code, msg} }

var (
	errNoKey     = fail(404, "NoSuchKey", "no such file or directory")
	errNoNS      = fail(404, "NoSuchNamespace", "no such namespace")
	errUnauth    = fail(401, "Unauthenticated", "credentials required")
	errNotEmpty  = fail(409, "NotEmpty", "not empty")
	errIsDir     = fail(409, "IsDirectory", "is a directory")
	errNotDir    = fail(409, "NotDirectory", "a path component is not a directory")
	errPrecond   = fail(412, "PreconditionFailed", "precondition failed")
	errBadDigest = fail(400, "BadDigest", "Content-MD5 does not match the body")
)

func writeError(w http.ResponseWriter, e *apiError, path string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.status)
	json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{
		"code": e.code, "message": e.message, "path": path}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	nsName, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if nsName == "" {
		if e := s.authorize(r, nil); e != nil {
			writeError(w, e, "")
			return
		}
		s.listNamespaces(w)
		return
	}
	if err := pathname.ValidNamespace(nsName); err != nil {
		writeError(w, fail(400, "InvalidArgument", err.Error()), nsName)
		return
	}
	p, dir, err := pathname.Inside(rest)
	if err != nil {
		writeError(w, fail(400, "InvalidArgument", err.Error()), nsName+"/"+rest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ns := s.ns[nsName]
	if e := s.authorize(r, ns); e != nil {
		writeError(w, e, nsName)
		return
	}
	if !strings.Contains(r.URL.Path[1:], "/") {
		s.serveNamespace(w, r, nsName, ns)
		return
	}
	if ns == nil {
		writeError(w, errNoNS, nsName)
		return
	}
	if e := s.serveFile(w, r, ns, p, dir); e != nil {
		writeError(w, e, nsName+"/"+p)
	}
}

// authorize applies the API's rule: the key pair may do anything, nobody
// else anything but read a public namespace.
func (s *Server) authorize(r *http.Request, ns *namespace) *apiError {
	user, pass, ok := r.BasicAuth()
	if ok {
		if user != s.AccessKey || pass != s.SecretKey {
			return fail(401, "Unauthenticated", "bad access key or secret")
		}
		return nil
	}
	read := r.Method == http.MethodGet || r.Method == http.MethodHead
	if read && ns != nil && ns.visibility == "public" {
		return nil
	}
	return errUnauth
}

func (s *Server) listNamespaces(w http.ResponseWriter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := []map[string]any{}
	for _, ns := range s.ns {
		list = append(list, nsJSON(ns))
	}
	sort.Slice(list, func(i, j int) bool { return list[i]["name"].(string) < list[j]["name"].(string) })
	writeJSON(w, 200, map[string]any{"namespaces": list})
}

func nsJSON(ns *namespace) map[string]any {
	return map[string]any{"name": ns.name, "visibility": ns.visibility, "owner": ns.owner,
		"created": ns.created.Format(time.RFC3339), "storage_class": ns.class}
}

func (s *Server) serveNamespace(w http.ResponseWriter, r *http.Request, name string, ns *namespace) {
	switch r.Method {
	case http.MethodPut:
		vis := r.URL.Query().Get("visibility")
		if vis != "" && vis != "public" && vis != "private" {
			writeError(w, fail(400, "InvalidArgument", "visibility must be public or private"), name)
			return
		}
		// Storage classes as a meta without --class knows them.
		class := r.URL.Query().Get("class")
		if class == "" {
			class = "replicated"
		}
		if class != "replicated" && !strings.HasPrefix(class, "ec-") {
			writeError(w, fail(400, "InvalidArgument", "unknown storage class "+class), name)
			return
		}
		status := 200
		if ns == nil {
			ns = &namespace{name: name, visibility: "private", owner: s.AccessKey, created: time.Now(), class: class,
				files: map[string]*file{}, dirs: map[string]bool{}}
			s.ns[name] = ns
			status = 201
		}
		if vis != "" {
			ns.visibility = vis
		}
		writeJSON(w, status, nsJSON(ns))
	case http.MethodDelete:
		switch {
		case ns == nil:
			writeError(w, errNoNS, name)
		case len(ns.files)+len(ns.dirs) > 0:
			writeError(w, errNotEmpty, name)
		default:
			delete(s.ns, name)
			w.WriteHeader(204)
		}
	default:
		writeError(w, fail(405, "MethodNotAllowed", r.Method+" on a namespace"), name)
	}
}

func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, ns *namespace, p string, dir bool) *apiError {
	q := r.URL.Query()
	switch {
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && (dir || p == ""):
		return s.list(w, r, ns, p)
	case r.Method == http.MethodGet && q.Has("stat"):
		return s.stat(w, ns, p)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		return s.get(w, r, ns, p)
	case r.Method == http.MethodPut && dir:
		return s.mkdir(w, ns, p)
	case r.Method == http.MethodPut:
		return s.put(w, r, ns, p)
	case r.Method == http.MethodPost && q.Has("append"):
		return s.appendFile(w, r, ns, p)
	case r.Method == http.MethodPost && q.Has("rename"):
		return s.rename(w, ns, p, q.Get("rename"))
	case r.Method == http.MethodDelete:
		return s.remove(w, ns, p, q.Has("recursive"))
	}
	return fail(405, "MethodNotAllowed", r.Method+" not allowed here")
}

// isDir reports whether p is a directory, explicit or implied by a file
// below it.
func (ns *namespace) isDir(p string) bool {
	return p == "" || ns.dirs[p] || ns.hasChildren(p)
}

// hasChildren reports whether anything lies below directory p.
func (ns *namespace) hasChildren(p string) bool {
	for name := range ns.files {
		if strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	for name := range ns.dirs {
		if strings.HasPrefix(name, p+"/") {
			return true
		}
	}
	return false
}

// checkParents fails if a parent of p is a file.
func (ns *namespace) checkParents(p string) *apiError {
	for dir, _ := pathname.Parent(p); dir != ""; dir, _ = pathname.Parent(dir) {
		if ns.files[dir] != nil {
			return errNotDir
		}
	}
	return nil
}

// mkdirParents creates p's parent directories: as in a file system, they
// stay when the file is removed.
func (ns *namespace) mkdirParents(p string) {
	for dir, _ := pathname.Parent(p); dir != ""; dir, _ = pathname.Parent(dir) {
		ns.dirs[dir] = true
	}
}

func (s *Server) stat(w http.ResponseWriter, ns *namespace, p string) *apiError {
	if f := ns.files[p]; f != nil {
		writeJSON(w, 200, map[string]any{"name": p, "size": len(f.data), "mtime": f.mtime.Format(time.RFC3339Nano),
			"etag": f.etag, "content_type": f.ctype, "dir": false, "mode": 0o644, "version": f.version})
		return nil
	}
	if ns.isDir(p) {
		writeJSON(w, 200, map[string]any{"name": p, "size": 0, "mtime": ns.created.Format(time.RFC3339Nano),
			"dir": true, "mode": 0o755, "version": 1})
		return nil
	}
	return errNoKey
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, ns *namespace, p string) *apiError {
	f := ns.files[p]
	if f == nil {
		if ns.isDir(p) {
			return s.list(w, r, ns, p) // as the gateway does
		}
		return errNoKey
	}
	w.Header().Set("ETag", `"`+f.etag+`"`)
	w.Header().Set("Content-Type", f.ctype)
	w.Header().Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, p, f.mtime, bytes.NewReader(f.data))
	return nil
}

func (s *Server) mkdir(w http.ResponseWriter, ns *namespace, p string) *apiError {
	if ns.files[p] != nil {
		return fail(409, "AlreadyExists", "a file has this name")
	}
	if e := ns.checkParents(p); e != nil {
		return e
	}
	ns.dirs[p] = true
	ns.mkdirParents(p)
	writeJSON(w, 201, map[string]any{"path": p, "size": 0, "etag": ""})
	return nil
}

// readBody reads a request body, checking Content-MD5 if given.
func readBody(r *http.Request) ([]byte, *apiError) {
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fail(400, "InvalidArgument", "reading body: "+err.Error())
	}
	if want := r.Header.Get("Content-MD5"); want != "" {
		sum := md5.Sum(data)
		if want != base64.StdEncoding.EncodeToString(sum[:]) {
			return nil, errBadDigest
		}
	}
	return data, nil
}

func (s *Server) put(w http.ResponseWriter, r *http.Request, ns *namespace, p string) *apiError {
	if ns.isDir(p) {
		return errIsDir
	}
	if e := ns.checkParents(p); e != nil {
		return e
	}
	old := ns.files[p]
	if r.Header.Get("If-None-Match") == "*" && old != nil {
		return errPrecond
	}
	if m := r.Header.Get("If-Match"); m != "" && (old == nil || m != `"`+old.etag+`"`) {
		return errPrecond
	}
	data, e := readBody(r)
	if e != nil {
		return e
	}
	f := newFile(data, r.Header.Get("Content-Type"), old)
	ns.files[p] = f
	ns.mkdirParents(p)
	w.Header().Set("ETag", `"`+f.etag+`"`)
	status := 201
	if old != nil {
		status = 200
	}
	writeJSON(w, status, map[string]any{"path": p, "size": len(data), "etag": f.etag})
	return nil
}

func newFile(data []byte, ctype string, old *file) *file {
	sum := md5.Sum(data)
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	f := &file{data: data, mtime: time.Now(), etag: hex.EncodeToString(sum[:]), ctype: ctype, version: 1}
	if old != nil {
		f.version = old.version + 1
	}
	return f
}

func (s *Server) appendFile(w http.ResponseWriter, r *http.Request, ns *namespace, p string) *apiError {
	if ns.isDir(p) {
		return errIsDir
	}
	if e := ns.checkParents(p); e != nil {
		return e
	}
	data, e := readBody(r)
	if e != nil {
		return e
	}
	old := ns.files[p]
	var prev []byte
	ctype := ""
	if old != nil {
		prev, ctype = old.data, old.ctype
	}
	f := newFile(append(append([]byte(nil), prev...), data...), ctype, old)
	ns.files[p] = f
	ns.mkdirParents(p)
	writeJSON(w, 200, map[string]any{"size": len(f.data)})
	return nil
}

func (s *Server) rename(w http.ResponseWriter, ns *namespace, from, to string) *apiError {
	to, _, err := pathname.Clean(to)
	if err != nil || to == "" {
		return fail(400, "InvalidArgument", "bad rename target")
	}
	if f := ns.files[from]; f != nil {
		if ns.isDir(to) {
			return errIsDir
		}
		delete(ns.files, from)
		ns.files[to] = f
		ns.mkdirParents(to)
		return s.stat(w, ns, to)
	}
	if !ns.isDir(from) {
		return errNoKey
	}
	moveTree(ns, from, to)
	ns.mkdirParents(to)
	return s.stat(w, ns, to)
}

// moveTree renames directory from, and everything below it, to to.
func moveTree(ns *namespace, from, to string) {
	for name, f := range ns.files {
		if strings.HasPrefix(name, from+"/") {
			delete(ns.files, name)
			ns.files[to+name[len(from):]] = f
		}
	}
	for name := range ns.dirs {
		if name == from || strings.HasPrefix(name, from+"/") {
			delete(ns.dirs, name)
			ns.dirs[to+name[len(from):]] = true
		}
	}
}

func (s *Server) remove(w http.ResponseWriter, ns *namespace, p string, recursive bool) *apiError {
	if ns.files[p] != nil {
		delete(ns.files, p)
		w.WriteHeader(204)
		return nil
	}
	if !ns.isDir(p) {
		return errNoKey
	}
	if ns.hasChildren(p) && !recursive {
		return errNotEmpty
	}
	for name := range ns.files {
		if strings.HasPrefix(name, p+"/") {
			delete(ns.files, name)
		}
	}
	for name := range ns.dirs {
		if name == p || strings.HasPrefix(name, p+"/") {
			delete(ns.dirs, name)
		}
	}
	w.WriteHeader(204)
	return nil
}

type entry struct {
	Name  string `json:"name"`
	Size  int    `json:"size"`
	Mtime string `json:"mtime"`
	ETag  string `json:"etag"`
	Dir   bool   `json:"dir"`
}

// list serves a listing: everything under prefix in path order, rolled up
// at the delimiter, a page of limit entries after cursor.
func (s *Server) list(w http.ResponseWriter, r *http.Request, ns *namespace, p string) *apiError {
	q := r.URL.Query()
	prefix, delim := q.Get("prefix"), q.Get("delimiter")
	if p != "" {
		prefix, delim = p+"/", "/"
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	all := ns.entries(prefix, delim)
	cursor := q.Get("cursor")
	i := sort.Search(len(all), func(i int) bool { return all[i].Name > cursor })
	page := all[i:]
	next := ""
	if len(page) > limit {
		page = page[:limit]
		next = page[limit-1].Name
	}
	writeJSON(w, 200, map[string]any{"entries": page, "next_cursor": next})
	return nil
}

func (ns *namespace) entries(prefix, delim string) []entry {
	seen := map[string]entry{}
	add := func(name string, e entry) {
		rest := name[len(prefix):]
		if i := strings.Index(rest, delim); delim != "" && i >= 0 {
			d := prefix + rest[:i]
			seen[d] = entry{Name: d, Dir: true, Mtime: ns.created.Format(time.RFC3339Nano)}
			return
		}
		seen[name] = e
	}
	for name, f := range ns.files {
		if strings.HasPrefix(name, prefix) {
			add(name, entry{Name: name, Size: len(f.data), Mtime: f.mtime.Format(time.RFC3339Nano), ETag: f.etag})
		}
	}
	for name := range ns.dirs {
		// Without a delimiter the listing holds the leaves, as the
		// gateway's: files and empty directories.
		leaf := delim != "" || !ns.hasChildren(name)
		if strings.HasPrefix(name, prefix) && len(name) > len(prefix) && leaf {
			add(name, entry{Name: name, Dir: true, Mtime: ns.created.Format(time.RFC3339Nano)})
		}
	}
	out := make([]entry, 0, len(seen))
	for _, e := range seen {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
