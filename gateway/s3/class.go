package s3

import (
	"net/http"

	"cairn/client"
)

// S3 storage classes map to Cairn's (meta/classes.go): STANDARD is the
// bucket's own class, STANDARD_IA an ec-4+2 code (1.5x, any 2 servers
// lost) and GLACIER_IR ec-8+4 (1.5x, any 4). Others are refused, as S3
// refuses a class it does not offer. A PUT's class is kept with the
// object (x-amz-storage-class on GET and HEAD, as S3 answers for classes
// other than STANDARD).
var storageClasses = map[string]string{
	"STANDARD":    "",
	"STANDARD_IA": "ec-4+2",
	"GLACIER_IR":  "ec-8+4",
}

// objectClass reads a PUT's x-amz-storage-class: the Cairn class its
// bytes go to ("" for the bucket's) and the name to keep ("" for
// STANDARD).
func objectClass(h http.Header) (class, keep string, err error) {
	name := h.Get("X-Amz-Storage-Class")
	if name == "" {
		return "", "", nil
	}
	class, ok := storageClasses[name]
	if !ok {
		return "", "", apiErr(http.StatusBadRequest, "InvalidStorageClass", "The storage class you specified is not valid")
	}
	if class == "" {
		return "", "", nil
	}
	return class, name, nil
}

// withObjectClass sends q's writes to the volumes of its storage class and
// keeps the class with the object.
func withObjectClass(q *request, std map[string]string) (map[string]string, error) {
	class, keep, err := objectClass(q.r.Header)
	if err != nil || class == "" {
		return std, err
	}
	q.r = q.r.WithContext(client.WithStorageClass(q.r.Context(), class))
	if std == nil {
		std = map[string]string{}
	}
	std["X-Amz-Storage-Class"] = keep
	return std, nil
}
