package policy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// MaxSize is the largest policy accepted, S3's limit.
const MaxSize = 20 << 10

// Kind says what an action acts on, and so which resources it matches.
type Kind uint8

const (
	Bucket Kind = iota + 1 // arn:aws:s3:::bucket
	Object                 // arn:aws:s3:::bucket/key
)

// Actions are the actions a policy may name, and what each acts on: the
// S3 operations Cairn serves, by their IAM names.
var Actions = map[string]Kind{
	"s3:GetObject": Object, "s3:GetObjectVersion": Object, "s3:PutObject": Object,
	"s3:DeleteObject": Object, "s3:DeleteObjectVersion": Object,
	"s3:GetObjectTagging": Object, "s3:GetObjectVersionTagging": Object,
	"s3:PutObjectTagging": Object, "s3:PutObjectVersionTagging": Object,
	"s3:DeleteObjectTagging": Object, "s3:DeleteObjectVersionTagging": Object,
	"s3:GetObjectAcl": Object, "s3:GetObjectVersionAcl": Object, "s3:PutObjectAcl": Object,
	"s3:GetObjectRetention": Object, "s3:PutObjectRetention": Object,
	"s3:GetObjectLegalHold": Object, "s3:PutObjectLegalHold": Object,
	"s3:GetObjectAttributes": Object, "s3:GetObjectVersionAttributes": Object,
	"s3:AbortMultipartUpload": Object, "s3:ListMultipartUploadParts": Object,
	"s3:BypassGovernanceRetention": Object,

	"s3:ListBucket": Bucket, "s3:ListBucketVersions": Bucket, "s3:ListBucketMultipartUploads": Bucket,
	"s3:GetBucketLocation": Bucket, "s3:DeleteBucket": Bucket,
	"s3:GetBucketPolicy": Bucket, "s3:PutBucketPolicy": Bucket, "s3:DeleteBucketPolicy": Bucket,
	"s3:GetBucketPolicyStatus": Bucket,
	"s3:GetBucketAcl":          Bucket, "s3:PutBucketAcl": Bucket,
	"s3:GetBucketCORS": Bucket, "s3:PutBucketCORS": Bucket,
	"s3:GetBucketTagging": Bucket, "s3:PutBucketTagging": Bucket,
	"s3:GetBucketVersioning": Bucket, "s3:PutBucketVersioning": Bucket,
	"s3:GetBucketObjectLockConfiguration": Bucket, "s3:PutBucketObjectLockConfiguration": Bucket,
	"s3:GetBucketPublicAccessBlock": Bucket, "s3:PutBucketPublicAccessBlock": Bucket,
	"s3:GetBucketOwnershipControls": Bucket, "s3:PutBucketOwnershipControls": Bucket,
	"s3:GetLifecycleConfiguration": Bucket, "s3:PutLifecycleConfiguration": Bucket,
	"s3:GetEncryptionConfiguration": Bucket, "s3:GetBucketWebsite": Bucket,
	"s3:GetReplicationConfiguration": Bucket,
}

// OwnerOnly are the actions that stay the bucket owner's: a policy may
// deny them but not allow them to others (Parse refuses an Allow that
// names one; a wildcard Allow does not grant them).
var OwnerOnly = map[string]bool{
	"s3:DeleteBucket": true, "s3:BypassGovernanceRetention": true,
	"s3:GetBucketPolicy": true, "s3:PutBucketPolicy": true, "s3:DeleteBucketPolicy": true,
	"s3:GetBucketPolicyStatus": true, "s3:PutBucketAcl": true, "s3:PutObjectAcl": true,
	"s3:PutBucketCORS": true, "s3:PutBucketTagging": true, "s3:PutBucketVersioning": true,
	"s3:PutBucketObjectLockConfiguration": true, "s3:GetBucketPublicAccessBlock": true,
	"s3:PutBucketPublicAccessBlock": true, "s3:GetBucketOwnershipControls": true,
	"s3:PutBucketOwnershipControls": true, "s3:PutLifecycleConfiguration": true,
}

