package policy

import (
	"net/netip"
	"strings"
)

// Request is what a policy is evaluated against.
type Request struct {
	Anonymous bool
	User      string // the caller's user name ("" if none)
	AccessKey string
	Action    string // s3:GetObject, ...
	// Resource is the ARN's tail: "bucket" or "bucket/key".
	Resource string

	SourceIP        netip.Addr // invalid: unknown
	SecureTransport bool
	Referer         string // "" means absent
	Prefix          *string
}

// Evaluate decides what the policy says about r: a Deny that applies
// wins, else an Allow that applies, else None.
func (p *Policy) Evaluate(r *Request) Decision {
	if p == nil {
		return None
	}
	d := None
	for i := range p.Statements {
		st := &p.Statements[i]
		if !st.applies(r) {
			continue
		}
		if st.Deny {
			return Deny
		}
		d = Allow
	}
	return d
}

// EvaluateRestricted is Evaluate that skips the Allows of public statements
// (RestrictPublicBuckets for an anonymous caller).
func (p *Policy) EvaluateRestricted(r *Request) Decision {
	if p == nil {
		return None
	}
	d := None
	for i := range p.Statements {
		st := &p.Statements[i]
		if !st.applies(r) || !st.Deny && st.public() {
			continue
		}
		if st.Deny {
			return Deny
		}
		d = Allow
	}
	return d
}

func (st *Statement) applies(r *Request) bool {
	if !st.matchesPrincipal(r) {
		return false
	}
	ok := false
	action := strings.ToLower(r.Action)
	for _, a := range st.Actions {
		if Match(strings.ToLower(a), action) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	ok = false
	for _, res := range st.Resources {
		if Match(res, r.Resource) {
			ok = true
			break
		}
	}
	if !ok {
		return false
	}
	for i := range st.Conditions {
		if !st.Conditions[i].holds(r) {
			return false
		}
	}
	return true
}

func (st *Statement) matchesPrincipal(r *Request) bool {
	if st.Everyone {
		return true
	}
	if r.Anonymous {
		return false
	}
	for _, n := range st.Principals {
		if n == r.AccessKey || r.User != "" && n == r.User {
			return true
		}
	}
	return false
}

// holds evaluates one condition. A key the request lacks makes a
// positive operator false and a negated one true, and any ...IfExists
// operator true.
func (c *Condition) holds(r *Request) bool {
	// What the condition says of a request without the key.
	absent := strings.HasPrefix(c.Op, "StringNot") || c.Op == "NotIpAddress" || c.IfExists
	var val string
	switch c.Key {
	case "aws:sourceip":
		if !r.SourceIP.IsValid() {
			return absent
		}
		ip := r.SourceIP.Unmap()
		in := false
		for _, n := range c.nets {
			in = in || n.Contains(ip)
		}
		return in != (c.Op == "NotIpAddress")
	case "aws:securetransport":
		want := r.SecureTransport
		for _, v := range c.Values {
			if (v == "true") == want {
				return true
			}
		}
		return false
	case "s3:prefix":
		if r.Prefix == nil {
			return absent
		}
		val = *r.Prefix
	case "aws:referer":
		if r.Referer == "" {
			return absent
		}
		val = r.Referer
	default:
		return false // Parse refuses other keys
	}
	like := strings.HasSuffix(c.Op, "Like")
	any := false
	for _, v := range c.Values {
		if like && Match(v, val) || !like && v == val {
			any = true
			break
		}
	}
	return any != strings.HasPrefix(c.Op, "StringNot")
}

// Public reports whether the policy grants access to everyone: an Allow
// to "*" not limited to source addresses (S3's test for PolicyStatus and
// for BlockPublicPolicy / RestrictPublicBuckets).
func (p *Policy) Public() bool {
	if p == nil {
		return false
	}
	for i := range p.Statements {
		if st := &p.Statements[i]; !st.Deny && st.public() {
			return true
		}
	}
	return false
}

func (st *Statement) public() bool {
	if !st.Everyone {
		return false
	}
	for _, c := range st.Conditions {
		// IpAddressIfExists lets a request without a known address in:
		// not a limit, to be safe.
		if c.Op == "IpAddress" && !c.IfExists {
			return false
		}
	}
	return true
}

// Match reports whether s matches pattern, where * matches any run of
// characters and ? any one byte. It takes time O(len(pattern) *
// len(s)) at worst (one backtrack point), never exponential.
func Match(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && (pattern[p] == '?' || pattern[p] == s[i]):
			p++
			i++
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case star >= 0:
			p = star + 1
			mark++
			i = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}
