package s3

import (
	"bytes"
	"encoding/xml"
	"io"
	"net/http"
	"strconv"
	"time"

	"cairn/errors"
)

// The XML documents of the S3 API, as encoding/xml types.

const s3NS = "http://s3.amazonaws.com/doc/2006-03-01/"

// maxXMLBody bounds a request's XML body (S3 allows 1000 keys in a
// DeleteObjects, about a megabyte of XML at most).
const maxXMLBody = 2 << 20

// readXML decodes a request body into v; anything malformed is
// MalformedXML, never a crash.
func readXML(b *body, v any) error {
	data, err := io.ReadAll(io.LimitReader(b.r, maxXMLBody+1))
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			return ae
		}
		return errors.E(errors.IO, "reading the request body", err)
	}
	if len(data) > maxXMLBody {
		return apiErr(http.StatusBadRequest, "MalformedXML", "the XML body is too large")
	}
	if err := xml.Unmarshal(data, v); err != nil {
		return errMalformedXML()
	}
	return nil
}

func isoTime(ns int64) string {
	return time.Unix(0, ns).UTC().Format("2006-01-02T15:04:05.000Z")
}

type owner struct {
	ID          string `xml:"ID"`
	DisplayName string `xml:"DisplayName"`
}

type listAllMyBucketsResult struct {
	XMLName xml.Name     `xml:"ListAllMyBucketsResult"`
	Xmlns   string       `xml:"xmlns,attr"`
	Owner   owner        `xml:"Owner"`
	Buckets []bucketInfo `xml:"Buckets>Bucket"`
	// A page of a ListBuckets with max-buckets ends with a token.
	ContinuationToken string `xml:"ContinuationToken,omitempty"`
	Prefix            string `xml:"Prefix,omitempty"`
}

type bucketInfo struct {
	Name         string `xml:"Name"`
	CreationDate string `xml:"CreationDate"`
}

type createBucketConfiguration struct {
	XMLName            xml.Name `xml:"CreateBucketConfiguration"`
	LocationConstraint string   `xml:"LocationConstraint"`
}

type locationConstraint struct {
	XMLName xml.Name `xml:"LocationConstraint"`
	Xmlns   string   `xml:"xmlns,attr"`
	Region  string   `xml:",chardata"`
}

type versioningConfiguration struct {
	XMLName   xml.Name `xml:"VersioningConfiguration"`
	Xmlns     string   `xml:"xmlns,attr"`
	Status    string   `xml:"Status,omitempty"`
	MfaDelete string   `xml:"MfaDelete,omitempty"`
}

type grantee struct {
	XMLNS       string `xml:"xmlns:xsi,attr"`
	Type        string `xml:"xsi:type,attr"`
	ID          string `xml:"ID,omitempty"`
	DisplayName string `xml:"DisplayName,omitempty"`
	URI         string `xml:"URI,omitempty"`
}

type grant struct {
	Grantee    grantee `xml:"Grantee"`
	Permission string  `xml:"Permission"`
}

type accessControlPolicy struct {
	XMLName xml.Name `xml:"AccessControlPolicy"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Owner   owner    `xml:"Owner"`
	Grants  []grant  `xml:"AccessControlList>Grant"`
}

// aclIn is an AccessControlPolicy as clients send it (namespaced
// attributes vary between clients, so only what matters is read).
type aclIn struct {
	Grants []struct {
		Grantee struct {
			ID           string `xml:"ID"`
			URI          string `xml:"URI"`
			EmailAddress string `xml:"EmailAddress"`
		} `xml:"Grantee"`
		Permission string `xml:"Permission"`
	} `xml:"AccessControlList>Grant"`
}

type corsConfiguration struct {
	XMLName xml.Name   `xml:"CORSConfiguration"`
	Xmlns   string     `xml:"xmlns,attr,omitempty"`
	Rules   []corsRule `xml:"CORSRule"`
}

type corsRule struct {
	ID             string   `xml:"ID,omitempty"`
	AllowedOrigins []string `xml:"AllowedOrigin"`
	AllowedMethods []string `xml:"AllowedMethod"`
	AllowedHeaders []string `xml:"AllowedHeader,omitempty"`
	ExposeHeaders  []string `xml:"ExposeHeader,omitempty"`
	MaxAgeSeconds  int32    `xml:"MaxAgeSeconds,omitempty"`
}

type tagging struct {
	XMLName xml.Name `xml:"Tagging"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Tags    []tag    `xml:"TagSet>Tag"`
}