// Decision is a policy's answer for a request.
type Decision uint8

const (
	None  Decision = iota // no statement applies: other rights decide
	Allow                 // an Allow applies and no Deny
	Deny                  // a Deny applies
)

func (d Decision) String() string { return [...]string{"None", "Allow", "Deny"}[d] }

// Policy is a parsed bucket policy.
type Policy struct {
	Bucket     string
	Statements []Statement
}

// Statement is one statement of a policy.
type Statement struct {
	Sid        string
	Deny       bool
	Everyone   bool     // Principal "*"
	Principals []string // user names or access keys
	Actions    []string // patterns
	Resources  []string // patterns over "bucket" and "bucket/key" (the ARN's tail)
	Conditions []Condition
}

// Condition is one operator on one key with its values (any may match).
type Condition struct {
	Op     string // as written, less IfExists: StringLike, IpAddress, ...
	Key    string // lower-case: aws:sourceip, s3:prefix, aws:securetransport, aws:referer
	Values []string
	// IfExists (the operator's ...IfExists form): a request without the
	// key meets the condition.
	IfExists bool
	nets     []netip.Prefix
}

// Error is a policy refused, with the reason (S3's MalformedPolicy).
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

func errf(format string, args ...any) error { return &Error{fmt.Sprintf(format, args...)} }

// Parse reads and validates a policy for bucket.
func Parse(data []byte, bucket string) (*Policy, error) {
	if len(data) > MaxSize {
		return nil, errf("Policies must be %d bytes or smaller", MaxSize)
	}
	top, err := object(data, "the policy", "Version", "Id", "Statement")
	if err != nil {
		return nil, err
	}
	if v, ok := top["Version"]; ok {
		s, err := str(v, "Version")
		if err != nil {
			return nil, err
		}
		if s != "2012-10-17" && s != "2008-10-17" {
			return nil, errf("The policy must contain a valid version string")
		}
	}
	if v, ok := top["Id"]; ok {
		if _, err := str(v, "Id"); err != nil {
			return nil, err
		}
	}
	raw, ok := top["Statement"]
	if !ok {
		return nil, errf("Missing required field Statement")
	}
	var list []json.RawMessage
	if isArray(raw) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, errf("Statement must be an object or a list of objects")
		}
	} else {
		list = []json.RawMessage{raw}
	}
	if len(list) == 0 {
		return nil, errf("Could not parse the policy: Statement is empty")
	}
	p := &Policy{Bucket: bucket}
	sids := map[string]bool{}
	for i, r := range list {
		st, err := parseStatement(r, bucket)
		if err != nil {
			return nil, errf("statement %d: %v", i+1, err)
		}
		if st.Sid != "" {
			if sids[st.Sid] {
				return nil, errf("Statement IDs (SID) in a single policy must be unique: %q", st.Sid)
			}
			sids[st.Sid] = true
		}
		p.Statements = append(p.Statements, st)
	}
	return p, nil
}

// object reads a JSON object whose keys must be among allowed (exact
// case: Go's decoder would match "effect" to Effect).
func object(data []byte, what string, allowed ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if !isObject(data) {
		return nil, errf("%s must be a JSON object", what)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, errf("%s is not valid JSON: %v", what, err)
	}
	for k := range m {
		if !contains(allowed, k) {
			return nil, errf("Policy has an unsupported element %q in %s", k, what)
		}
	}
	return m, nil
}

func isObject(data []byte) bool {
	d := bytes.TrimSpace(data)
	return len(d) > 0 && d[0] == '{'
}

func isArray(data []byte) bool {
	d := bytes.TrimSpace(data)
	return len(d) > 0 && d[0] == '['
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func str(raw json.RawMessage, what string) (string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errf("%s must be a string", what)
	}
	return s, nil
}

