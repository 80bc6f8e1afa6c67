package s3

import (
	"encoding/xml"
	"net/http"
	"time"

	"cairn/proto/metapb"
)

// Bucket lifecycle configuration. The rules are kept in meta with the
// bucket's other configuration, and meta's leader runs them
// (meta/lifecycle.go). Actions this store does not have (transitions to
// other classes, size filters, NewerNoncurrentVersions) are refused, not
// stored and ignored.

type lifecycleConfiguration struct {
	XMLName xml.Name        `xml:"LifecycleConfiguration"`
	Xmlns   string          `xml:"xmlns,attr,omitempty"`
	Rules   []lifecycleRule `xml:"Rule"`
}

// unknownXML catches elements a type does not know, to refuse them.
type unknownXML struct {
	XMLName xml.Name
}

type lcTag struct {
	Key   string `xml:"Key"`
	Value string `xml:"Value"`
}

type lcAnd struct {
	Prefix *string      `xml:"Prefix"`
	Tags   []lcTag      `xml:"Tag"`
	Other  []unknownXML `xml:",any"`
}

type lcFilter struct {
	Prefix *string      `xml:"Prefix"`
	Tag    *lcTag       `xml:"Tag"`
	And    *lcAnd       `xml:"And"`
	Other  []unknownXML `xml:",any"`
}

type lcExpiration struct {
	Days                      int32        `xml:"Days,omitempty"`
	Date                      string       `xml:"Date,omitempty"`
	ExpiredObjectDeleteMarker *bool        `xml:"ExpiredObjectDeleteMarker"`
	Other                     []unknownXML `xml:",any"`
}

type lcNoncurrent struct {
	NoncurrentDays int32        `xml:"NoncurrentDays"`
	Other          []unknownXML `xml:",any"`
}

type lcAbort struct {
	DaysAfterInitiation int32        `xml:"DaysAfterInitiation"`
	Other               []unknownXML `xml:",any"`
}

type lifecycleRule struct {
	ID         string        `xml:"ID,omitempty"`
	Status     string        `xml:"Status"`
	Filter     *lcFilter     `xml:"Filter"`
	Prefix     *string       `xml:"Prefix"` // the older form of Filter
	Expiration *lcExpiration `xml:"Expiration"`
	Noncurrent *lcNoncurrent `xml:"NoncurrentVersionExpiration"`
	Abort      *lcAbort      `xml:"AbortIncompleteMultipartUpload"`
	Other      []unknownXML  `xml:",any"`
}

func refuseUnknown(where string, other []unknownXML) error {
	if len(other) == 0 {
		return nil
	}
	return errNotImplemented("lifecycle: " + other[0].XMLName.Local + " in " + where + " is not supported")
}

func lcInvalid(msg string) error {
	return apiErr(http.StatusBadRequest, "InvalidArgument", msg)
}

// lifecycleRules checks a configuration and converts it to meta's rules.
func lifecycleRules(in *lifecycleConfiguration) ([]*metapb.S3LifecycleRule, error) {
	if len(in.Rules) == 0 || len(in.Rules) > 1000 {
		return nil, errMalformedXML()
	}
	ids := map[string]bool{}
	var out []*metapb.S3LifecycleRule
	for _, r := range in.Rules {
		if err := refuseUnknown("Rule", r.Other); err != nil {
			return nil, err
		}
		if len(r.ID) > 255 {
			return nil, lcInvalid("ID length should not exceed allowed limit of 255")
		}
		if r.ID != "" {
			if ids[r.ID] {
				return nil, lcInvalid("Rule ID must be unique. Found same ID for more than one rule")
			}
			ids[r.ID] = true
		}
		m := &metapb.S3LifecycleRule{Id: r.ID}
		switch r.Status {
		case "Enabled":
			m.Enabled = true
		case "Disabled":
		default:
			return nil, errMalformedXML()
		}
		if err := lcFilterOf(&r, m); err != nil {
			return nil, err
		}
		if e := r.Expiration; e != nil {
			if err := refuseUnknown("Expiration", e.Other); err != nil {
				return nil, err
			}
			n := 0
			if e.Days != 0 {
				n++
				if e.Days < 0 {
					return nil, lcInvalid("'Days' for Expiration action must be a positive integer")
				}
				m.ExpirationDays = e.Days
			}
			if e.Date != "" {
				n++
				t, err := time.Parse(time.RFC3339, e.Date)
				if err != nil {
					if t, err = time.Parse("2006-01-02", e.Date); err != nil {
						return nil, lcInvalid("'Date' must be in ISO 8601 format")
					}
				}
				if t.Year() < 1971 || t.Year() > 2200 { // kept as int64 ns
					return nil, lcInvalid("'Date' must be between 1971 and 2200")
				}
				if !t.UTC().Truncate(24 * time.Hour).Equal(t) {
					return nil, lcInvalid("'Date' must be at midnight GMT")
				}
				m.ExpirationDateNs = t.UnixNano()
			}
			if e.ExpiredObjectDeleteMarker != nil {
				n++
				if len(m.Tags) > 0 {
					return nil, lcInvalid("ExpiredObjectDeleteMarker cannot be specified with tags")
				}
				m.ExpiredObjectDeleteMarker = *e.ExpiredObjectDeleteMarker
			}
			if n != 1 {
				return nil, errMalformedXML()
			}
		}
		if nc := r.Noncurrent; nc != nil {
			if err := refuseUnknown("NoncurrentVersionExpiration", nc.Other); err != nil {
				return nil, err
			}
			if nc.NoncurrentDays <= 0 {
				return nil, lcInvalid("'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive integer")
			}
			m.NoncurrentDays = nc.NoncurrentDays
		}
		if a := r.Abort; a != nil {
			if err := refuseUnknown("AbortIncompleteMultipartUpload", a.Other); err != nil {
				return nil, err
			}
			if a.DaysAfterInitiation <= 0 {
				return nil, lcInvalid("'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a positive integer")
			}
			if len(m.Tags) > 0 {
				return nil, lcInvalid("AbortIncompleteMultipartUpload cannot be specified with Tags.")
			}
			m.AbortUploadDays = a.DaysAfterInitiation
		}
		if r.Expiration == nil && r.Noncurrent == nil && r.Abort == nil {
			return nil, lcInvalid("At least one action needs to be specified in a rule")
		}
		out = append(out, m)
	}
	return out, nil
}

