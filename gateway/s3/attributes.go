package s3

import (
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// GetObjectAttributes: what HEAD says, plus the parts of a multipart
// object, in one XML answer. The attributes wanted are named in
// x-amz-object-attributes; an unknown one is refused.

type objectAttributes struct {
	XMLName      xml.Name     `xml:"GetObjectAttributesResponse"`
	Xmlns        string       `xml:"xmlns,attr"`
	ETag         string       `xml:"ETag,omitempty"`
	Checksum     *checksumXML `xml:"Checksum,omitempty"`
	ObjectParts  *partsXML    `xml:"ObjectParts,omitempty"`
	StorageClass string       `xml:"StorageClass,omitempty"`
	ObjectSize   *uint64      `xml:"ObjectSize,omitempty"`
}

type checksumXML struct {
	CRC32        string `xml:"ChecksumCRC32,omitempty"`
	CRC32C       string `xml:"ChecksumCRC32C,omitempty"`
	CRC64NVME    string `xml:"ChecksumCRC64NVME,omitempty"`
	SHA1         string `xml:"ChecksumSHA1,omitempty"`
	SHA256       string `xml:"ChecksumSHA256,omitempty"`
	ChecksumType string `xml:"ChecksumType,omitempty"`
}

type partsXML struct {
	TotalPartsCount      int          `xml:"PartsCount"`
	PartNumberMarker     int          `xml:"PartNumberMarker"`
	NextPartNumberMarker int          `xml:"NextPartNumberMarker"`
	MaxParts             int          `xml:"MaxParts"`
	IsTruncated          bool         `xml:"IsTruncated"`
	Parts                []objectPart `xml:"Part"`
}

type objectPart struct {
	PartNumber int    `xml:"PartNumber"`
	Size       uint64 `xml:"Size"`
}

func (s *Server) getObjectAttributes(q *request) error {
	ns, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	h := q.r.Header
	want := map[string]bool{}
	for _, a := range strings.Split(strings.Join(h.Values("X-Amz-Object-Attributes"), ","), ",") {
		switch a = strings.TrimSpace(a); a {
		case "":
		case "ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize":
			want[a] = true
		default:
			return apiErr(http.StatusBadRequest, "InvalidArgument", "Invalid attribute name specified: "+a)
		}
	}
	if len(want) == 0 {
		return apiErr(http.StatusBadRequest, "InvalidArgument", "x-amz-object-attributes must name at least one attribute")
	}
	maxParts, marker := 1000, 0
	for name, p := range map[string]*int{"X-Amz-Max-Parts": &maxParts, "X-Amz-Part-Number-Marker": &marker} {
		if v := h.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return apiErr(http.StatusBadRequest, "InvalidArgument", strings.ToLower(name)+" must be a non-negative integer")
			}
			*p = n
		}
	}
	f, err := s.stat(q)
	if err != nil {
		return err
	}
	ino := f.Inode
	out := objectAttributes{Xmlns: s3NS}
	if want["ETag"] {
		out.ETag = strings.Trim(etagOf(ino), `"`)
	}
	if want["StorageClass"] {
		out.StorageClass = s.classes.name(ns, ino) // class.go
	}
	if want["ObjectSize"] {
		size := ino.Size
		if f.IsDir() {
			size = 0
		}
		out.ObjectSize = &size
	}
	if want["Checksum"] {
		c := &checksumXML{
			CRC32: ino.Headers["X-Amz-Checksum-Crc32"], CRC32C: ino.Headers["X-Amz-Checksum-Crc32c"],
			CRC64NVME: ino.Headers["X-Amz-Checksum-Crc64nvme"], SHA1: ino.Headers["X-Amz-Checksum-Sha1"],
			SHA256: ino.Headers["X-Amz-Checksum-Sha256"],
		}
		if *c != (checksumXML{}) {
			c.ChecksumType = "FULL_OBJECT"
			out.Checksum = c
		}
	}
	if want["ObjectParts"] && strings.Contains(ino.Etag, "-") {
		if _, _, _, err := partRange(http.Header{}, ino, "1"); err != nil {
			return err
		}
		p := &partsXML{TotalPartsCount: len(ino.PartSizes), PartNumberMarker: marker, MaxParts: maxParts}
		for i := marker; i < len(ino.PartSizes); i++ {
			if len(p.Parts) == maxParts {
				p.IsTruncated = true
				break
			}
			p.Parts = append(p.Parts, objectPart{PartNumber: i + 1, Size: ino.PartSizes[i]})
			p.NextPartNumberMarker = i + 1
		}
		out.ObjectParts = p
	}
	q.w.Header().Set("Last-Modified", time.Unix(0, ino.MtimeNs).UTC().Format(http.TimeFormat))
	writeXML(q.w, http.StatusOK, out)
	return nil
}