// strs reads a string or a non-empty list of strings.
func strs(raw json.RawMessage, what string) ([]string, error) {
	if !isArray(raw) {
		s, err := str(raw, what)
		if err != nil {
			return nil, errf("%s must be a string or a list of strings", what)
		}
		return []string{s}, nil
	}
	var l []string
	if err := json.Unmarshal(raw, &l); err != nil {
		return nil, errf("%s must be a string or a list of strings", what)
	}
	if len(l) == 0 {
		return nil, errf("%s must not be empty", what)
	}
	return l, nil
}

func parseStatement(raw json.RawMessage, bucket string) (Statement, error) {
	var st Statement
	m, err := object(raw, "a statement", "Sid", "Effect", "Principal", "Action", "Resource", "Condition")
	if err != nil {
		return st, err
	}
	if v, ok := m["Sid"]; ok {
		if st.Sid, err = str(v, "Sid"); err != nil {
			return st, err
		}
	}
	for _, k := range []string{"Effect", "Principal", "Action", "Resource"} {
		if _, ok := m[k]; !ok {
			return st, errf("Missing required field %s", k)
		}
	}
	switch e, err := str(m["Effect"], "Effect"); {
	case err != nil:
		return st, err
	case e == "Deny":
		st.Deny = true
	case e != "Allow":
		return st, errf("Invalid effect: %q", e)
	}
	if err := st.parsePrincipal(m["Principal"]); err != nil {
		return st, err
	}
	if st.Actions, err = strs(m["Action"], "Action"); err != nil {
		return st, err
	}
	kinds := map[Kind]bool{}
	for _, a := range st.Actions {
		k, err := actionKinds(a)
		if err != nil {
			return st, err
		}
		if !st.Deny && !strings.ContainsAny(a, "*?") {
			for name := range OwnerOnly {
				if strings.EqualFold(a, name) {
					return st, errf("Policy cannot allow %s: it stays the bucket owner's (a Deny of it is supported)", a)
				}
			}
		}
		for kk := range k {
			kinds[kk] = true
		}
	}
	res, err := strs(m["Resource"], "Resource")
	if err != nil {
		return st, err
	}
	applies := false
	for _, r := range res {
		tail, ok := strings.CutPrefix(r, "arn:aws:s3:::")
		if !ok || strings.Contains(r, "${") {
			return st, errf("Policy has invalid resource %q", r)
		}
		b, _, isObj := strings.Cut(tail, "/")
		if b != bucket {
			return st, errf("Policy has invalid resource %q: resources must be in bucket %s", r, bucket)
		}
		if isObj && kinds[Object] || !isObj && kinds[Bucket] {
			applies = true
		}
		st.Resources = append(st.Resources, tail)
	}
	if !applies {
		return st, errf("Action does not apply to any resource(s) in statement")
	}
	if v, ok := m["Condition"]; ok {
		if st.Conditions, err = parseConditions(v); err != nil {
			return st, err
		}
	}
	return st, nil
}

func (st *Statement) parsePrincipal(raw json.RawMessage) error {
	var names []string
	if isObject(raw) {
		m, err := object(raw, "Principal", "AWS")
		if err != nil {
			return errf("only AWS principals are supported: %v", err)
		}
		v, ok := m["AWS"]
		if !ok {
			return errf("Invalid principal in policy: Principal is empty")
		}
		if names, err = strs(v, "Principal"); err != nil {
			return err
		}
	} else {
		s, err := str(raw, "Principal")
		if err != nil || s != "*" {
			return errf("Invalid principal in policy: Principal must be \"*\" or {\"AWS\": ...}")
		}
		names = []string{"*"}
	}
	for _, n := range names {
		switch {
		case n == "*":
			st.Everyone = true
			continue
		case strings.HasPrefix(n, "arn:"):
			acct, user, ok := strings.Cut(strings.TrimPrefix(n, "arn:aws:iam::"), ":user/")
			if !ok || !strings.HasPrefix(n, "arn:aws:iam::") || strings.Trim(acct, "0123456789") != "" {
				return errf("Invalid principal in policy: %q (a user is arn:aws:iam::<account>:user/<name or access key>)", n)
			}
			n = user
		}
		if n == "" || strings.ContainsAny(n, "*?:/$ ") {
			return errf("Invalid principal in policy: %q", n)
		}
		st.Principals = append(st.Principals, n)
	}
	return nil
}

