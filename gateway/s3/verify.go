package s3

import (
	"bytes"
	"crypto/md5"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"
	"net/http"
	"net/textproto"
	"strings"

	"cairn/client"
)

// Verification of uploaded bodies: Content-MD5, x-amz-checksum-*, length
// and size limits, all checked before anything is committed.

// checksums are the x-amz-checksum-* digests a PUT asks to be verified,
// computed as the body streams through.
type checksums struct {
	names  []string
	hashes []hash.Hash
}

var checksumAlgos = map[string]func() hash.Hash{
	"X-Amz-Checksum-Crc32":  func() hash.Hash { return crc32.NewIEEE() },
	"X-Amz-Checksum-Crc32c": func() hash.Hash { return crc32.New(crc32.MakeTable(crc32.Castagnoli)) },
	"X-Amz-Checksum-Sha1":   sha1.New,
	"X-Amz-Checksum-Sha256": sha256.New,
	// CRC-64/NVME: hash/crc64 takes the reflected polynomial.
	"X-Amz-Checksum-Crc64nvme": func() hash.Hash { return crc64.New(crc64NVME) },
}

var crc64NVME = crc64.MakeTable(0x9a6c9329ac4bc9b5)

// storeChecksums adds to std the checksums a PUT was verified with (set
// on the response by verify), so GET and HEAD can give them back.
func storeChecksums(resp http.Header, std map[string]string) map[string]string {
	for name := range checksumAlgos {
		if v := resp.Get(name); v != "" {
			if std == nil {
				std = map[string]string{}
			}
			std[name] = v
		}
	}
	return std
}

func newChecksums(h http.Header) *checksums {
	c := &checksums{}
	add := func(name string) {
		name = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))
		if f, ok := checksumAlgos[name]; ok {
			for _, n := range c.names {
				if n == name {
					return
				}
			}
			c.names = append(c.names, name)
			c.hashes = append(c.hashes, f())
		}
	}
	for name := range checksumAlgos {
		if h.Get(name) != "" {
			add(name)
		}
	}
	for _, t := range strings.Split(h.Get("X-Amz-Trailer"), ",") {
		add(t)
	}
	return c
}

func (c *checksums) wrap(r io.Reader) io.Reader {
	if len(c.hashes) == 0 {
		return r
	}
	ws := make([]io.Writer, len(c.hashes))
	for i, h := range c.hashes {
		ws[i] = h
	}
	return io.TeeReader(r, io.MultiWriter(ws...))
}

// verify compares each digest with its header or trailer value and sets
// the response headers S3 echoes.
func (c *checksums) verify(b *body, req, resp http.Header) error {
	for i, name := range c.names {
		want := req.Get(name)
		if want == "" {
			want = b.trailer(name)
		}
		got := base64.StdEncoding.EncodeToString(c.hashes[i].Sum(nil))
		if want == "" {
			return apiErr(http.StatusBadRequest, "MalformedTrailerError", "The request announced a trailing "+strings.ToLower(name)+" but did not send it.")
		}
		if want != got {
			return apiErr(http.StatusBadRequest, "BadDigest", "The "+strings.ToLower(name)+" you specified did not match the calculated checksum.")
		}
		resp.Set(name, got)
	}
	return nil
}

func contentMD5(h http.Header) ([]byte, error) {
	s := h.Get("Content-Md5")
	if s == "" {
		return nil, nil
	}
	sum, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(sum) != md5.Size {
		return nil, apiErr(http.StatusBadRequest, "InvalidDigest", "The Content-MD5 you specified is not valid.")
	}
	return sum, nil
}

// simdMin is the body size from which MD5 is computed by the multi-buffer
// hasher; below it the standard one answers sooner.
const simdMin = 1 << 20

// store uploads the request body as needles, verified: signatures (by
// the body reader), length, Content-MD5 and x-amz-checksum-*. Nothing
// stays stored on error.
func (s *Server) store(q *request, bucket string) (*client.Stored, error) {
	if q.body.size > s.cfg.MaxObjectSize {
		return nil, apiErr(http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.")
	}
	md5sum, err := contentMD5(q.r.Header)
	if err != nil {
		return nil, err
	}
	sums := newChecksums(q.r.Header)
	r := sums.wrap(io.LimitReader(q.body.r, s.cfg.MaxObjectSize+1))
	var st *client.Stored
	if q.body.size >= 0 && q.body.size < simdMin {
		st, err = s.client.Store(q.ctx(), bucket, r, q.body.size)
	} else {
		h := s.md5s.NewHash()
		st, err = s.client.StoreHashed(q.ctx(), bucket, r, q.body.size, h)
		h.Close()
	}
	if err != nil {
		return nil, notExistAs(err, errNoSuchBucket())
	}
	switch {
	case st.Size > s.cfg.MaxObjectSize:
		err = apiErr(http.StatusBadRequest, "EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.")
	case q.body.size >= 0 && st.Size != q.body.size:
		err = apiErr(http.StatusBadRequest, "IncompleteBody", "You did not provide the number of bytes specified by the Content-Length HTTP header.")
	case md5sum != nil && !bytes.Equal(md5sum, st.MD5):
		err = apiErr(http.StatusBadRequest, "BadDigest", "The Content-MD5 you specified did not match what we received.")
	default:
		err = sums.verify(q.body, q.r.Header, q.w.Header())
	}
	if err != nil {
		s.client.DiscardStored(st)
		return nil, err
	}
	return st, nil
}