type tag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type deleteRequest struct {
	XMLName xml.Name `xml:"Delete"`
	Quiet   bool     `xml:"Quiet"`
	Objects []struct {
		Key       string `xml:"Key"`
		VersionID string `xml:"VersionId"`
		// Conditions of a conditional delete: refused, not ignored.
		ETag             string `xml:"ETag"`
		LastModifiedTime string `xml:"LastModifiedTime"`
		Size             string `xml:"Size"`
	} `xml:"Object"`
}

type deleteResult struct {
	XMLName xml.Name      `xml:"DeleteResult"`
	Xmlns   string        `xml:"xmlns,attr"`
	Deleted []deletedXML  `xml:"Deleted"`
	Errors  []deleteError `xml:"Error"`
}

type deletedXML struct {
	Key                   string `xml:"Key"`
	VersionID             string `xml:"VersionId,omitempty"`
	DeleteMarker          bool   `xml:"DeleteMarker,omitempty"`
	DeleteMarkerVersionID string `xml:"DeleteMarkerVersionId,omitempty"`
}

type deleteError struct {
	Key       string `xml:"Key"`
	VersionID string `xml:"VersionId,omitempty"`
	Code      string `xml:"Code"`
	Message   string `xml:"Message"`
}

type copyObjectResult struct {
	XMLName      xml.Name `xml:"CopyObjectResult"`
	Xmlns        string   `xml:"xmlns,attr"`
	LastModified string   `xml:"LastModified"`
	ETag         string   `xml:"ETag"`
}

type copyPartResult struct {
	XMLName      xml.Name `xml:"CopyPartResult"`
	Xmlns        string   `xml:"xmlns,attr"`
	LastModified string   `xml:"LastModified"`
	ETag         string   `xml:"ETag"`
}

type listBucketResult struct {
	XMLName               xml.Name       `xml:"ListBucketResult"`
	Xmlns                 string         `xml:"xmlns,attr"`
	Name                  string         `xml:"Name"`
	Prefix                string         `xml:"Prefix"`
	Marker                *string        `xml:"Marker,omitempty"`
	NextMarker            string         `xml:"NextMarker,omitempty"`
	StartAfter            string         `xml:"StartAfter,omitempty"`
	ContinuationToken     string         `xml:"ContinuationToken,omitempty"`
	NextContinuationToken string         `xml:"NextContinuationToken,omitempty"`
	KeyCount              *int           `xml:"KeyCount,omitempty"`
	MaxKeys               int            `xml:"MaxKeys"`
	Delimiter             string         `xml:"Delimiter,omitempty"`
	EncodingType          string         `xml:"EncodingType,omitempty"`
	IsTruncated           bool           `xml:"IsTruncated"`
	Contents              []objectXML    `xml:"Contents"`
	CommonPrefixes        []commonPrefix `xml:"CommonPrefixes"`
}

type objectXML struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         uint64 `xml:"Size"`
	Owner        *owner `xml:"Owner,omitempty"`
	StorageClass string `xml:"StorageClass"`
}

type listVersionsResult struct {
	XMLName             xml.Name       `xml:"ListVersionsResult"`
	Xmlns               string         `xml:"xmlns,attr"`
	Name                string         `xml:"Name"`
	Prefix              string         `xml:"Prefix"`
	KeyMarker           string         `xml:"KeyMarker"`
	VersionIDMarker     string         `xml:"VersionIdMarker"`
	NextKeyMarker       string         `xml:"NextKeyMarker,omitempty"`
	NextVersionIDMarker string         `xml:"NextVersionIdMarker,omitempty"`
	MaxKeys             int            `xml:"MaxKeys"`
	Delimiter           string         `xml:"Delimiter,omitempty"`
	EncodingType        string         `xml:"EncodingType,omitempty"`
	IsTruncated         bool           `xml:"IsTruncated"`
	Versions            []versionXML   `xml:"Version"` // each names itself Version or DeleteMarker
	CommonPrefixes      []commonPrefix `xml:"CommonPrefixes"`
}