func lcFilterOf(r *lifecycleRule, m *metapb.S3LifecycleRule) error {
	f := r.Filter
	if f == nil {
		if r.Prefix == nil {
			return errMalformedXML() // S3 asks for a Filter or a Prefix
		}
		m.Prefix = *r.Prefix
		return nil
	}
	if r.Prefix != nil {
		return errMalformedXML()
	}
	if err := refuseUnknown("Filter", f.Other); err != nil {
		return err
	}
	n := 0
	if f.Prefix != nil {
		n++
		m.Prefix = *f.Prefix
	}
	if f.Tag != nil {
		n++
		m.Tags = map[string]string{f.Tag.Key: f.Tag.Value}
	}
	if a := f.And; a != nil {
		n++
		if err := refuseUnknown("And", a.Other); err != nil {
			return err
		}
		if a.Prefix != nil {
			m.Prefix = *a.Prefix
		}
		for _, t := range a.Tags {
			if m.Tags == nil {
				m.Tags = map[string]string{}
			}
			if _, dup := m.Tags[t.Key]; dup {
				return lcInvalid("Duplicate Tag Keys are not allowed.")
			}
			m.Tags[t.Key] = t.Value
		}
	}
	if n > 1 {
		return errMalformedXML()
	}
	return nil
}

func (s *Server) putBucketLifecycle(q *request) error {
	cfg, err := s.bucketConfig(q, write)
	if err != nil {
		return err
	}
	var in lifecycleConfiguration
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	rules, err := lifecycleRules(&in)
	if err != nil {
		return err
	}
	cfg.Lifecycle = rules
	if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) getBucketLifecycle(q *request) error {
	cfg, err := s.bucketConfig(q, read)
	if err != nil {
		return err
	}
	if len(cfg.Lifecycle) == 0 {
		return apiErr(http.StatusNotFound, "NoSuchLifecycleConfiguration", "The lifecycle configuration does not exist")
	}
	out := lifecycleConfiguration{Xmlns: s3NS}
	for _, m := range cfg.Lifecycle {
		r := lifecycleRule{ID: m.Id, Status: "Disabled", Filter: &lcFilter{}}
		if m.Enabled {
			r.Status = "Enabled"
		}
		prefix := m.Prefix
		switch {
		case len(m.Tags) == 0:
			r.Filter.Prefix = &prefix
		case len(m.Tags) == 1 && m.Prefix == "":
			for k, v := range m.Tags {
				r.Filter.Tag = &lcTag{k, v}
			}
		default:
			a := &lcAnd{Prefix: &prefix}
			for _, k := range sortedKeys(m.Tags) {
				a.Tags = append(a.Tags, lcTag{k, m.Tags[k]})
			}
			r.Filter.And = a
		}
		if m.ExpirationDays > 0 || m.ExpirationDateNs > 0 || m.ExpiredObjectDeleteMarker {
			e := &lcExpiration{Days: m.ExpirationDays}
			if m.ExpirationDateNs > 0 {
				e.Date = time.Unix(0, m.ExpirationDateNs).UTC().Format("2006-01-02T15:04:05.000Z")
			}
			if m.ExpiredObjectDeleteMarker {
				t := true
				e.ExpiredObjectDeleteMarker = &t
			}
			r.Expiration = e
		}
		if m.NoncurrentDays > 0 {
			r.Noncurrent = &lcNoncurrent{NoncurrentDays: m.NoncurrentDays}
		}
		if m.AbortUploadDays > 0 {
			r.Abort = &lcAbort{DaysAfterInitiation: m.AbortUploadDays}
		}
		out.Rules = append(out.Rules, r)
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteBucketLifecycle(q *request) error {
	cfg, err := s.bucketConfig(q, write)
	if err != nil {
		return err
	}
	cfg.Lifecycle = nil
	if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}
