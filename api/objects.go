package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"cairn/errors"
)

// Stat describes a file or directory.
type Stat struct {
	Name        string    `json:"name"`
	Size        int64     `json:"size"`
	Mtime       time.Time `json:"mtime"`
	ETag        string    `json:"etag"`
	ContentType string    `json:"content_type"`
	Dir         bool      `json:"dir"`
	Mode        uint32    `json:"mode"`
	Version     uint64    `json:"version"`
	// StorageClass is the file's class when it is not its namespace's
	// (automatic tiering moved it).
	StorageClass string `json:"storage_class,omitempty"`
}

// PutOptions are the optional parts of a Put. The zero value is a plain
// overwrite.
type PutOptions struct {
	ContentType string
	// ContentMD5 is the MD5 of the body (16 bytes); the server refuses a
	// body that does not match (errors.BadDigest).
	ContentMD5 []byte
	// IfMatch replaces the file only if its ETag is this one
	// (errors.Precondition otherwise).
	IfMatch string
	// Create fails the Put with errors.Precondition if the file exists
	// (If-None-Match: *).
	Create bool
}

// PutResult is what the server stored.
type PutResult struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	ETag string `json:"etag"`
}

// Put stores size bytes read from r as ns/p, replacing any file there.
// size -1 means unknown: the body is sent chunked until r's EOF. Parent
// directories are created as needed.
func (c *Client) Put(ctx context.Context, ns, p string, r io.Reader, size int64, opts PutOptions) (*PutResult, error) {
	const op = errors.Op("api.Put")
	h := http.Header{}
	if opts.ContentType != "" {
		h.Set("Content-Type", opts.ContentType)
	}
	if opts.ContentMD5 != nil {
		h.Set("Content-MD5", base64.StdEncoding.EncodeToString(opts.ContentMD5))
	}
	if opts.IfMatch != "" {
		h.Set("If-Match", quoteETag(opts.IfMatch))
	}
	if opts.Create {
		h.Set("If-None-Match", "*")
	}
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + p, method: http.MethodPut,
		url: c.objectURL(ns, p, ""), body: r, size: size, header: h})
	if err != nil {
		return nil, err
	}
	var res PutResult
	if err := decodeJSON(op, ns+"/"+p, resp, &res); err != nil {
		return nil, err
	}
	res.ETag = unquoteETag(res.ETag)
	return &res, nil
}

// GetOptions select part of a file or make a Get conditional.
type GetOptions struct {
	// Offset and Length select a byte range; Length <= 0 reads to the end.
	Offset, Length int64
	// IfNoneMatch makes the Get fail with errors.Precondition (code
	// NotModified) if the file's ETag is still this one.
	IfNoneMatch string
}

// Get opens ns/p for reading. The caller must close the returned body. The
// Stat is built from the response headers: Size is the whole file's size
// even when a range was asked for.
func (c *Client) Get(ctx context.Context, ns, p string, opts GetOptions) (io.ReadCloser, *Stat, error) {
	const op = errors.Op("api.Get")
	h := http.Header{}
	if opts.Offset > 0 || opts.Length > 0 {
		end := ""
		if opts.Length > 0 {
			end = strconv.FormatInt(opts.Offset+opts.Length-1, 10)
		}
		h.Set("Range", "bytes="+strconv.FormatInt(opts.Offset, 10)+"-"+end)
	}
	if opts.IfNoneMatch != "" {
		h.Set("If-None-Match", quoteETag(opts.IfNoneMatch))
	}
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + p, method: http.MethodGet,
		url: c.objectURL(ns, p, ""), header: h})
	if err != nil {
		return nil, nil, err
	}
	if resp.Header.Get("ETag") == "" && resp.StatusCode == http.StatusOK {
		// Every file has an ETag; the gateway answers a GET of a directory
		// with its listing, which must not pass for the file's content.
		drain(resp)
		return nil, nil, errors.E(op, errors.Path(ns+"/"+p), errors.IsDir, "is a directory")
	}
	return resp.Body, statFromHeader(p, resp), nil
}

// statFromHeader fills a Stat from a GET's headers.
func statFromHeader(p string, resp *http.Response) *Stat {
	st := &Stat{
		Name:        p,
		Size:        resp.ContentLength,
		ETag:        unquoteETag(resp.Header.Get("ETag")),
		ContentType: resp.Header.Get("Content-Type"),
	}
	if t, err := http.ParseTime(resp.Header.Get("Last-Modified")); err == nil {
		st.Mtime = t
	}
	if resp.StatusCode == http.StatusPartialContent {
		// Content-Range: bytes 0-99/1234
		cr := resp.Header.Get("Content-Range")
		if i := strings.LastIndexByte(cr, '/'); i >= 0 {
			if n, err := strconv.ParseInt(cr[i+1:], 10, 64); err == nil {
				st.Size = n
			}
		}
	}
	return st
}

// Stat returns the attributes of ns/p, a file or a directory.
func (c *Client) Stat(ctx context.Context, ns, p string) (*Stat, error) {
	const op = errors.Op("api.Stat")
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + p, method: http.MethodGet,
		url: c.objectURL(ns, p, "stat")})
	if err != nil {
		return nil, err
	}
	var st Stat
	if err := decodeJSON(op, ns+"/"+p, resp, &st); err != nil {
		return nil, err
	}
	st.ETag = unquoteETag(st.ETag)
	return &st, nil
}

