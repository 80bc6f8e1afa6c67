package s3

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"

	"cairn/client"
	"cairn/meta"
	"cairn/proto/metapb"
)

// S3 storage classes map to Cairn's (meta/classes.go), both ways.
//
// A write (PUT, POST, CreateMultipartUpload, a COPY that changes the
// class) names an S3 class in x-amz-storage-class: its Cairn class is
// where the bytes go and what the file records (Inode.storage_class).
// STANDARD is the bucket's own class. Names that are not configured are
// refused with InvalidStorageClass, as S3 refuses a class it does not
// offer.
//
// A read (HEAD, GET, ListObjects, ListObjectVersions, GetObjectAttributes)
// shows the class the file is in now, a tier move's included: STANDARD
// when it is the bucket's class, else the configured S3 name of its Cairn
// class; a Cairn class no S3 name is configured for is shown by its Cairn
// name ("cold", "ec-6+3"), which S3 clients take as an opaque string.
//
// The default names: STANDARD_IA is an ec-4+2 code (1.5x, any 2 servers
// lost), GLACIER_IR ec-8+4 (1.5x, any 4); Config.StorageClasses replaces
// them (cairn server --s3-class NAME=CLASS).
var defaultClasses = map[string]string{
	"STANDARD_IA": "ec-4+2",
	"GLACIER_IR":  "ec-8+4",
}

const standardClass = "STANDARD"

// s3Classes is the mapping in both directions.
type s3Classes struct {
	byName  map[string]string // S3 name -> Cairn class ("" for STANDARD)
	byClass map[string]string // Cairn class -> S3 name
}

func newS3Classes(cfg map[string]string) s3Classes {
	if cfg == nil {
		cfg = defaultClasses
	}
	c := s3Classes{byName: map[string]string{standardClass: ""}, byClass: map[string]string{}}
	// Sorted: of two names for one class, the first answers reads.
	for _, name := range slices.Sorted(maps.Keys(cfg)) {
		if name == standardClass {
			continue
		}
		c.byName[name] = cfg[name]
		if _, dup := c.byClass[cfg[name]]; !dup {
			c.byClass[cfg[name]] = name
		}
	}
	return c
}

// class reads a write's x-amz-storage-class: the Cairn class its bytes go
// to ("" for the bucket's).
func (c s3Classes) class(name string) (string, error) {
	if name == "" {
		return "", nil
	}
	class, ok := c.byName[name]
	if !ok {
		return "", apiErr(http.StatusBadRequest, "InvalidStorageClass", "The storage class you specified is not valid")
	}
	return class, nil
}

// name is the S3 name of the class file n of bucket ns is in now.
func (c s3Classes) name(ns *metapb.Namespace, n *metapb.Inode) string {
	switch n.GetStorageClass() {
	case "":
		// An object stored before files recorded their class kept the
		// name its PUT gave.
		return cmp.Or(n.GetHeaders()["X-Amz-Storage-Class"], standardClass)
	case cmp.Or(ns.GetStorageClass(), meta.ClassReplicated):
		return standardClass
	}
	if name, ok := c.byClass[n.StorageClass]; ok {
		return name
	}
	return n.StorageClass
}

// nameOf is the S3 name of Cairn class cls as a write named it ("": the
// bucket's).
func (c s3Classes) nameOf(cls string) string {
	if cls == "" {
		return standardClass
	}
	return cmp.Or(c.byClass[cls], cls)
}

// setClassHeader answers a HEAD or GET with the object's class; S3 sends
// none for STANDARD.
func setClassHeader(h http.Header, name string) {
	if name == standardClass {
		delete(h, "X-Amz-Storage-Class")
		return
	}
	h["X-Amz-Storage-Class"] = []string{name}
}

// withObjectClass sends q's writes to the volumes of the class its
// x-amz-storage-class names, and returns that class for the commit.
func (s *Server) withObjectClass(q *request) (string, error) {
	class, err := s.classes.class(q.r.Header.Get("X-Amz-Storage-Class"))
	if err != nil || class == "" {
		return "", err
	}
	q.r = q.r.WithContext(client.WithStorageClass(q.r.Context(), class))
	return class, nil
}

// A multipart upload's parts are written in its class. The class rides in
// the upload id the gateway makes (random hex, then "x" and the class in
// hex), so a part needs no meta call to learn it: meta takes a part only
// for an id it holds, so the class cannot be altered. An id without the
// suffix (meta's own) is the bucket's class.
func uploadID(class string) string {
	var b [16]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	if class != "" {
		id += "x" + hex.EncodeToString([]byte(class))
	}
	return id
}

// uploadClass is the class an upload id carries ("": the bucket's).
func uploadClass(id string) string {
	_, h, ok := strings.Cut(id, "x")
	if !ok {
		return ""
	}
	b, err := hex.DecodeString(h)
	if err != nil {
		return ""
	}
	return string(b)
}

// copyClass reads a CopyObject's x-amz-storage-class. A copy shares the
// source's needles, and so its class; when the class named is another
// (the way S3 changes an object's class: a copy onto itself), the answer
// is the class to copy the bytes to ("" the bucket's), else nil.
func (s *Server) copyClass(q *request, srcBucket string, f *client.File) (*string, error) {
	name := q.r.Header.Get("X-Amz-Storage-Class")
	if name == "" {
		return nil, nil
	}
	class, err := s.classes.class(name)
	if err != nil {
		return nil, err
	}
	src, err := s.client.Namespace(q.ctx(), srcBucket)
	if err != nil {
		return nil, notExistAs(err, errNoSuchBucket())
	}
	dst := s.bucketNS(q)
	from := cmp.Or(f.Inode.StorageClass, src.StorageClass, meta.ClassReplicated)
	if cmp.Or(class, dst.GetStorageClass(), meta.ClassReplicated) == from {
		return nil, nil
	}
	return &class, nil
}

// copyBytes is a CopyObject into another class: the source's bytes are
// read and written anew in class, then committed with the metadata req
// says (the source's, or the request's with REPLACE).
func (s *Server) copyBytes(q *request, f *client.File, req *metapb.S3CopyRequest, class string) (*metapb.Inode, error) {
	pr, pw := io.Pipe()
	go func() {
		_, err := s.client.ReadTo(q.ctx(), f, 0, f.Size(), pw)
		pw.CloseWithError(err)
	}()
	st, err := s.client.Store(client.WithStorageClass(q.ctx(), class), req.DstNs, pr, f.Size())
	pr.CloseWithError(io.ErrClosedPipe) // unblocks the reader if Store stopped early
	if err != nil {
		return nil, err
	}
	in := f.Inode
	o := client.CommitOptions{PutOptions: client.PutOptions{ContentType: in.ContentType, UserMeta: in.UserMeta},
		Headers: maps.Clone(in.Headers), Tags: in.Tags, StorageClass: class}
	delete(o.Headers, "X-Amz-Storage-Class") // the name an older PUT kept
	if req.ReplaceMetadata {
		o.ContentType, o.UserMeta, o.Headers = req.ContentType, req.UserMeta, req.Headers
	}
	if req.ReplaceTags {
		o.Tags = req.Tags
	}
	return s.client.CommitStored(q.ctx(), req.DstNs, req.DstPath, st, o)
}