// versionXML is a Version or, by XMLName, a DeleteMarker of a version
// listing (S3 interleaves them in key order).
type versionXML struct {
	XMLName      xml.Name
	Key          string  `xml:"Key"`
	VersionID    string  `xml:"VersionId"`
	IsLatest     bool    `xml:"IsLatest"`
	LastModified string  `xml:"LastModified"`
	ETag         string  `xml:"ETag,omitempty"`
	Size         *uint64 `xml:"Size,omitempty"`
	Owner        *owner  `xml:"Owner,omitempty"`
	StorageClass string  `xml:"StorageClass,omitempty"`
}

type objectLockConfiguration struct {
	XMLName           xml.Name `xml:"ObjectLockConfiguration"`
	Xmlns             string   `xml:"xmlns,attr,omitempty"`
	ObjectLockEnabled string   `xml:"ObjectLockEnabled,omitempty"`
	Rule              *struct {
		DefaultRetention struct {
			Mode  string `xml:"Mode"`
			Days  *int   `xml:"Days,omitempty"`
			Years *int   `xml:"Years,omitempty"`
		} `xml:"DefaultRetention"`
	} `xml:"Rule,omitempty"`
}

type retentionXML struct {
	XMLName         xml.Name `xml:"Retention"`
	Xmlns           string   `xml:"xmlns,attr,omitempty"`
	Mode            string   `xml:"Mode,omitempty"`
	RetainUntilDate string   `xml:"RetainUntilDate,omitempty"`
}

type legalHoldXML struct {
	XMLName xml.Name `xml:"LegalHold"`
	Xmlns   string   `xml:"xmlns,attr,omitempty"`
	Status  string   `xml:"Status"`
}

type commonPrefix struct {
	Prefix string `xml:"Prefix"`
}

type initiateMultipartUploadResult struct {
	XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
	Xmlns    string   `xml:"xmlns,attr"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	UploadID string   `xml:"UploadId"`
}

type completeMultipartUpload struct {
	XMLName xml.Name `xml:"CompleteMultipartUpload"`
	Parts   []struct {
		PartNumber int    `xml:"PartNumber"`
		ETag       string `xml:"ETag"`
	} `xml:"Part"`
}

type completeMultipartUploadResult struct {
	XMLName  xml.Name `xml:"CompleteMultipartUploadResult"`
	Xmlns    string   `xml:"xmlns,attr"`
	Location string   `xml:"Location"`
	Bucket   string   `xml:"Bucket"`
	Key      string   `xml:"Key"`
	ETag     string   `xml:"ETag"`
}

type listPartsResult struct {
	XMLName              xml.Name  `xml:"ListPartsResult"`
	Xmlns                string    `xml:"xmlns,attr"`
	Bucket               string    `xml:"Bucket"`
	Key                  string    `xml:"Key"`
	UploadID             string    `xml:"UploadId"`
	Initiator            owner     `xml:"Initiator"`
	Owner                owner     `xml:"Owner"`
	StorageClass         string    `xml:"StorageClass"`
	PartNumberMarker     int       `xml:"PartNumberMarker"`
	NextPartNumberMarker int       `xml:"NextPartNumberMarker"`
	MaxParts             int       `xml:"MaxParts"`
	IsTruncated          bool      `xml:"IsTruncated"`
	Parts                []partXML `xml:"Part"`
}

type partXML struct {
	PartNumber   int    `xml:"PartNumber"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         uint64 `xml:"Size"`
}

type listMultipartUploadsResult struct {
	XMLName            xml.Name       `xml:"ListMultipartUploadsResult"`
	Xmlns              string         `xml:"xmlns,attr"`
	Bucket             string         `xml:"Bucket"`
	KeyMarker          string         `xml:"KeyMarker"`
	UploadIDMarker     string         `xml:"UploadIdMarker"`
	NextKeyMarker      string         `xml:"NextKeyMarker"`
	NextUploadIDMarker string         `xml:"NextUploadIdMarker"`
	Prefix             string         `xml:"Prefix"`
	MaxUploads         int            `xml:"MaxUploads"`
	IsTruncated        bool           `xml:"IsTruncated"`
	EncodingType       string         `xml:"EncodingType,omitempty"`
	Delimiter          string         `xml:"Delimiter,omitempty"`
	Uploads            []uploadXML    `xml:"Upload"`
	CommonPrefixes     []commonPrefix `xml:"CommonPrefixes"`
}

