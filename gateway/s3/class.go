package s3

import (
	"cmp"
	"maps"
	"net/http"
	"slices"

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
