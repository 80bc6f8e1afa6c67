package s3

import (
	"bytes"
	"crypto/md5"
	"io"
	"net/http"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// remove deletes a key; a missing key is no error (S3 semantics), and
// directories left empty above it are removed, since S3 has no
// directories that outlive their last object.
//
// In a versioned bucket the file becomes a stored version and a delete
// marker the latest (even where no file was); marker names it.
func (s *Server) remove(q *request, key string) (marker *metapb.S3Version, err error) {
	p, dir, err := cleanKey(key)
	if err != nil {
		return nil, err
	}
	if p == "" {
		return nil, nil
	}
	if n := s.bucketNS(q); !dir && n != nil && n.S3Versioning != metapb.S3Versioning_S3_VERSIONING_OFF {
		marker, err = s.client.DeleteS3(q.ctx(), q.bucket, p)
		if err == nil && !marker.DeleteMarker {
			marker = nil
		}
	} else {
		err = s.client.Delete(q.ctx(), q.bucket, p, false, "")
	}
	switch {
	case err == nil:
	case errors.Is(errors.NotExist, err), errors.Is(errors.NotDir, err):
		if _, nerr := s.client.Namespace(q.ctx(), q.bucket); errors.Is(errors.NotExist, nerr) {
			return nil, errNoSuchBucket()
		}
		return nil, nil
	case errors.Is(errors.NotEmpty, err) && dir:
		return nil, nil // the marker of a non-empty directory: its objects stay
	case errors.Is(errors.NotEmpty, err):
		return nil, nil // "a" names a directory "a/", which is not this object
	case errors.Is(errors.Permission, err):
		return nil, apiErr(http.StatusForbidden, "AccessDenied", "Access Denied because object protected by object lock.")
	default:
		return nil, err
	}
	s.removeEmptyParents(q, p)
	return marker, nil
}

// removeEmptyParents removes the directories above p that are empty.
func (s *Server) removeEmptyParents(q *request, p string) {
	for {
		parent, _ := pathname.Parent(p)
		if parent == "" || s.client.Delete(q.ctx(), q.bucket, parent, false, "") != nil {
			return
		}
		p = parent
	}
}

func (s *Server) deleteObject(q *request) error {
	if _, err := s.authorize(q, write); err != nil {
		return err
	}
	var v *metapb.S3Version
	var err error
	if vid := q.query.Get("versionId"); vid != "" {
		v, err = s.deleteObjectVersion(q, q.key, vid)
		if err == nil && v.Inode != nil {
			setVersionHeader(q.w.Header(), vid)
		}
	} else {
		v, err = s.remove(q, q.key)
		if err == nil && v != nil {
			setVersionHeader(q.w.Header(), versionIDOfRecord(v))
		}
	}
	if err != nil {
		return err
	}
	if v != nil && v.DeleteMarker {
		q.w.Header()["X-Amz-Delete-Marker"] = []string{"true"}
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) deleteObjects(q *request) error {
	// A bucket policy may allow or deny some keys and not others: each is
	// then authorized on its own, as S3 does.
	st, err := s.state(q, q.bucket)
	if err != nil {
		return err
	}
	perKey := st.pol != nil && !q.p.root
	if perKey {
		if _, err := s.client.Namespace(q.base, q.bucket); err != nil {
			return notExistAs(err, errNoSuchBucket())
		}
	} else if _, err := s.authorize(q, write); err != nil {
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
		var v *metapb.S3Version
		d := deletedXML{Key: o.Key, VersionID: o.VersionID}
		action := "s3:DeleteObject"
		if o.VersionID != "" {
			action = "s3:DeleteObjectVersion"
		}
		if perKey {
			_, err = s.authorizeOn(q, q.bucket, o.Key, action, write)
		}
		switch {
		case err != nil:
		case o.ETag != "" || o.LastModifiedTime != "" || o.Size != "":
			err = errNotImplemented("conditional deletes (ETag, LastModifiedTime, Size) are not supported")
		case o.VersionID != "":
			if v, err = s.deleteObjectVersion(q, o.Key, o.VersionID); err == nil && v.DeleteMarker {
				d.DeleteMarker, d.DeleteMarkerVersionID = true, o.VersionID
			}
		default:
			if v, err = s.remove(q, o.Key); err == nil && v != nil {
				d.DeleteMarker, d.DeleteMarkerVersionID = true, versionIDOfRecord(v)
			}
		}
		if err != nil {
			e := toAPI(err)
			out.Errors = append(out.Errors, deleteError{Key: o.Key, VersionID: o.VersionID, Code: e.code, Message: e.message})
			continue
		}
		if !in.Quiet {
			out.Deleted = append(out.Deleted, d)
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