// actionKinds checks an action pattern and returns what the actions it
// matches act on.
func actionKinds(a string) (map[Kind]bool, error) {
	if !strings.HasPrefix(strings.ToLower(a), "s3:") && a != "*" {
		return nil, errf("Policy has invalid action %q: only s3 actions are supported", a)
	}
	kinds := map[Kind]bool{}
	for name, k := range Actions {
		if Match(strings.ToLower(a), strings.ToLower(name)) {
			kinds[k] = true
		}
	}
	if len(kinds) == 0 {
		return nil, errf("Policy has invalid action %q: not an action Cairn supports", a)
	}
	return kinds, nil
}

// condKeys are the supported condition keys (lower-case) and the
// operators each takes.
var condKeys = map[string][]string{
	"aws:sourceip":        {"IpAddress", "NotIpAddress"},
	"aws:securetransport": {"Bool"},
	"s3:prefix":           {"StringEquals", "StringNotEquals", "StringLike", "StringNotLike"},
	"aws:referer":         {"StringEquals", "StringNotEquals", "StringLike", "StringNotLike"},
}

func parseConditions(raw json.RawMessage) ([]Condition, error) {
	if !isObject(raw) {
		return nil, errf("Condition must be an object")
	}
	var ops map[string]json.RawMessage
	if err := json.Unmarshal(raw, &ops); err != nil {
		return nil, errf("Condition is not valid JSON: %v", err)
	}
	var out []Condition
	for _, op := range sortedKeys(ops) {
		if !isObject(ops[op]) {
			return nil, errf("Condition operator %s must map keys to values", op)
		}
		var keys map[string]json.RawMessage
		if err := json.Unmarshal(ops[op], &keys); err != nil {
			return nil, errf("Condition operator %s must map keys to values", op)
		}
		if len(keys) == 0 {
			return nil, errf("Condition operator %s has no keys", op)
		}
		base, ifExists := strings.CutSuffix(op, "IfExists")
		for _, k := range sortedKeys(keys) {
			lk := strings.ToLower(k)
			allowed, ok := condKeys[lk]
			if !ok {
				return nil, errf("Policy has an unsupported condition key %q (supported: aws:SourceIp, aws:SecureTransport, s3:prefix, aws:Referer)", k)
			}
			if !contains(allowed, base) {
				return nil, errf("Policy has an unsupported condition operator %s for %s (supported: %s, each also ...IfExists)", op, k, strings.Join(allowed, ", "))
			}
			op := base
			c := Condition{Op: op, Key: lk, IfExists: ifExists}
			vals, err := condValues(keys[k], k, op == "Bool")
			if err != nil {
				return nil, err
			}
			for _, v := range vals {
				if strings.Contains(v, "${") {
					return nil, errf("Policy variables are not supported (%s: %q)", k, v)
				}
				switch op {
				case "IpAddress", "NotIpAddress":
					pfx, err := parseNet(v)
					if err != nil {
						return nil, errf("Invalid IP address or CIDR block for %s: %q", k, v)
					}
					c.nets = append(c.nets, pfx)
				case "Bool":
					v = strings.ToLower(v)
					if v != "true" && v != "false" {
						return nil, errf("Bool condition %s takes true or false, not %q", k, v)
					}
				}
				c.Values = append(c.Values, v)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// condValues reads a condition's value or values (strings; Bool takes
// JSON booleans too).
func condValues(raw json.RawMessage, key string, boolOK bool) ([]string, error) {
	if boolOK {
		var b bool
		if json.Unmarshal(raw, &b) == nil {
			return []string{fmt.Sprint(b)}, nil
		}
		var l []bool
		if json.Unmarshal(raw, &l) == nil && len(l) > 0 {
			var out []string
			for _, b := range l {
				out = append(out, fmt.Sprint(b))
			}
			return out, nil
		}
	}
	return strs(raw, "the value of "+key)
}

func parseNet(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func sortedKeys(m map[string]json.RawMessage) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