type uploadXML struct {
	Key          string `xml:"Key"`
	UploadID     string `xml:"UploadId"`
	Initiator    owner  `xml:"Initiator"`
	Owner        owner  `xml:"Owner"`
	StorageClass string `xml:"StorageClass"`
	Initiated    string `xml:"Initiated"`
}

// appendXML appends r as xml.Marshal writes it: a version listing is a
// thousand entries a page, and encoding/xml's reflection was a third of
// ListObjectVersions' time (xml_test.go checks the bytes are the same).
func (r *listVersionsResult) appendXML(b *bytes.Buffer) {
	b.WriteString(`<ListVersionsResult xmlns="`)
	xml.EscapeText(b, []byte(r.Xmlns))
	b.WriteString(`">`)
	elem(b, "Name", r.Name)
	elem(b, "Prefix", r.Prefix)
	elem(b, "KeyMarker", r.KeyMarker)
	elem(b, "VersionIdMarker", r.VersionIDMarker)
	if r.NextKeyMarker != "" {
		elem(b, "NextKeyMarker", r.NextKeyMarker)
	}
	if r.NextVersionIDMarker != "" {
		elem(b, "NextVersionIdMarker", r.NextVersionIDMarker)
	}
	b.WriteString("<MaxKeys>")
	b.WriteString(strconv.Itoa(r.MaxKeys))
	b.WriteString("</MaxKeys>")
	if r.Delimiter != "" {
		elem(b, "Delimiter", r.Delimiter)
	}
	if r.EncodingType != "" {
		elem(b, "EncodingType", r.EncodingType)
	}
	b.WriteString("<IsTruncated>")
	b.WriteString(strconv.FormatBool(r.IsTruncated))
	b.WriteString("</IsTruncated>")
	for i := range r.Versions {
		v := &r.Versions[i]
		b.WriteByte('<')
		b.WriteString(v.XMLName.Local)
		b.WriteByte('>')
		elem(b, "Key", v.Key)
		elem(b, "VersionId", v.VersionID)
		b.WriteString("<IsLatest>")
		b.WriteString(strconv.FormatBool(v.IsLatest))
		b.WriteString("</IsLatest>")
		elem(b, "LastModified", v.LastModified)
		if v.ETag != "" {
			elem(b, "ETag", v.ETag)
		}
		if v.Size != nil {
			b.WriteString("<Size>")
			b.WriteString(strconv.FormatUint(*v.Size, 10))
			b.WriteString("</Size>")
		}
		if v.Owner != nil {
			b.WriteString("<Owner>")
			elem(b, "ID", v.Owner.ID)
			elem(b, "DisplayName", v.Owner.DisplayName)
			b.WriteString("</Owner>")
		}
		if v.StorageClass != "" {
			elem(b, "StorageClass", v.StorageClass)
		}
		b.WriteString("</")
		b.WriteString(v.XMLName.Local)
		b.WriteByte('>')
	}
	for _, p := range r.CommonPrefixes {
		b.WriteString("<CommonPrefixes>")
		elem(b, "Prefix", p.Prefix)
		b.WriteString("</CommonPrefixes>")
	}
	b.WriteString("</ListVersionsResult>")
}

// elem appends <name>s</name>, s escaped as encoding/xml escapes it.
func elem(b *bytes.Buffer, name, s string) {
	b.WriteByte('<')
	b.WriteString(name)
	b.WriteByte('>')
	if plainXML(s) {
		b.WriteString(s)
	} else {
		xml.EscapeText(b, []byte(s))
	}
	b.WriteString("</")
	b.WriteString(name)
	b.WriteByte('>')
}

// plainXML reports whether s needs no escaping: printable ASCII other
// than the five XML specials.
func plainXML(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '<' || c == '>' || c == '&' || c == '\'' || c == '"' {
			return false
		}
	}
	return true
}
