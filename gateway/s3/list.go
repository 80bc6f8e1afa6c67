package s3

import (
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
)

// Listing walks meta's List pages (seek-based, constant memory) and
// groups keys into common prefixes. With delimiter "/" meta lists one
// directory and its sub-directories are the common prefixes; with any
// other delimiter the listing is recursive and grouped here. Continuation
// tokens are meta's cursor after the last key consumed, plus the last
// common prefix returned so that the next page does not repeat it.

const maxKeysLimit = 1000

func encodeToken(cursor, lastCP string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursor + "\x00" + lastCP))
}

func decodeToken(t string) (cursor, lastCP string, err error) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil {
		return "", "", apiErr(http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect")
	}
	cursor, lastCP, ok := strings.Cut(string(b), "\x00")
	if !ok {
		return "", "", apiErr(http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect")
	}
	return cursor, lastCP, nil
}

// lister produces one page of a listing.
type lister struct {
	s                 *Server
	q                 *request
	prefix, delimiter string
	maxKeys           int
	cursor, lastCP    string
	contents          []*metapb.ListEntry
	prefixes          []string
	truncated         bool
	nextCursor        string
	last              string // last key or common prefix returned
}

func (l *lister) run() error {
	if l.maxKeys == 0 {
		return nil
	}
	delimited := l.delimiter == "/"
	metaDelim := ""
	if delimited {
		metaDelim = "/"
	}
	cursor := l.cursor
	for {
		// One entry past the room left tells whether the page is
		// truncated, without a second call for it. Grouping by another
		// delimiter than "/" may fold any number of entries into one.
		limit := l.maxKeys - len(l.contents) - len(l.prefixes) + 1
		if l.delimiter != "" && !delimited {
			limit = maxKeysLimit
		}
		resp, err := l.s.client.List(l.q.ctx(), &metapb.ListRequest{
			Ns: l.q.bucket, Prefix: l.prefix, Delimiter: metaDelim, Cursor: cursor,
			Limit: uint32(limit),
		})
		if errors.Is(errors.Invalid, err) && l.cursor != "" {
			return apiErr(http.StatusBadRequest, "InvalidArgument", "The continuation token provided is incorrect")
		}
		if errors.Is(errors.Invalid, err) {
			return nil // a prefix no key can have: nothing to list
		}
		if err != nil {
			return notExistAs(err, errNoSuchBucket())
		}
		for _, e := range resp.Entries {
			key, cp := e.Name, ""
			switch {
			case delimited:
				if e.Dir {
					cp = key
				}
			case l.delimiter != "":
				if i := strings.Index(key[len(l.prefix):], l.delimiter); i >= 0 {
					cp = key[:len(l.prefix)+i+len(l.delimiter)]
				}
			}
			if cp != "" && cp == l.lastCP {
				continue // rest of a group already returned
			}
			if len(l.contents)+len(l.prefixes) == l.maxKeys {
				l.truncated = true
				return nil
			}
			if cp != "" {
				l.prefixes = append(l.prefixes, cp)
				l.lastCP, l.last = cp, cp
			} else {
				l.contents = append(l.contents, e)
				l.last = key
			}
			l.nextCursor, _ = meta.ListCursorAfter(delimited, l.prefix, key)
		}
		if resp.NextCursor == "" {
			return nil
		}
		cursor = resp.NextCursor
	}
}

// listKind is which listing a request asks for.
type listKind uint8

const (
	listV1 listKind = iota
	listV2
	listVersions
)

// page runs one page of a listing for the request's parameters of kind k
// and returns it with the encoder that encoding-type asks for.
func (s *Server) page(q *request, k listKind) (l *lister, esc func(string) string, err error) {
	l, esc, empty, err := s.pageSetup(q, k)
	if err == nil && !empty {
		err = l.run()
	}
	if err != nil {
		return nil, nil, err
	}
	return l, esc, nil
}

// pageSetup reads a listing's parameters; empty says that no key can
// match (the lister need not run).
func (s *Server) pageSetup(q *request, k listKind) (l *lister, esc func(string) string, empty bool, err error) {
	v := q.query
	l = &lister{s: s, q: q, prefix: v.Get("prefix"), delimiter: v.Get("delimiter"), maxKeys: maxKeysLimit}
	if mk := v.Get("max-keys"); mk != "" {
		n, err := strconv.Atoi(mk)
		if err != nil || n < 0 {
			return nil, nil, false, apiErr(http.StatusBadRequest, "InvalidArgument", "max-keys must be a non-negative integer")
		}
		l.maxKeys = min(n, maxKeysLimit)
	}
	esc = func(s string) string { return s }
	switch v.Get("encoding-type") {
	case "":
	case "url":
		esc = urlEncode
	default:
		return nil, nil, false, apiErr(http.StatusBadRequest, "InvalidArgument", "Invalid Encoding Method specified in Request")
	}
	delimited := l.delimiter == "/"
	after := map[listKind]string{listV1: v.Get("marker"), listV2: v.Get("start-after"), listVersions: v.Get("key-marker")}[k]
	// No key starts with '/' (see cleanKey), and meta would read the
	// prefix "/" as the bucket's root.
	empty = strings.HasPrefix(l.prefix, "/")
	if t := v.Get("continuation-token"); k == listV2 && t != "" {
		if l.cursor, l.lastCP, err = decodeToken(t); err != nil {
			return nil, nil, false, err
		}
	} else if after != "" {
		var ok bool
		l.cursor, ok = meta.ListCursorAfter(delimited, l.prefix, after)
		empty = empty || !ok
		if l.delimiter != "" && strings.HasSuffix(after, l.delimiter) {
			l.lastCP = after // a marker that is a common prefix: skip its group
		}
	}
	return l, esc, empty, nil
}

func (s *Server) listObjects(q *request, v2 bool) error {
	n, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	kind := listV1
	if v2 {
		kind = listV2
	}
	l, esc, err := s.page(q, kind)
	if err != nil {
		return err
	}
	v := q.query
	out := listBucketResult{
		Xmlns: s3NS, Name: q.bucket, Prefix: esc(l.prefix), MaxKeys: l.maxKeys,
		Delimiter: esc(l.delimiter), EncodingType: v.Get("encoding-type"), IsTruncated: l.truncated,
	}
	var own *owner
	if !v2 || v.Get("fetch-owner") == "true" {
		o := ownerOf(n.Owner)
		own = &o
	}
	for _, e := range l.contents {
		o := entryXML(e, esc, own)
		o.StorageClass = s.classes.name(n, e.Inode) // class.go
		out.Contents = append(out.Contents, o)
	}
	for _, p := range l.prefixes {
		out.CommonPrefixes = append(out.CommonPrefixes, commonPrefix{Prefix: esc(p)})
	}
	if v2 {
		kc := len(l.contents) + len(l.prefixes)
		out.KeyCount = &kc
		out.StartAfter = esc(v.Get("start-after"))
		out.ContinuationToken = v.Get("continuation-token")
		if l.truncated {
			out.NextContinuationToken = encodeToken(l.nextCursor, l.lastCP)
		}
	} else {
		m := esc(v.Get("marker"))
		out.Marker = &m
		if l.truncated {
			out.NextMarker = esc(l.last)
		}
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

func entryXML(e *metapb.ListEntry, esc func(string) string, own *owner) objectXML {
	o := objectXML{Key: esc(e.Name), StorageClass: "STANDARD", Owner: own}
	if e.Inode != nil {
		o.LastModified = isoTime(e.Inode.MtimeNs)
		o.ETag = etagOf(e.Inode)
		if !e.Dir {
			o.Size = e.Inode.Size
		}
	} else {
		o.LastModified = time.Unix(0, 0).UTC().Format("2006-01-02T15:04:05.000Z")
	}
	return o
}

// urlEncode is S3's encoding-type=url: every byte but the unreserved ones
// and '/' as %XX, a space as '+'. Escaping '/' (url.QueryEscape) made
// prefixes and delimiters come back as %2F, which clients do not undo.
func urlEncode(s string) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '_', c == '.', c == '~', c == '/':
			b.WriteByte(c)
		case c == ' ':
			b.WriteByte('+')
		default:
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
		}
	}
	return b.String()
}
