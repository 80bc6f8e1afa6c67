package console

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"cairn/errors"
)

// PartSize is the size of every part of a parted upload but the last. It
// bounds what a dropped connection costs (one part is sent again) and is
// above S3's 5 MiB minimum part.
const PartSize = 8 << 20

// maxParts keeps a listing of an upload's parts to one S3 page.
const maxParts = 1000

// uploads is the console's upload protocol, over S3 multipart as the
// user (all under /api/uploads/{ns}/{path}):
//
//	POST             start: {"id", "part_size"}
//	PUT    ?id&part=N  one part (Content-Length required): {"etag"}
//	GET    ?id       parts stored so far: {"parts": [{"part", "size", "etag"}]}
//	POST   ?id       complete with {"parts": [{"part", "etag"}]}
//	DELETE ?id       cancel: the stored parts are dropped
//
// The browser keeps the id (localStorage), so an upload interrupted by a
// dropped connection or a closed tab resumes by asking which parts are
// stored and sending only the others. Parts are stored by the S3 layer
// as needles of the namespace, not yet a file; the completed file
// references them (no copy), and an upload never completed is swept
// after --s3-upload-max-age.
func (c *Console) uploads(w http.ResponseWriter, r *http.Request, s *session) {
	if c.cfg.S3 == nil {
		writeError(w, errors.E(errors.Unavailable, "parted uploads need the S3 layer; use a single PUT"))
		return
	}
	ns, p, err := object(r)
	if err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	id := q.Get("id")
	if id == "" && r.Method != http.MethodPost {
		writeError(w, errors.E(errors.Invalid, "want ?id"))
		return
	}
	switch {
	case r.Method == http.MethodPost && id == "":
		err = c.startUpload(w, r, s, ns, p)
	case r.Method == http.MethodPut:
		err = c.putPart(w, r, s, ns, p, id, q.Get("part"))
	case r.Method == http.MethodGet:
		err = c.listParts(w, r, s, ns, p, id)
	case r.Method == http.MethodPost:
		err = c.completeUpload(w, r, s, ns, p, id)
	case r.Method == http.MethodDelete:
		var req *http.Request
		if req, err = s3Request(r.Context(), s, http.MethodDelete, ns, p, url.Values{"uploadId": {id}}, nil, 0); err == nil {
			if _, err = c.s3Do(req); err == nil {
				w.WriteHeader(http.StatusNoContent)
			}
		}
	default:
		err = errors.E(errors.Invalid, "GET, PUT, POST or DELETE")
	}
	if err != nil {
		c.writeS3Error(w, err)
	}
}

func (c *Console) startUpload(w http.ResponseWriter, r *http.Request, s *session, ns, p string) error {
	req, err := s3Request(r.Context(), s, http.MethodPost, ns, p, url.Values{"uploads": {""}}, nil, 0)
	if err != nil {
		return err
	}
	if ct := r.URL.Query().Get("type"); ct != "" {
		req.Header.Set("Content-Type", ct) // not signed: SigV4 covers only the headers it names
	}
	rec, err := c.s3Do(req)
	if err != nil {
		return err
	}
	var out struct {
		UploadID string `xml:"UploadId"`
	}
	if err := xml.Unmarshal(rec.body.Bytes(), &out); err != nil || out.UploadID == "" {
		return errors.E(errors.Other, "S3 layer gave no upload id")
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": out.UploadID, "part_size": PartSize})
	return nil
}

// parsePart reads a part number as the protocol allows: 1 to maxParts.
func parsePart(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxParts || strconv.Itoa(n) != s {
		return 0, errors.E(errors.Invalid, fmt.Sprintf("part must be 1 to %d", maxParts))
	}
	return n, nil
}

func (c *Console) putPart(w http.ResponseWriter, r *http.Request, s *session, ns, p, id, part string) error {
	n, err := parsePart(part)
	if err != nil {
		return err
	}
	if r.ContentLength < 0 || r.ContentLength > PartSize {
		return errors.E(errors.Invalid, fmt.Sprintf("a part needs a Content-Length of at most %d", PartSize))
	}
	req, err := s3Request(r.Context(), s, http.MethodPut, ns, p,
		url.Values{"uploadId": {id}, "partNumber": {strconv.Itoa(n)}}, http.MaxBytesReader(w, r.Body, r.ContentLength), r.ContentLength)
	if err != nil {
		return err
	}
	rec, err := c.s3Do(req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"etag": strings.Trim(rec.h.Get("ETag"), `"`)})
	return nil
}

type partJSON struct {
	Part int    `json:"part"`
	Size int64  `json:"size,omitempty"`
	ETag string `json:"etag"`
}

func (c *Console) listParts(w http.ResponseWriter, r *http.Request, s *session, ns, p, id string) error {
	req, err := s3Request(r.Context(), s, http.MethodGet, ns, p,
		url.Values{"uploadId": {id}, "max-parts": {strconv.Itoa(maxParts)}}, nil, 0)
	if err != nil {
		return err
	}
	rec, err := c.s3Do(req)
	if err != nil {
		return err
	}
	var out struct {
		Parts []struct {
			PartNumber int    `xml:"PartNumber"`
			ETag       string `xml:"ETag"`
			Size       int64  `xml:"Size"`
		} `xml:"Part"`
	}
	if err := xml.Unmarshal(rec.body.Bytes(), &out); err != nil {
		return errors.E(errors.Other, err)
	}
	parts := make([]partJSON, 0, len(out.Parts))
	for _, pt := range out.Parts {
		parts = append(parts, partJSON{Part: pt.PartNumber, Size: pt.Size, ETag: strings.Trim(pt.ETag, `"`)})
	}
	writeJSON(w, http.StatusOK, map[string]any{"parts": parts})
	return nil
}

func (c *Console) completeUpload(w http.ResponseWriter, r *http.Request, s *session, ns, p, id string) error {
	var in struct {
		Parts []partJSON `json:"parts"`
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&in); err != nil || len(in.Parts) == 0 {
		return errors.E(errors.Invalid, "want {parts: [{part, etag}]}")
	}
	type xmlPart struct {
		PartNumber int    `xml:"PartNumber"`
		ETag       string `xml:"ETag"`
	}
	body := struct {
		XMLName xml.Name  `xml:"CompleteMultipartUpload"`
		Parts   []xmlPart `xml:"Part"`
	}{}
	for _, pt := range in.Parts {
		body.Parts = append(body.Parts, xmlPart{pt.Part, `"` + pt.ETag + `"`})
	}
	data, _ := xml.Marshal(body)
	req, err := s3Request(r.Context(), s, http.MethodPost, ns, p, url.Values{"uploadId": {id}}, bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return err
	}
	rec, err := c.s3Do(req)
	if err == nil && bytes.Contains(rec.body.Bytes(), []byte("<Error>")) {
		// S3 may report a failed completion in a 200 answer.
		var e struct {
			Code    string `xml:"Code"`
			Message string `xml:"Message"`
		}
		xml.Unmarshal(rec.body.Bytes(), &e)
		err = &s3Error{code: http.StatusInternalServerError, s3code: e.Code, msg: e.Message}
	}
	if err != nil {
		return err
	}
	var out struct {
		ETag string `xml:"ETag"`
	}
	xml.Unmarshal(rec.body.Bytes(), &out)
	writeJSON(w, http.StatusOK, map[string]string{"path": p, "etag": strings.Trim(out.ETag, `"`)})
	return nil
}
