package s3

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"cairn/client"
	"cairn/meta"
)

// Browser uploads: POST Object. A web page's form posts
// multipart/form-data to the bucket: fields (key, policy, signature,
// metadata, ...) and then the file. The policy (base64 JSON) is signed
// with SigV4's signing key and lists conditions every field must meet;
// the signer's rights (and the bucket policy) decide the write, as for a
// PutObject. A form without a policy is anonymous.
//
// The fields are read first, bounded; the file is then streamed into
// storage, bounded by the policy's content-length-range and the
// server's MaxObjectSize, and committed only when whole and within both.

const (
	maxPostField  = 20 << 10 // one field before the file
	maxPostFields = 64 << 10 // all of them
)

// postForm is a POST Object request's fields (names lower-case, as S3
// compares them) and its file, not yet read.
type postForm struct {
	fields   map[string]string
	filename string
	file     io.Reader // nil: the form has no file
}

func errMalformedPost(msg string) error {
	return apiErr(http.StatusBadRequest, "MalformedPOSTRequest", "The body of your POST request is not well-formed multipart/form-data: "+msg)
}

func errPostPolicy(msg string) error {
	return apiErr(http.StatusForbidden, "AccessDenied", "Invalid according to Policy: "+msg)
}

// readPostForm reads the form's fields up to its file part.
func readPostForm(contentType string, r io.Reader) (*postForm, error) {
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		return nil, errMalformedPost("the Content-Type must be multipart/form-data with a boundary")
	}
	mr := multipart.NewReader(r, params["boundary"])
	f := &postForm{fields: map[string]string{}}
	total := 0
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return f, nil
		}
		if err != nil {
			return nil, errMalformedPost(err.Error())
		}
		name := strings.ToLower(p.FormName())
		if name == "" {
			return nil, errMalformedPost("a part has no form name")
		}
		if name == "file" {
			f.filename = path.Base(strings.ReplaceAll(p.FileName(), `\`, "/"))
			if f.filename == "." || f.filename == "/" {
				f.filename = ""
			}
			f.file = p
			return f, nil
		}
		v, err := io.ReadAll(io.LimitReader(p, maxPostField+1))
		if err != nil {
			return nil, errMalformedPost(err.Error())
		}
		total += len(name) + len(v)
		if len(v) > maxPostField || total > maxPostFields {
			return nil, apiErr(http.StatusBadRequest, "MaxPostPreDataLengthExceeded", "Your POST request fields preceding the upload file were too large.")
		}
		if _, dup := f.fields[name]; dup {
			return nil, errInvalidArgument("the form field " + name + " is given twice")
		}
		f.fields[name] = string(v)
	}
}

func errInvalidArgument(msg string) error {
	return apiErr(http.StatusBadRequest, "InvalidArgument", msg)
}

// postPolicy is a parsed POST policy document.
type postPolicy struct {
	expiration time.Time
	conds      []postCond
	minSize    int64
	maxSize    int64 // -1: no content-length-range
}

// postCond is one eq or starts-with condition on a field (lower-case,
// without the $).
type postCond struct {
	op, field, value string
}

func errPolicyDoc(msg string) error {
	return apiErr(http.StatusBadRequest, "InvalidPolicyDocument", "Invalid Policy: "+msg)
}

// parsePostPolicy reads a policy document (the base64 of its JSON).
func parsePostPolicy(b64 string) (*postPolicy, error) {
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, errPolicyDoc("the policy is not base64")
	}
	var doc struct {
		Expiration *string           `json:"expiration"`
		Conditions []json.RawMessage `json:"conditions"`
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, errPolicyDoc("the policy is not a JSON object of expiration and conditions: " + err.Error())
	}
	if doc.Expiration == nil {
		return nil, errPolicyDoc("Policy missing expiration.")
	}
	p := &postPolicy{maxSize: -1}
	if p.expiration, err = time.Parse(time.RFC3339Nano, *doc.Expiration); err != nil {
		return nil, errPolicyDoc("Invalid 'expiration' value: " + *doc.Expiration)
	}
	if doc.Conditions == nil {
		return nil, errPolicyDoc("Policy missing conditions.")
	}
	for _, raw := range doc.Conditions {
		if err := p.addCondition(raw); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (p *postPolicy) addCondition(raw json.RawMessage) error {
	var m map[string]string
	if json.Unmarshal(raw, &m) == nil {
		if len(m) != 1 {
			return errPolicyDoc("a condition object has exactly one field")
		}
		for k, v := range m {
			p.conds = append(p.conds, postCond{"eq", strings.ToLower(strings.TrimPrefix(k, "$")), v})
		}
		return nil
	}
	var l []json.RawMessage
	if err := json.Unmarshal(raw, &l); err != nil || len(l) != 3 {
		return errPolicyDoc("a condition is an object or a list of three: " + string(raw))
	}
	var op string
	if err := json.Unmarshal(l[0], &op); err != nil {
		return errPolicyDoc("a condition's operator must be a string: " + string(raw))
	}
	switch op = strings.ToLower(op); op {
	case "eq", "starts-with":
		var field, value string
		if json.Unmarshal(l[1], &field) != nil || json.Unmarshal(l[2], &value) != nil || !strings.HasPrefix(field, "$") {
			return errPolicyDoc("Invalid condition: " + string(raw))
		}
		p.conds = append(p.conds, postCond{op, strings.ToLower(field[1:]), value})
	case "content-length-range":
		lo, err1 := jsonInt(l[1])
		hi, err2 := jsonInt(l[2])
		if err1 != nil || err2 != nil || lo < 0 || hi < lo {
			return errPolicyDoc("Invalid content-length-range: " + string(raw))
		}
		p.minSize, p.maxSize = lo, hi
	default:
		return errPolicyDoc("Invalid condition operator " + op + " (supported: eq, starts-with, content-length-range)")
	}
	return nil
}

// jsonInt reads an integer given as a JSON number or a string of one.
func jsonInt(raw json.RawMessage) (int64, error) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		return strconv.ParseInt(n.String(), 10, 64)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, err
	}
	return strconv.ParseInt(s, 10, 64)
}

// postIgnored are the fields no condition needs to name.
func postIgnored(name string) bool {
	return name == "policy" || name == "x-amz-signature" || name == "file" || strings.HasPrefix(name, "x-ignore-")
}

// check verifies the form's fields against the conditions: each holds,
// and each field is named by one.
func (p *postPolicy) check(fields map[string]string, bucket string, now time.Time) error {
	if !now.Before(p.expiration) {
		return errPostPolicy("Policy expired.")
	}
	named := map[string]bool{}
	for _, c := range p.conds {
		named[c.field] = true
		v := fields[c.field]
		if c.field == "bucket" {
			v = bucket
		}
		ok := c.op == "eq" && v == c.value || c.op == "starts-with" && strings.HasPrefix(v, c.value)
		if !ok {
			return errPostPolicy(fmt.Sprintf("Policy Condition failed: [%q, \"$%s\", %q]", c.op, c.field, c.value))
		}
	}
	for name := range fields {
		if !postIgnored(name) && !named[name] {
			return errPostPolicy("Extra input fields: " + name)
		}
	}
	return nil
}

// postField reports whether a POST Object may carry the form field; any
// other is refused rather than dropped.
func postField(name string) bool {
	switch name {
	case "key", "acl", "policy", "success_action_status", "success_action_redirect", "redirect",
		"content-type", "cache-control", "content-disposition", "content-encoding", "expires",
		"x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature", "bucket",
		"tagging", "x-amz-checksum-algorithm", "x-amz-storage-class":
		return true
	}
	if _, ok := checksumAlgos[textproto.CanonicalMIMEHeaderKey(name)]; ok {
		return true
	}
	return strings.HasPrefix(name, "x-amz-meta-") || strings.HasPrefix(name, "x-ignore-")
}

// postChecksumAlgorithm checks the form's x-amz-checksum-algorithm: it
// names the one x-amz-checksum-* field the form carries, whose value
// store verifies (the value alone is verified as well).
func postChecksumAlgorithm(fields map[string]string) error {
	algo, ok := fields["x-amz-checksum-algorithm"]
	if !ok {
		return nil
	}
	name := "x-amz-checksum-" + strings.ToLower(algo)
	if _, known := checksumAlgos[textproto.CanonicalMIMEHeaderKey(name)]; !known {
		return errInvalidRequest("x-amz-checksum-algorithm must be CRC32, CRC32C, CRC64NVME, SHA1 or SHA256")
	}
	if fields[name] == "" {
		return errInvalidRequest("x-amz-checksum-algorithm " + algo + " needs the form field " + name)
	}
	for f := range fields {
		if f != name && f != "x-amz-checksum-algorithm" && strings.HasPrefix(f, "x-amz-checksum-") {
			return errInvalidRequest("x-amz-checksum-algorithm " + algo + " and the form field " + f + " disagree")
		}
	}
	return nil
}

// postSignature verifies the form's SigV4 signature of its policy and
// returns the signer.
func (s *Server) postSignature(q *request, fields map[string]string) (principal, error) {
	if fields["x-amz-algorithm"] != "AWS4-HMAC-SHA256" {
		return principal{}, errInvalidArgument("x-amz-algorithm must be AWS4-HMAC-SHA256 (SigV4)")
	}
	cred := strings.Split(fields["x-amz-credential"], "/")
	if len(cred) != 5 || cred[3] != "s3" || cred[4] != "aws4_request" {
		return principal{}, errInvalidArgument("x-amz-credential must be <key>/<date>/<region>/s3/aws4_request")
	}
	when, err := time.Parse("20060102T150405Z", fields["x-amz-date"])
	if err != nil || when.Format("20060102") != cred[1] {
		return principal{}, errInvalidArgument("x-amz-date must be the credential's date as YYYYMMDDTHHMMSSZ")
	}
	p, secret, err := s.lookupKey(q.ctx(), cred[0])
	if err != nil {
		return principal{}, err
	}
	key := []byte("AWS4" + secret)
	for _, part := range []string{cred[1], cred[2], "s3", "aws4_request"} {
		key = hmacSHA256(key, part)
	}
	want := hex.EncodeToString(hmacSHA256(key, fields["policy"]))
	if subtle.ConstantTimeCompare([]byte(want), []byte(strings.ToLower(fields["x-amz-signature"]))) != 1 {
		return principal{}, apiErr(http.StatusForbidden, "SignatureDoesNotMatch", "The request signature we calculated does not match the signature you provided.")
	}
	return p, nil
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

type postResponse struct {
	XMLName  xml.Name `xml:"PostResponse"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
}

func (s *Server) postObject(q *request) error {
	if q.p.access != "" {
		return errInvalidRequest("a POST Object is signed in its form, not with an Authorization header or a presigned URL")
	}
	form, err := readPostForm(q.r.Header.Get("Content-Type"), q.body.r)
	if err != nil {
		return err
	}
	fields := form.fields
	for name := range fields {
		if !postField(name) {
			return errNotImplemented("the form field " + name + " is not supported by POST Object")
		}
	}
	if b, ok := fields["bucket"]; ok && b != q.bucket {
		return errInvalidArgument("the form's bucket field names another bucket than the one posted to")
	}
	if form.file == nil {
		return errInvalidArgument("POST requires exactly one file upload per request.")
	}
	key, ok := fields["key"]
	if !ok || key == "" {
		return errInvalidArgument("Bucket POST must contain a field named 'key'.  If it is specified, please check the order of the fields.")
	}
	maxSize := int64(-1)
	minSize := int64(0)
	if b64, ok := fields["policy"]; ok {
		pol, err := parsePostPolicy(b64)
		if err != nil {
			return err
		}
		p, err := s.postSignature(q, fields)
		if err != nil {
			return err
		}
		if err := pol.check(fields, q.bucket, time.Now()); err != nil {
			return err
		}
		minSize, maxSize = pol.minSize, pol.maxSize
		q.p = p
		q.r = q.r.WithContext(meta.OnBehalfOf(q.base, p.access))
	} else if fields["x-amz-signature"] != "" || fields["x-amz-credential"] != "" {
		return errInvalidArgument("a signed POST Object needs its policy")
	}
	key = strings.ReplaceAll(key, "${filename}", form.filename)
	q.key = key

	// The fields as the headers a PutObject would carry.
	h := http.Header{}
	for name, v := range fields {
		_, sum := checksumAlgos[textproto.CanonicalMIMEHeaderKey(name)]
		switch {
		case name == "acl":
			h.Set("X-Amz-Acl", v)
		case name == "content-type" || name == "cache-control" || name == "content-disposition" ||
			name == "content-encoding" || name == "expires" || strings.HasPrefix(name, "x-amz-meta-") ||
			name == "x-amz-storage-class" || sum:
			h.Set(name, v)
		}
	}
	if err := postChecksumAlgorithm(fields); err != nil {
		return err
	}
	tags, err := parseTaggingXML(fields["tagging"])
	if err != nil {
		return err
	}
	sub := *q
	sub.r = q.r.Clone(q.r.Context())
	sub.r.Header = h
	if err := s.authorizeObjectWrite(&sub); err != nil {
		return err
	}
	q.r = sub.r // with h, and the gateway's own context if the bucket policy allowed what rights do not
	p, dir, err := cleanKey(key)
	if err != nil {
		return err
	}
	if dir {
		return errInvalidArgument("a POST Object key must name a file, not end in '/'")
	}
	ct, user, std, err := objectMeta(h)
	if err != nil {
		return err
	}
	class, err := s.withObjectClass(q) // class.go
	if err != nil {
		return err
	}
	limit := s.cfg.MaxObjectSize
	if maxSize >= 0 && maxSize < limit {
		limit = maxSize
	}
	sub = *q
	sub.body = &body{r: io.LimitReader(form.file, limit+1), size: -1}
	st, err := s.store(&sub, q.bucket)
	if err != nil {
		return err
	}
	switch {
	case st.Size > limit:
		err = apiErr(http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed size")
	case st.Size < minSize:
		err = apiErr(http.StatusBadRequest, "EntityTooSmall", "Your proposed upload is smaller than the minimum allowed size")
	}
	if err != nil {
		s.client.DiscardStored(st)
		return err
	}
	ino, err := s.client.CommitStored(q.ctx(), q.bucket, p, st, client.CommitOptions{
		PutOptions: client.PutOptions{ContentType: ct, UserMeta: user},
		Headers:    storeChecksums(q.w.Header(), std), Tags: tags, StorageClass: class,
	})
	if err != nil {
		return s.keyError(err)
	}
	etag := etagOf(ino)
	w := q.w.Header()
	w.Set("ETag", etag)
	setVersionHeader(w, versionIDOf(s.bucketNS(q), ino))
	location := "/" + q.bucket + "/" + (&url.URL{Path: key}).EscapedPath()
	redirect := fields["success_action_redirect"]
	if redirect == "" {
		redirect = fields["redirect"]
	}
	if u, err := url.Parse(redirect); redirect != "" && err == nil && u.Scheme != "" {
		v := u.Query()
		v.Set("bucket", q.bucket)
		v.Set("key", key)
		v.Set("etag", etag)
		u.RawQuery = v.Encode()
		w.Set("Location", u.String())
		q.w.WriteHeader(http.StatusSeeOther)
		return nil
	}
	w.Set("Location", location)
	switch fields["success_action_status"] {
	case "200":
		q.w.WriteHeader(http.StatusOK)
	case "201":
		writeXML(q.w, http.StatusCreated, postResponse{Location: location, Bucket: q.bucket, Key: key, ETag: etag})
	default:
		q.w.WriteHeader(http.StatusNoContent)
	}
	return nil
}
