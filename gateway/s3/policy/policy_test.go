package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestParseRefuses(t *testing.T) {
	stmt := func(s string) string { return `{"Version":"2012-10-17","Statement":[` + s + `]}` }
	ok := `"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"`
	for _, c := range []struct{ name, doc, want string }{
		{"not json", `{`, "not valid JSON"},
		{"array", `[]`, "must be a JSON object"},
		{"bad version", `{"Version":"2020-01-01","Statement":[{` + ok + `}]}`, "valid version"},
		{"unknown top", `{"Version":"2012-10-17","Foo":1,"Statement":[{` + ok + `}]}`, `"Foo"`},
		{"no statement", `{"Version":"2012-10-17"}`, "Statement"},
		{"empty statements", `{"Statement":[]}`, "empty"},
		{"lower-case element", stmt(`{"effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), `"effect"`},
		{"NotPrincipal", stmt(`{"Effect":"Deny","NotPrincipal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), "NotPrincipal"},
		{"NotAction", stmt(`{"Effect":"Deny","Principal":"*","NotAction":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), "NotAction"},
		{"NotResource", stmt(`{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","NotResource":"arn:aws:s3:::b/*"}`), "NotResource"},
		{"no effect", stmt(`{"Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), "Effect"},
		{"bad effect", stmt(`{"Effect":"Maybe","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), "effect"},
		{"service principal", stmt(`{"Effect":"Allow","Principal":{"Service":"x"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), "AWS principals"},
		{"principal wildcard", stmt(`{"Effect":"Allow","Principal":{"AWS":"ali*"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), "principal"},
		{"role arn", stmt(`{"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::1:role/x"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}`), "principal"},
		{"iam action", stmt(`{"Effect":"Allow","Principal":"*","Action":"iam:PassRole","Resource":"arn:aws:s3:::b/*"}`), "only s3 actions"},
		{"unknown action", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObjectTorrent","Resource":"arn:aws:s3:::b/*"}`), "not an action"},
		{"other bucket", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::c/*"}`), "in bucket b"},
		{"not an arn", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"b/*"}`), "invalid resource"},
		{"variable", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/${aws:username}/*"}`), "invalid resource"},
		{"object action on bucket", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b"}`), "does not apply"},
		{"bucket action on objects", stmt(`{"Effect":"Allow","Principal":"*","Action":"s3:ListBucket","Resource":"arn:aws:s3:::b/*"}`), "does not apply"},
		{"condition key", stmt(`{` + ok + `,"Condition":{"StringEquals":{"aws:UserAgent":"x"}}}`), "condition key"},
		{"condition op", stmt(`{` + ok + `,"Condition":{"NumericLessThan":{"aws:SourceIp":"1"}}}`), "operator"},
		{"set operator", stmt(`{` + ok + `,"Condition":{"ForAnyValue:StringLike":{"aws:Referer":"x"}}}`), "operator"},
		{"bad cidr", stmt(`{` + ok + `,"Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/33"}}}`), "CIDR"},
		{"bad bool", stmt(`{` + ok + `,"Condition":{"Bool":{"aws:SecureTransport":"yes"}}}`), "true or false"},
		{"duplicate sid", stmt(`{"Sid":"a",` + ok + `},{"Sid":"a",` + ok + `}`), "unique"},
		{"too big", `{"Statement":[` + strings.Repeat(" ", MaxSize) + `]}`, "bytes or smaller"},
	} {
		_, err := Parse([]byte(c.doc), "b")
		var pe *Error
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want a policy error with %q", c.name, err, c.want)
		}
	}
}

func TestEvaluate(t *testing.T) {
	doc := `{
	  "Version": "2012-10-17",
	  "Statement": [
	    {"Sid": "public", "Effect": "Allow", "Principal": "*", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::b/pub/*"},
	    {"Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam::123456789012:user/alice", "AKBOB"]}, "Action": "s3:*", "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"]},
	    {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::b/keep/*"},
	    {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b/secret/*", "Condition": {"NotIpAddress": {"aws:SourceIp": ["10.0.0.0/8", "::1"]}}},
	    {"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::b/tls/*", "Condition": {"Bool": {"aws:SecureTransport": false}}},
	    {"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::b", "Condition": {"StringLike": {"s3:prefix": ["pub/*", "pub"]}}},
	    {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/web/*", "Condition": {"StringLike": {"aws:Referer": "https://example.com/*"}}}
	  ]
	}`
	p, err := Parse([]byte(doc), "b")
	if err != nil {
		t.Fatal(err)
	}
	if !p.Public() {
		t.Error("a policy with an unconditioned Allow to * is public")
	}
	pfx := func(s string) *string { return &s }
	local, far := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.1")
	for _, c := range []struct {
		name string
		r    Request
		want Decision
	}{
		{"anonymous public read", Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/pub/x"}, Allow},
		{"anonymous other read", Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/priv/x"}, None},
		{"anonymous public write", Request{Anonymous: true, Action: "s3:PutObject", Resource: "b/pub/x"}, None},
		{"alice by arn", Request{User: "alice", AccessKey: "AK1", Action: "s3:PutObject", Resource: "b/x"}, Allow},
		{"bob by key", Request{AccessKey: "AKBOB", Action: "s3:ListBucket", Resource: "b"}, Allow},
		{"carol", Request{User: "carol", AccessKey: "AK3", Action: "s3:PutObject", Resource: "b/x"}, None},
		{"action case", Request{AccessKey: "AKBOB", Action: "S3:getobject", Resource: "b/x"}, Allow},
		{"deny wins", Request{AccessKey: "AKBOB", Action: "s3:DeleteObject", Resource: "b/keep/x"}, Deny},
		{"deny other key", Request{AccessKey: "AKBOB", Action: "s3:DeleteObject", Resource: "b/kept"}, Allow},
		{"ip far", Request{AccessKey: "AKBOB", Action: "s3:GetObject", Resource: "b/secret/x", SourceIP: far}, Deny},
		{"ip near", Request{AccessKey: "AKBOB", Action: "s3:GetObject", Resource: "b/secret/x", SourceIP: local}, Allow},
		{"ip6 loopback", Request{AccessKey: "AKBOB", Action: "s3:GetObject", Resource: "b/secret/x", SourceIP: netip.MustParseAddr("::1")}, Allow},
		{"ip4 mapped", Request{AccessKey: "AKBOB", Action: "s3:GetObject", Resource: "b/secret/x", SourceIP: netip.MustParseAddr("::ffff:10.0.0.1")}, Allow},
		{"ip unknown", Request{AccessKey: "AKBOB", Action: "s3:GetObject", Resource: "b/secret/x"}, Deny},
		{"plain http put", Request{AccessKey: "AKBOB", Action: "s3:PutObject", Resource: "b/tls/x"}, Deny},
		{"https put", Request{AccessKey: "AKBOB", Action: "s3:PutObject", Resource: "b/tls/x", SecureTransport: true}, Allow},
		{"list pub", Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b", Prefix: pfx("pub/a")}, Allow},
		{"list root", Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b", Prefix: pfx("")}, None},
		{"list no prefix", Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b"}, None},
		{"referer", Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/web/i.png", Referer: "https://example.com/page"}, Allow},
		{"other referer", Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/web/i.png", Referer: "https://evil.example/"}, None},
		{"no referer", Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/web/i.png"}, None},
	} {
		if got := p.Evaluate(&c.r); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := p.EvaluateRestricted(&Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/pub/x"}); got != None {
		t.Errorf("restricted: a public Allow still applies: %v", got)
	}
}

// TestEvaluateIfExists: each ...IfExists operator holds for a request
// without its key and is its plain operator for one with it.
func TestEvaluateIfExists(t *testing.T) {
	cond := func(c string) *Policy {
		t.Helper()
		p, err := Parse([]byte(`{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":["arn:aws:s3:::b","arn:aws:s3:::b/*"],"Condition":`+c+`}}`), "b")
		if err != nil {
			t.Fatalf("%s: %v", c, err)
		}
		return p
	}
	pfx := func(s string) *string { return &s }
	near, far := netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("192.0.2.1")
	for _, c := range []struct {
		cond string
		r    Request
		want Decision
	}{
		{`{"StringEqualsIfExists":{"s3:prefix":"pub/"}}`, Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b"}, Allow},
		{`{"StringEqualsIfExists":{"s3:prefix":"pub/"}}`, Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b", Prefix: pfx("pub/")}, Allow},
		{`{"StringEqualsIfExists":{"s3:prefix":"pub/"}}`, Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b", Prefix: pfx("priv/")}, None},
		{`{"StringEquals":{"s3:prefix":"pub/"}}`, Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b"}, None},
		{`{"StringNotEqualsIfExists":{"s3:prefix":"priv/"}}`, Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b", Prefix: pfx("priv/")}, None},
		{`{"StringNotEqualsIfExists":{"s3:prefix":"priv/"}}`, Request{Anonymous: true, Action: "s3:ListBucket", Resource: "b"}, Allow},
		{`{"StringLikeIfExists":{"aws:Referer":"https://example.com/*"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x"}, Allow},
		{`{"StringLikeIfExists":{"aws:Referer":"https://example.com/*"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", Referer: "https://evil.example/"}, None},
		{`{"StringLikeIfExists":{"aws:Referer":"https://example.com/*"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", Referer: "https://example.com/p"}, Allow},
		{`{"StringNotLikeIfExists":{"aws:Referer":"https://evil*"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", Referer: "https://evil.example/"}, None},
		{`{"IpAddressIfExists":{"aws:SourceIp":"10.0.0.0/8"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x"}, Allow},
		{`{"IpAddressIfExists":{"aws:SourceIp":"10.0.0.0/8"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", SourceIP: near}, Allow},
		{`{"IpAddressIfExists":{"aws:SourceIp":"10.0.0.0/8"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", SourceIP: far}, None},
		{`{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x"}, None},
		{`{"NotIpAddressIfExists":{"aws:SourceIp":"10.0.0.0/8"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", SourceIP: near}, None},
		{`{"NotIpAddressIfExists":{"aws:SourceIp":"10.0.0.0/8"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", SourceIP: far}, Allow},
		{`{"BoolIfExists":{"aws:SecureTransport":"true"}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x", SecureTransport: true}, Allow},
		{`{"BoolIfExists":{"aws:SecureTransport":true}}`, Request{Anonymous: true, Action: "s3:GetObject", Resource: "b/x"}, None},
	} {
		if got := cond(c.cond).Evaluate(&c.r); got != c.want {
			t.Errorf("%s with %+v: %v, want %v", c.cond, c.r, got, c.want)
		}
	}
	// ...IfExists only where the plain operator is taken.
	for _, c := range []string{`{"BoolIfExists":{"s3:prefix":"a"}}`, `{"IfExists":{"s3:prefix":"a"}}`, `{"StringEqualsIfExistsIfExists":{"s3:prefix":"a"}}`, `{"NullIfExists":{"s3:prefix":"true"}}`} {
		_, err := Parse([]byte(`{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::b/*","Condition":`+c+`}}`), "b")
		var pe *Error
		if !errors.As(err, &pe) {
			t.Errorf("%s: err %v, want a policy error", c, err)
		}
	}
	// An address condition that lets requests without one in is no limit.
	if !cond(`{"IpAddressIfExists":{"aws:SourceIp":"10.0.0.0/8"}}`).Public() {
		t.Error("an Allow to * under IpAddressIfExists is not public")
	}
}

func TestPublic(t *testing.T) {
	for doc, want := range map[string]bool{
		`{"Statement":{"Effect":"Allow","Principal":{"AWS":"*"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}`:                                                  true,
		`{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"}}}}`:  false,
		`{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*","Condition":{"StringLike":{"aws:Referer":"https://x/*"}}}}`: true,
		`{"Statement":{"Effect":"Deny","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}`:                                                           false,
		`{"Statement":{"Effect":"Allow","Principal":{"AWS":"alice"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}}`:                                              false,
	} {
		p, err := Parse([]byte(doc), "b")
		if err != nil {
			t.Fatal(err)
		}
		if p.Public() != want {
			t.Errorf("%s: public %v, want %v", doc, !want, want)
		}
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		p, s string
		want bool
	}{
		{"*", "", true}, {"a*", "abc", true}, {"a?c", "abc", true}, {"a?c", "ac", false},
		{"*b*", "abc", true}, {"a*c*e", "abcde", true}, {"a*c*e", "abcd", false},
		{"", "", true}, {"", "a", false}, {"b/*", "b", false}, {"b/*", "b/", true},
		{strings.Repeat("*a", 30), strings.Repeat("a", 60) + "b", false},
	} {
		if got := Match(c.p, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.p, c.s, got)
		}
	}
}

// FuzzParse feeds Parse arbitrary documents: it must never panic nor
// fail with anything but a policy error, and a policy it accepts
// evaluates any request without panicking.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::b/*"}]}`,
		`{"Statement":{"Sid":"x","Effect":"Deny","Principal":{"AWS":["alice","arn:aws:iam:::user/bob"]},"Action":["s3:*"],"Resource":["arn:aws:s3:::b","arn:aws:s3:::b/*"],"Condition":{"IpAddress":{"aws:SourceIp":"10.0.0.0/8"},"Bool":{"aws:SecureTransport":true},"StringLike":{"s3:prefix":"a*","aws:Referer":["x"]}}}}`,
		`{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::b/*","Condition":{"StringEqualsIfExists":{"s3:prefix":"a"},"IpAddressIfExists":{"aws:SourceIp":"10.0.0.0/8"},"BoolIfExists":{"aws:SecureTransport":"true"},"StringNotLikeIfExists":{"aws:Referer":"x*"},"NotIpAddressIfExists":{"aws:SourceIp":"::1"}}}}`,
		`{"Statement":{"Effect":"Allow","Principal":"*","Action":"s3:*","Resource":"arn:aws:s3:::b/*","Condition":{"IfExists":{"s3:prefix":"a"}}}}`,
		`{"Statement":[]}`, `[]`, `{"Statement":[{"Effect":1}]}`, `null`,
	} {
		f.Add([]byte(s), "s3:GetObject", "b/x")
	}
	f.Fuzz(func(t *testing.T, doc []byte, action, resource string) {
		p, err := Parse(doc, "b")
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		pfx := "a"
		for _, r := range []Request{
			{Anonymous: true, Action: action, Resource: resource},
			{Anonymous: true, Action: action, Resource: resource, SourceIP: netip.MustParseAddr("::1")},
			{User: "alice", AccessKey: "k", Action: action, Resource: resource, Prefix: &pfx, Referer: "x", SourceIP: netip.MustParseAddr("10.0.0.1"), SecureTransport: true},
		} {
			p.Evaluate(&r)
			p.EvaluateRestricted(&r)
		}
		p.Public()
	})
}
