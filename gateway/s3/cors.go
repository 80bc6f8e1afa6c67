package s3

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"cairn/pathname"
	"cairn/proto/metapb"
)

// corsCache keeps bucket CORS rules briefly: browsers send Origin on
// every request, and a rule change may take corsTTL to apply.
type corsCache struct {
	mu sync.Mutex
	m  map[string]corsEntry
}

type corsEntry struct {
	rules   []*metapb.S3CORSRule
	expires time.Time
}

const corsTTL = 5 * time.Second

func (c *corsCache) drop(bucket string) {
	c.mu.Lock()
	delete(c.m, bucket)
	c.mu.Unlock()
}

func (s *Server) corsRules(q *request, bucket string) []*metapb.S3CORSRule {
	now := time.Now()
	s.cors.mu.Lock()
	e, ok := s.cors.m[bucket]
	s.cors.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.rules
	}
	c, err := s.meta.S3GetBucketConfig(q.ctx(), &metapb.NamespaceRequest{Name: bucket})
	if err != nil {
		return nil
	}
	s.cors.mu.Lock()
	if len(s.cors.m) > 10_000 {
		clear(s.cors.m)
	}
	s.cors.m[bucket] = corsEntry{c.Cors, now.Add(corsTTL)}
	s.cors.mu.Unlock()
	return c.Cors
}

func matchWild(pattern, s string) bool {
	if pattern == "*" {
		return true
	}
	before, after, ok := strings.Cut(pattern, "*")
	if !ok {
		return strings.EqualFold(pattern, s)
	}
	return len(s) >= len(before)+len(after) && strings.HasPrefix(s, before) && strings.HasSuffix(s, after)
}

// corsMatch finds the first rule allowing origin, method and headers.
func corsMatch(rules []*metapb.S3CORSRule, origin, method string, headers []string) *metapb.S3CORSRule {
next:
	for _, r := range rules {
		okOrigin := false
		for _, o := range r.AllowedOrigins {
			okOrigin = okOrigin || matchWild(o, origin)
		}
		okMethod := false
		for _, m := range r.AllowedMethods {
			okMethod = okMethod || m == method
		}
		if !okOrigin || !okMethod {
			continue
		}
		for _, h := range headers {
			h = strings.TrimSpace(h)
			if h == "" {
				continue
			}
			found := false
			for _, a := range r.AllowedHeaders {
				found = found || matchWild(strings.ToLower(a), strings.ToLower(h))
			}
			if !found {
				continue next
			}
		}
		return r
	}
	return nil
}

func setCORS(h http.Header, r *metapb.S3CORSRule, origin string) {
	allowed := origin
	for _, o := range r.AllowedOrigins {
		if o == "*" {
			allowed = "*"
		}
	}
	h.Set("Access-Control-Allow-Origin", allowed)
	h.Set("Access-Control-Allow-Methods", strings.Join(r.AllowedMethods, ", "))
	if len(r.ExposeHeaders) > 0 {
		h.Set("Access-Control-Expose-Headers", strings.Join(r.ExposeHeaders, ", "))
	}
	if allowed != "*" {
		h.Add("Vary", "Origin")
	}
}

// preflight answers a browser's OPTIONS request from the bucket's rules.
func (s *Server) preflight(w http.ResponseWriter, r *http.Request, bucket string) int {
	origin, method := r.Header.Get("Origin"), r.Header.Get("Access-Control-Request-Method")
	if bucket == "" || origin == "" || method == "" {
		return writeError(w, r, errInvalidRequest("a CORS preflight needs a bucket, Origin and Access-Control-Request-Method"))
	}
	q := &request{w: w, r: r}
	headers := strings.Split(r.Header.Get("Access-Control-Request-Headers"), ",")
	rule := corsMatch(s.corsRules(q, bucket), origin, method, headers)
	if rule == nil {
		return writeError(w, r, apiErr(http.StatusForbidden, "AccessForbidden", "CORSResponse: This CORS request is not allowed."))
	}
	h := w.Header()
	setCORS(h, rule, origin)
	if hs := r.Header.Get("Access-Control-Request-Headers"); hs != "" {
		h.Set("Access-Control-Allow-Headers", hs)
	}
	if rule.MaxAgeSeconds > 0 {
		h.Set("Access-Control-Max-Age", strconv.Itoa(int(rule.MaxAgeSeconds)))
	}
	w.WriteHeader(http.StatusOK)
	return http.StatusOK
}

// corsHeaders adds the CORS response headers to an actual request.
func (s *Server) corsHeaders(w http.ResponseWriter, r *http.Request, bucket string) {
	if err := pathname.ValidNamespace(bucket); err != nil {
		return
	}
	q := &request{w: w, r: r}
	if rule := corsMatch(s.corsRules(q, bucket), r.Header.Get("Origin"), r.Method, nil); rule != nil {
		setCORS(w.Header(), rule, r.Header.Get("Origin"))
	}
}

func (s *Server) putBucketCors(q *request) error {
	cfg, err := s.bucketConfig(q, write)
	if err != nil {
		return err
	}
	var in corsConfiguration
	if err := readXML(q.body, &in); err != nil {
		return err
	}
	if len(in.Rules) == 0 || len(in.Rules) > 100 {
		return errMalformedXML()
	}
	cfg.Cors = nil
	for _, r := range in.Rules {
		if len(r.AllowedOrigins) == 0 || len(r.AllowedMethods) == 0 {
			return errMalformedXML()
		}
		for _, m := range r.AllowedMethods {
			switch m {
			case "GET", "PUT", "POST", "DELETE", "HEAD":
			default:
				return errInvalidRequest("Found unsupported HTTP method in CORS config: " + m)
			}
		}
		cfg.Cors = append(cfg.Cors, &metapb.S3CORSRule{
			Id: r.ID, AllowedOrigins: r.AllowedOrigins, AllowedMethods: r.AllowedMethods,
			AllowedHeaders: r.AllowedHeaders, ExposeHeaders: r.ExposeHeaders, MaxAgeSeconds: r.MaxAgeSeconds,
		})
	}
	if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
		return notExistAs(err, errNoSuchBucket())
	}
	s.cors.drop(q.bucket)
	q.w.WriteHeader(http.StatusOK)
	return nil
}

func (s *Server) getBucketCors(q *request) error {
	cfg, err := s.bucketConfig(q, read)
	if err != nil {
		return err
	}
	if len(cfg.Cors) == 0 {
		return apiErr(http.StatusNotFound, "NoSuchCORSConfiguration", "The CORS configuration does not exist")
	}
	out := corsConfiguration{Xmlns: s3NS}
	for _, r := range cfg.Cors {
		out.Rules = append(out.Rules, corsRule{ID: r.Id, AllowedOrigins: r.AllowedOrigins, AllowedMethods: r.AllowedMethods,
			AllowedHeaders: r.AllowedHeaders, ExposeHeaders: r.ExposeHeaders, MaxAgeSeconds: r.MaxAgeSeconds})
	}
	writeXML(q.w, http.StatusOK, out)
	return nil
}

func (s *Server) deleteBucketCors(q *request) error {
	cfg, err := s.bucketConfig(q, write)
	if err != nil {
		return err
	}
	cfg.Cors = nil
	if _, err := s.meta.S3PutBucketConfig(q.ctx(), cfg); err != nil {
		return err
	}
	s.cors.drop(q.bucket)
	q.w.WriteHeader(http.StatusNoContent)
	return nil
}
