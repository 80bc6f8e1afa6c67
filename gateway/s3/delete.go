package s3

import (
	"bytes"
	"crypto/md5"
	"io"
	"net/http"

	"cairn/errors"
	"cairn/pathname"
)

// remove deletes a key; a missing key is no error (S3 semantics), and
// directories left empty above it are removed, since S3 has no
// directories that outlive their last object.
func (s *Server) remove(q *request, key string) error {
	p, dir, err := cleanKey(key)
	if err != nil {
		return err
	}
	if p == "" {
		return nil
	}
	err = s.client.Delete(q.ctx(), q.bucket, p, false, "")
	switch {
	case err == nil:
	case errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err):
		if _, nerr := s.client.Namespace(q.ctx(), q.bucket); errors.Is(errors.NotExist, nerr) {
			return errNoSuchBucket()
		}
		return nil
	case errors.Is(errors.NotEmpty, err) && dir:
		return nil // the marker of a non-empty directory: its objects stay
	case errors.Is(errors.NotEmpty, err):
		return nil // "a" names a directory "a/", which is not this object
	default:
		return err
	}
	for {
		parent, _ := pathname.Parent(p)
		if parent == "" {
			return nil
		}
		if s.client.Delete(q.ctx(), q.bucket, parent, false, "") != nil {
			return nil
		}
		p = parent
	}
}

func (s *Server) deleteObject(q *request) error {
	if _, err := s.authorize(q.ctx(), q.p, q.bucket, write); err != nil {
		return err
	}
	if err := s.remove(q, q.key); err != nil {
		return err
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) deleteObjects(q *request) error {
	if _, err := s.authorize(q.ctx(), q.p, q.bucket, write); err != nil {
		return err
	}
	md5sum, err := contentMD5(q.r.Header)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(q.body.r, maxXMLBody+1))
	if err != nil {
		return toAPIErr(err)
	}
	if md5sum != nil {
		if sum := md5.Sum(data); !bytes.Equal(sum[:], md5sum) {
			return apiErr(http.StatusBadRequest, "BadDigest", "The Content-MD5 you specified did not match what we received.")
		}
	}
	var in deleteRequest
	if err := readXML(&body{r: bytes.NewReader(data)}, &in); err != nil {
		return err
	}
	if len(in.Objects) == 0 || len(in.Objects) > 1000 {
		return errMalformedXML()
	}
	out := deleteResult{Xmlns: s3NS}
	for _, o := range in.Objects {
		var err error
		switch {
		case o.VersionID != "" && o.VersionID != "null":
			// Unversioned objects are the "null" version; other ids name nothing.
			err = apiErr(http.StatusBadRequest, "InvalidArgument", "Invalid version id specified")
		case o.ETag != "" || o.LastModifiedTime != "" || o.Size != "":
			err = errNotImplemented("conditional deletes (ETag, LastModifiedTime, Size) are not supported")
		default:
			err = s.remove(q, o.Key)
		}
		if err != nil {
			e := toAPI(err)
			out.Errors = append(out.Errors, deleteError{Key: o.Key, Code: e.code, Message: e.message})
			continue
		}
		if !in.Quiet {
			out.Deleted = append(out.Deleted, deletedXML{Key: o.Key})
		}
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

// toAPIErr keeps an *apiError (a body that failed verification) and
// makes anything else an I/O error.
func toAPIErr(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return errors.E(errors.IO, "reading the request body", err)
}
