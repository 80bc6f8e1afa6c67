package s3

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"cairn/byterange"
	"cairn/client"
	"cairn/errors"
	"cairn/internal/cork"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// Objects are files: key "a/b/c" is the file c in directory a/b of the
// bucket's namespace, so it is the same file over every API. A key ending
// in '/' is a directory (an S3 "folder marker"). Keys that a file system
// cannot name ("a//b", "./a", a leading '/') are refused, not rewritten.

// emptyMD5 is the ETag of an empty object (and of a folder marker).
const emptyMD5 = "d41d8cd98f00b204e9800998ecf8427e"

// storedHeaders are the standard headers kept with an object and sent
// back on GET.
var storedHeaders = []string{"Cache-Control", "Content-Disposition", "Content-Encoding", "Content-Language", "Expires"}

// maxUserMeta is S3's limit on the size of x-amz-meta-* headers.
const maxUserMeta = 2 << 10

func cleanKey(key string) (p string, dir bool, err error) {
	if strings.HasPrefix(key, "/") {
		return "", false, apiErr(http.StatusBadRequest, "InvalidArgument", "object keys starting with '/' are not supported")
	}
	p, dir, err = pathname.Clean(key)
	if err != nil {
		if errors.KindOf(err) == errors.NameTooLong {
			return "", false, apiErr(http.StatusBadRequest, "KeyTooLongError", "Your key is too long")
		}
		return "", false, apiErr(http.StatusBadRequest, "InvalidArgument", "object key not supported: "+err.Error())
	}
	return p, dir, nil
}

func etagOf(ino *metapb.Inode) string {
	if ino.Type == metapb.FileType_DIRECTORY {
		return `"` + emptyMD5 + `"`
	}
	if ino.Etag != "" {
		return `"` + ino.Etag + `"`
	}
	return `"` + strconv.FormatUint(ino.Ino, 16) + "-" + strconv.FormatUint(ino.Version, 10) + `"`
}

// objectMeta reads what a PUT (or CreateMultipartUpload) stores with the
// object from its headers.
func objectMeta(h http.Header) (ct string, user, std map[string]string, err error) {
	ct = h.Get("Content-Type")
	size := 0
	for k, v := range h {
		if name, ok := strings.CutPrefix(k, "X-Amz-Meta-"); ok && len(v) > 0 {
			if user == nil {
				user = map[string]string{}
			}
			name = strings.ToLower(name)
			user[name] = strings.Join(v, ",")
			size += len(name) + len(user[name])
		}
	}
	if size > maxUserMeta {
		return "", nil, nil, apiErr(http.StatusBadRequest, "MetadataTooLarge", "Your metadata headers exceed the maximum allowed metadata size (2 KB).")
	}
	for _, k := range storedHeaders {
		v := h.Get(k)
		if k == "Content-Encoding" {
			v = storedContentEncoding(h)
		}
		if v != "" {
			if std == nil {
				std = map[string]string{}
			}
			std[k] = v
		}
	}
	return ct, user, std, nil
}