// Append adds size bytes from r (-1: until EOF) to the end of ns/p in one
// atomic step, creating the file if it is missing, and returns the new size.
func (c *Client) Append(ctx context.Context, ns, p string, r io.Reader, size int64) (int64, error) {
	const op = errors.Op("api.Append")
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + p, method: http.MethodPost,
		url: c.objectURL(ns, p, "append"), body: r, size: size})
	if err != nil {
		return 0, err
	}
	var res struct {
		Size int64 `json:"size"`
	}
	if err := decodeJSON(op, ns+"/"+p, resp, &res); err != nil {
		return 0, err
	}
	return res.Size, nil
}

// Delete removes the file or empty directory ns/p.
func (c *Client) Delete(ctx context.Context, ns, p string) error {
	return c.delete(ctx, "api.Delete", ns, p, "")
}

// DeleteAll removes ns/p and, if it is a directory, everything under it.
func (c *Client) DeleteAll(ctx context.Context, ns, p string) error {
	return c.delete(ctx, "api.DeleteAll", ns, p, "recursive")
}

func (c *Client) delete(ctx context.Context, op errors.Op, ns, p, query string) error {
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + p, method: http.MethodDelete,
		url: c.objectURL(ns, p, query)})
	if err != nil {
		return err
	}
	return drain(resp)
}

// Rename moves ns/from to ns/to (replacing a file there) and returns the
// Stat of the new path. Both must be in one namespace.
func (c *Client) Rename(ctx context.Context, ns, from, to string) (*Stat, error) {
	const op = errors.Op("api.Rename")
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + from, method: http.MethodPost,
		url: c.objectURL(ns, from, "rename="+url.QueryEscape("/"+to))})
	if err != nil {
		return nil, err
	}
	var st Stat
	if err := decodeJSON(op, ns+"/"+to, resp, &st); err != nil {
		return nil, err
	}
	st.ETag = unquoteETag(st.ETag)
	return &st, nil
}

// Mkdir creates directory ns/p and any missing parents; an existing
// directory is not an error.
func (c *Client) Mkdir(ctx context.Context, ns, p string) error {
	const op = errors.Op("api.Mkdir")
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + p, method: http.MethodPut,
		url: c.objectURL(ns, p, "") + "/"})
	if err != nil {
		return err
	}
	return drain(resp)
}

// Entry is one line of a listing. A directory shown because of a
// delimiter has Dir set and no size.
type Entry struct {
	Name  string    `json:"name"` // the full path inside the namespace
	Size  int64     `json:"size"`
	Mtime time.Time `json:"mtime"`
	ETag  string    `json:"etag"`
	Dir   bool      `json:"dir"`
}

// ListOptions select what List returns.
type ListOptions struct {
	Prefix    string // only paths that begin with Prefix
	Delimiter string // "/" rolls everything below the next '/' into one directory entry
	Limit     int    // entries per page; 0 is the server's default
	Cursor    string // from a previous Page's NextCursor
}

// Page is one page of a listing; NextCursor is "" on the last page.
type Page struct {
	Entries    []Entry `json:"entries"`
	NextCursor string  `json:"next_cursor"`
}

// List returns one page of the entries of ns, in path order.
func (c *Client) List(ctx context.Context, ns string, opts ListOptions) (*Page, error) {
	const op = errors.Op("api.List")
	q := url.Values{}
	if opts.Prefix != "" {
		q.Set("prefix", opts.Prefix)
	}
	// Always sent: the gateway's default is "/", and "" means no rolling up.
	q.Set("delimiter", opts.Delimiter)
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	u := c.objectURL(ns, "", "") + "/"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	resp, err := c.do(ctx, call{op: op, path: ns + "/" + opts.Prefix, method: http.MethodGet, url: u})
	if err != nil {
		return nil, err
	}
	var page Page
	if err := decodeJSON(op, ns+"/"+opts.Prefix, resp, &page); err != nil {
		return nil, err
	}
	for i := range page.Entries {
		page.Entries[i].ETag = unquoteETag(page.Entries[i].ETag)
	}
	return &page, nil
}

// Entries lists every entry that opts selects, following cursors page by
// page. It stops at the first error, which it yields with a zero Entry.
func (c *Client) Entries(ctx context.Context, ns string, opts ListOptions) iter.Seq2[Entry, error] {
	return func(yield func(Entry, error) bool) {
		for {
			page, err := c.List(ctx, ns, opts)
			if err != nil {
				yield(Entry{}, err)
				return
			}
			for _, e := range page.Entries {
				if !yield(e, nil) {
					return
				}
			}
			if page.NextCursor == "" || page.NextCursor == opts.Cursor {
				return
			}
			opts.Cursor = page.NextCursor
		}
	}
}

// drain reads what is left of a response so its connection can be reused.
func drain(resp *http.Response) error {
	_, err := io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	if err != nil {
		return errors.E(errors.IO, fmt.Errorf("reading response: %w", err))
	}
	return nil
}

// unquoteETag strips the quotes (and a weak W/ prefix) of an HTTP ETag so
// that the header and the JSON bodies show the same string.
func unquoteETag(s string) string {
	s = strings.TrimPrefix(s, "W/")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		return s[1 : len(s)-1]
	}
	return s
}

func quoteETag(s string) string {
	if s == "*" || strings.HasPrefix(s, `"`) || strings.HasPrefix(s, `W/"`) {
		return s
	}
	return `"` + s + `"`
}
