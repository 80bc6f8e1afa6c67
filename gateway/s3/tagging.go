package s3

import (
	"net/http"
	"net/url"
	"strings"
)

// parseTagging reads the x-amz-tagging header (URL query encoding).
func parseTagging(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	v, err := url.ParseQuery(s)
	if err != nil {
		return nil, apiErr(http.StatusBadRequest, "InvalidArgument", "The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL query parameters without tag name duplicates.")
	}
	tags := map[string]string{}
	for k, vs := range v {
		if len(vs) != 1 {
			return nil, apiErr(http.StatusBadRequest, "InvalidArgument", "duplicate tag key "+k)
		}
		tags[k] = vs[0]
	}
	return tags, checkTags(tags)
}

// parseTaggingXML reads a Tagging document given whole (POST Object's
// tagging field); "" is no tags.
func parseTaggingXML(doc string) (map[string]string, error) {
	if doc == "" {
		return nil, nil
	}
	var in tagging
	if err := readXML(&body{r: strings.NewReader(doc), size: int64(len(doc))}, &in); err != nil {
		return nil, err
	}
	return tagMap(in)
}

// tagMap is a Tagging document's tags, checked.
func tagMap(in tagging) (map[string]string, error) {
	tags := map[string]string{}
	for _, t := range in.Tags {
		if _, dup := tags[t.Key]; dup {
			return nil, apiErr(http.StatusBadRequest, "InvalidTag", "Cannot provide multiple Tags with the same key")
		}
		tags[t.Key] = t.Value
	}
	return tags, checkTags(tags)
}

func checkTags(tags map[string]string) error {
	if len(tags) > 10 {
		return apiErr(http.StatusBadRequest, "BadRequest", "Object tags cannot be greater than 10")
	}
	for k, v := range tags {
		if k == "" || len(k) > 128 || len(v) > 256 {
			return apiErr(http.StatusBadRequest, "InvalidTag", "a tag key is 1 to 128 characters, a value at most 256")
		}
	}
	return nil
}

func (s *Server) getObjectTagging(q *request) error {
	if _, err := s.authorize(q, read); err != nil {
		return err
	}
	f, err := s.stat(q)
	if err != nil {
		return err
	}
	out := tagging{Xmlns: s3NS, Tags: []tag{}}
	for _, k := range sortedKeys(f.Inode.Tags) {
		out.Tags = append(out.Tags, tag{Key: k, Value: f.Inode.Tags[k]})
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

func (s *Server) setTags(q *request, tags map[string]string) error {
	if _, err := s.authorize(q, write); err != nil {
		return err
	}
	f, err := s.stat(q)
	if err != nil {
		return err
	}
	if f.IsDir() {
		return errInvalidRequest("directories carry no tags")
	}
	if _, err := s.client.SetTags(q.ctx(), q.bucket, f.Path, tags); err != nil {
		return s.keyError(err)
	}
	return nil
}

func (s *Server) putObjectTagging(q *request) error {
	var in tagging
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	tags, err := tagMap(in)
	if err != nil {
		return err
	}
	if err := s.setTags(q, tags); err != nil {
		return err
	}
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) deleteObjectTagging(q *request) error {
	if err := s.setTags(q, nil); err != nil {
		return err
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getBucketTagging(q *request) error {
	cfg, err := s.bucketConfig(q, read)
	if err != nil {
		return err
	}
	if len(cfg.Tags) == 0 {
		return apiErr(http.StatusNotFound, "NoSuchTagSet", "The TagSet does not exist")
	}
	out := tagging{Xmlns: s3NS}
	for _, k := range sortedKeys(cfg.Tags) {
		out.Tags = append(out.Tags, tag{Key: k, Value: cfg.Tags[k]})
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

func (s *Server) putBucketTagging(q *request) error {
	cfg, err := s.bucketConfig(q, write)
	if err != nil {
		return err
	}
	var in tagging
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	cfg.Tags = map[string]string{}
	for _, t := range in.Tags {
		if _, dup := cfg.Tags[t.Key]; dup || t.Key == "" || len(t.Key) > 128 || len(t.Value) > 256 {
			return apiErr(http.StatusBadRequest, "InvalidTag", "tag keys are unique, 1 to 128 characters; values at most 256")
		}
		cfg.Tags[t.Key] = t.Value
	}
	if len(cfg.Tags) > 50 {
		return apiErr(http.StatusBadRequest, "InvalidTag", "a bucket has at most 50 tags")
	}
	if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) deleteBucketTagging(q *request) error {
	cfg, err := s.bucketConfig(q, write)
	if err != nil {
		return err
	}
	cfg.Tags = nil
	if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
		return err
	}
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}
