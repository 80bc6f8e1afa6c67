package s3

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"cairn/proto/metapb"
)

func TestCondition(t *testing.T) {
	mtime := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	before, after := mtime.Add(-time.Hour).Format(http.TimeFormat), mtime.Add(time.Hour).Format(http.TimeFormat)
	const etag = `"abc"`
	for _, tc := range []struct {
		h    map[string]string
		want int
	}{
		{nil, 0},
		{map[string]string{"If-Match": `"abc"`}, 0},
		{map[string]string{"If-Match": `abc`}, 0},
		{map[string]string{"If-Match": `"x", "abc"`}, 0},
		{map[string]string{"If-Match": `*`}, 0},
		{map[string]string{"If-Match": `"x"`}, 412},
		{map[string]string{"If-Unmodified-Since": before}, 412},
		{map[string]string{"If-Unmodified-Since": after}, 0},
		{map[string]string{"If-Match": `"abc"`, "If-Unmodified-Since": before}, 0}, // If-Match wins
		{map[string]string{"If-None-Match": `"abc"`}, 304},
		{map[string]string{"If-None-Match": `W/"abc"`}, 304},
		{map[string]string{"If-None-Match": `"x"`}, 0},
		{map[string]string{"If-Modified-Since": after}, 304},
		{map[string]string{"If-Modified-Since": before}, 0},
		{map[string]string{"If-None-Match": `"x"`, "If-Modified-Since": after}, 0}, // If-None-Match wins
		{map[string]string{"If-Modified-Since": "garbage"}, 0},
	} {
		h := http.Header{}
		for k, v := range tc.h {
			h.Set(k, v)
		}
		if got := condition(h, etag, mtime, ""); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.h, got, tc.want)
		}
	}
}

func TestCleanKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		p    string
		dir  bool
		code string
	}{
		{"a/b.txt", "a/b.txt", false, ""},
		{"a/b/", "a/b", true, ""},
		{"日本/x", "日本/x", false, ""},
		{"/a", "", false, "InvalidArgument"},
		{"a//b", "", false, "InvalidArgument"},
		{"a/../b", "", false, "InvalidArgument"},
		{"./a", "", false, "InvalidArgument"},
		{"a\x00b", "", false, "InvalidArgument"},
		{strings.Repeat("a", 300), "", false, "KeyTooLongError"},
	} {
		p, dir, err := cleanKey(tc.key)
		code := ""
		if err != nil {
			code = toAPI(err).code
		}
		if p != tc.p || dir != tc.dir || code != tc.code {
			t.Errorf("cleanKey(%q) = %q %v %q, want %q %v %q", tc.key, p, dir, code, tc.p, tc.dir, tc.code)
		}
	}
}

func TestCORSMatch(t *testing.T) {
	rules := []*metapb.S3CORSRule{
		{AllowedOrigins: []string{"https://*.example.com"}, AllowedMethods: []string{"GET"}, AllowedHeaders: []string{"x-amz-*"}},
		{AllowedOrigins: []string{"*"}, AllowedMethods: []string{"PUT"}},
	}
	for _, tc := range []struct {
		origin, method string
		headers        []string
		want           int // rule index, -1 none
	}{
		{"https://app.example.com", "GET", nil, 0},
		{"https://app.example.com", "GET", []string{"X-Amz-Date"}, 0},
		{"https://app.example.com", "GET", []string{"Authorization"}, -1},
		{"https://example.org", "GET", nil, -1},
		{"https://example.org", "PUT", nil, 1},
		{"https://example.org", "PUT", []string{"content-type"}, -1},
		{"https://app.example.com", "DELETE", nil, -1},
	} {
		got := corsMatch(rules, tc.origin, tc.method, tc.headers)
		idx := -1
		for i, r := range rules {
			if r == got {
				idx = i
			}
		}
		if idx != tc.want {
			t.Errorf("%s %s %v: rule %d, want %d", tc.origin, tc.method, tc.headers, idx, tc.want)
		}
	}
}

func TestParseTagging(t *testing.T) {
	if tags, err := parseTagging("a=1&b=x%20y"); err != nil || tags["a"] != "1" || tags["b"] != "x y" {
		t.Fatalf("%v %v", tags, err)
	}
	for _, bad := range []string{"a=1&a=2", "=x", "a=1&b=1&c=1&d=1&e=1&f=1&g=1&h=1&i=1&j=1&k=1"} {
		if _, err := parseTagging(bad); err == nil {
			t.Errorf("parseTagging(%q) accepted", bad)
		}
	}
}