func (s *Server) putObject(q *request) error {
	if err := s.authorizeObjectWrite(q); err != nil {
		return err
	}
	p, dir, err := cleanKey(q.key)
	if err != nil {
		return err
	}
	if dir {
		return s.putFolder(q, p)
	}
	ct, user, std, err := objectMeta(q.r.Header)
	if err != nil {
		return err
	}
	class, err := s.withObjectClass(q)
	if err != nil {
		return err
	}
	tags, err := parseTagging(q.r.Header.Get("X-Amz-Tagging"))
	if err != nil {
		return err
	}
	inm, err := ifNoneMatchStar(q.r.Header)
	if err != nil {
		return err
	}
	if hasLockHeaders(q.r.Header) && !s.bucketNS(q).GetS3ObjectLock() {
		return errInvalidRequest("Bucket is missing Object Lock Configuration")
	}
	retention, hold, err := lockHeadersIn(q.r.Header)
	if err != nil {
		return err
	}
	st, err := s.store(q, q.bucket)
	if err != nil {
		return err
	}
	ino, err := s.client.CommitStored(q.ctx(), q.bucket, p, st, client.CommitOptions{
		PutOptions: client.PutOptions{
			ContentType: ct, UserMeta: user,
			IfMatch:     strings.Trim(q.r.Header.Get("If-Match"), `" `),
			IfNoneMatch: inm,
		},
		Headers: storeChecksums(q.w.Header(), std), Tags: tags,
		Retention: retention, LegalHold: hold, StorageClass: class,
	})
	if err != nil {
		return s.keyError(err)
	}
	q.w.Header().Set("ETag", etagOf(ino))
	setVersionHeader(q.w.Header(), versionIDOf(s.bucketNS(q), ino))
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// ifNoneMatchStar reads If-None-Match on a write: S3 takes only "*"
// (create, do not replace) and answers an ETag with NotImplemented,
// which is better than ignoring it.
func ifNoneMatchStar(h http.Header) (bool, error) {
	switch v := strings.TrimSpace(h.Get("If-None-Match")); v {
	case "":
		return false, nil
	case "*":
		return true, nil
	}
	return false, errNotImplemented("If-None-Match on a write takes only *")
}

// putFolder stores a folder marker ("key/"): a directory.
func (s *Server) putFolder(q *request, p string) error {
	n, err := io.Copy(io.Discard, io.LimitReader(q.body.r, 1))
	if err != nil {
		return err
	}
	if n > 0 {
		return apiErr(http.StatusBadRequest, "InvalidArgument", "an object whose key ends in '/' is a directory and must be empty")
	}
	if p != "" {
		if _, err := s.client.Mkdir(q.ctx(), q.bucket, p, 0o755); err != nil {
			return s.keyError(err)
		}
	}
	q.w.Header().Set("ETag", `"`+emptyMD5+`"`)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// keyError translates errors about a key: a file where a directory is
// needed or the reverse cannot be an S3 object.
func (s *Server) keyError(err error) error {
	switch errors.KindOf(err) {
	case errors.IsDir, errors.NotDir, errors.Exist:
		return apiErr(http.StatusConflict, "InvalidRequest", "the key conflicts with a directory or file of the same name ("+err.Error()+")")
	}
	return notExistAs(err, errNoSuchBucket())
}

// stat resolves the request's key to a file, or a directory when the key
// ends in '/'. Anything else is NoSuchKey.
func (s *Server) stat(q *request) (*client.File, error) {
	return s.statKey(q, q.bucket, q.key)
}

func (s *Server) statKey(q *request, bucket, key string) (*client.File, error) {
	p, dir, err := cleanKey(key)
	if err != nil {
		return nil, err
	}
	noSuchKey := apiErr(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
	f, err := s.client.Stat(q.ctx(), bucket, p)
	switch {
	case errors.Is(errors.NotExist, err) || errors.Is(errors.NotDir, err):
		if _, nerr := s.client.Namespace(q.ctx(), bucket); errors.Is(errors.NotExist, nerr) {
			return nil, errNoSuchBucket()
		}
		return nil, noSuchKey
	case err != nil:
		return nil, err
	case f.IsDir() != dir || p == "":
		return nil, noSuchKey
	}
	return f, nil
}

// condition evaluates If-Match, If-Unmodified-Since, If-None-Match and
// If-Modified-Since as S3 does and returns 0, 304 or 412.
func condition(h http.Header, etag string, mtime time.Time, prefix string) int {
	mtime = mtime.Truncate(time.Second)
	im, ius := h.Get(prefix+"If-Match"), h.Get(prefix+"If-Unmodified-Since")
	inm, ims := h.Get(prefix+"If-None-Match"), h.Get(prefix+"If-Modified-Since")
	if im != "" {
		if !etagMatch(im, etag) {
			return http.StatusPreconditionFailed
		}
	} else if ius != "" {
		if t, err := http.ParseTime(ius); err == nil && mtime.After(t) {
			return http.StatusPreconditionFailed
		}
	}
	if inm != "" {
		if etagMatch(inm, etag) {
			return http.StatusNotModified
		}
	} else if ims != "" {
		if t, err := http.ParseTime(ims); err == nil && !mtime.After(t) {
			return http.StatusNotModified
		}
	}
	return 0
}

func etagMatch(list, etag string) bool {
	for _, t := range strings.Split(list, ",") {
		t = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(t), "W/"))
		if t == "*" || t == etag || `"`+t+`"` == etag {
			return true
		}
	}
	return false
}

// responseOverrides are the response-* query parameters of GetObject.
var responseOverrides = map[string]string{
	"response-content-type":        "Content-Type",
	"response-content-language":    "Content-Language",
	"response-expires":             "Expires",
	"response-cache-control":       "Cache-Control",
	"response-content-disposition": "Content-Disposition",
	"response-content-encoding":    "Content-Encoding",
}

func (s *Server) getObject(q *request) error {
	n, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	f, err := s.statVersion(q, n)
	if err != nil {
		return err
	}
	ino := f.Inode
	h := q.w.Header()
	setVersionHeader(h, versionIDOf(n, ino))
	lockHeaders(h, ino)
	etag := etagOf(ino)
	mtime := time.Unix(0, ino.MtimeNs).UTC()
	h["ETag"] = []string{etag}
	h["Last-Modified"] = []string{mtime.Format(http.TimeFormat)}
	h["Accept-Ranges"] = []string{"bytes"}
	ct := ino.ContentType
	if ct == "" {
		ct = "binary/octet-stream"
	}
	h["Content-Type"] = []string{ct}
	// Stored checksums are sent back only when asked for, and only for
	// the whole object (they are not a range's).
	checksums := strings.EqualFold(q.r.Header.Get("X-Amz-Checksum-Mode"), "ENABLED") && q.r.Header.Get("Range") == ""
	for k, v := range ino.Headers {
		if strings.HasPrefix(k, "X-Amz-Checksum-") {
			if !checksums {
				continue
			}
			h["X-Amz-Checksum-Type"] = []string{"FULL_OBJECT"}
		}
		h[k] = []string{v}
	}
	setClassHeader(h, s.classes.name(n, ino))
	for k, v := range ino.UserMeta {
		// As sent (stored lower-case), not canonicalised: S3 answers
		// x-amz-meta-meta1, and clients that compare names see the difference.
		h["x-amz-meta-"+k] = []string{v}
	}
	if len(ino.Tags) > 0 {
		h["X-Amz-Tagging-Count"] = []string{strconv.Itoa(len(ino.Tags))}
	}
	if code := condition(q.r.Header, etag, mtime, ""); code != 0 {
		if code == http.StatusNotModified {
			h.Del("Content-Type")
			q.w.WriteHeader(code)
			return nil
		}
		return apiErr(code, "PreconditionFailed", "At least one of the pre-conditions you specified did not hold")
	}
	v := q.query
	for param, header := range responseOverrides {
		if val := v.Get(param); val != "" {
			h[header] = []string{val}
		}
	}
	size := int64(ino.Size)
	if f.IsDir() {
		size = 0
	}
	start, length, code := int64(0), size, http.StatusOK
	if pn := v.Get("partNumber"); pn != "" {
		var err error
		if start, length, code, err = partRange(q.r.Header, ino, pn); err != nil {
			return err
		}
		if code == http.StatusPartialContent {
			h["Content-Range"] = []string{byterange.Range{Start: start, Length: length}.ContentRange(size)}
			h["X-Amz-Mp-Parts-Count"] = []string{strconv.Itoa(len(ino.PartSizes))}
		}
	} else if rg, ok, err := byterange.Parse(q.r.Header.Get("Range"), size); err != nil {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
		return apiErr(http.StatusRequestedRangeNotSatisfiable, "InvalidRange", "The requested range is not satisfiable")
	} else if ok {
		start, length, code = rg.Start, rg.Length, http.StatusPartialContent
		h["Content-Range"] = []string{rg.ContentRange(size)}
	}
	h["Content-Length"] = []string{strconv.FormatInt(length, 10)}
	if q.r.Method == http.MethodHead || length == 0 {
		q.w.WriteHeader(code)
		return nil
	}
	// Headers and body leave in one socket write over TLS.
	defer cork.Request(q.r)()
	if s.cfg.Small != nil && ino.Ino != 0 { // a stored version has no inode to cache by
		data, ok, err := s.cfg.Small.ReadSmall(q.ctx(), f)
		if err != nil {
			return err
		}
		if ok {
			q.w.WriteHeader(code)
			q.w.Write(data[start : start+length])
			return nil
		}
	}
	lw := &lazyHeader{w: q.w, code: code}
	if _, err := s.client.ReadTo(q.ctx(), f, start, length, lw); err != nil {
		if !lw.sent {
			return err
		}
		// The status is gone: cutting the connection is the only way to
		// tell the client that the body is short.
		s.cfg.Logger.Warn("s3: read failed mid-body", "bucket", q.bucket, "key", q.key, "err", err)
		panic(http.ErrAbortHandler)
	}
	return nil
}

// partRange finds the bytes of part pn of a multipart object (206), or
// the whole of an object uploaded in one piece when pn is 1 (200).
func partRange(h http.Header, ino *metapb.Inode, pn string) (start, length int64, code int, err error) {
	n, perr := strconv.Atoi(pn)
	switch {
	case perr != nil || n < 1 || n > 10000:
		return 0, 0, 0, apiErr(http.StatusBadRequest, "InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")
	case h.Get("Range") != "":
		return 0, 0, 0, errInvalidRequest("Cannot specify both Range header and partNumber query parameter")
	}
	notSatisfiable := apiErr(http.StatusRequestedRangeNotSatisfiable, "InvalidPartNumber", "The requested partnumber is not satisfiable")
	_, count, multipart := strings.Cut(ino.Etag, "-")
	if !multipart {
		if n != 1 {
			return 0, 0, 0, notSatisfiable
		}
		return 0, int64(ino.Size), http.StatusOK, nil
	}
	// Sizes are trusted only while they still describe the file: a
	// mount's write changes the ETag.
	var total uint64
	for _, sz := range ino.PartSizes {
		total += sz
	}
	if count != strconv.Itoa(len(ino.PartSizes)) || total != ino.Size {
		return 0, 0, 0, errNotImplemented("the part sizes of this object were not recorded (it was completed by an older Cairn)")
	}
	if n > len(ino.PartSizes) {
		return 0, 0, 0, notSatisfiable
	}
	for _, sz := range ino.PartSizes[:n-1] {
		start += int64(sz)
	}
	return start, int64(ino.PartSizes[n-1]), http.StatusPartialContent, nil
}

// lazyHeader sends the status with the first byte of the body, so a read
// that fails before any byte still gets a proper error response.
type lazyHeader struct {
	w    http.ResponseWriter
	code int
	sent bool
}

func (l *lazyHeader) Write(p []byte) (int, error) {
	if !l.sent {
		l.sent = true
		l.w.WriteHeader(l.code)
	}
	return l.w.Write(p)
}
