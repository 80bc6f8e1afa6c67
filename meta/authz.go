package meta

import (
	"context"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"cairn/capability"
	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Who may call what. Every method of the service has a rule; a method
// without one is refused (deny by default). Rules are derived from the
// request where they can be: a request that names namespaces (ns, bucket,
// src_ns/dst_ns, a batch of those) needs read on each, or write for a
// call that is not one of the reads; only the calls that carry no
// namespace, or need more than read/write on it, are listed.

// userNeed is what a user (or an anonymous caller) needs for a call.
type userNeed int

const (
	userNever  userNeed = iota // roles only
	userAnyone                 // even anonymous (Authenticate proves who you are)
	userAny                    // any authenticated user
	userNS                     // read or write on the request's namespaces
	userOwner                  // the namespace's owner (or root)
	userRoot                   // root
)

// rule says who may call a method: the roles that may call it as
// themselves, and what a user needs. Meta itself (another meta, or a
// plaintext caller under Config.TrustPlaintext) may call everything.
type rule struct {
	roles []pki.Role
	user  userNeed
}

var (
	roleAll     = []pki.Role{pki.RoleMeta, pki.RoleData, pki.RoleGateway}
	roleGateway = []pki.Role{pki.RoleGateway} // a gateway may act for any user: it authorises them itself
	roleMeta    = []pki.Role(nil)
)

// explicitRules are the methods whose rule cannot be read off the request.
var explicitRules = map[string]rule{
	// A data server's own calls.
	"Heartbeat": {roles: []pki.Role{pki.RoleData}, user: userNever},
	// Where volumes are and what the cluster is: a public namespace's
	// anonymous reader needs them too (the data plane checks capabilities).
	"Volumes": {roles: roleAll, user: userAnyone},
	"Info":    {roles: roleAll, user: userAnyone},
	// Gateways verify SigV4 with the secret itself; nobody else sees one.
	"S3GetSecret":  {roles: []pki.Role{pki.RoleGateway}},
	"Authenticate": {roles: roleAll, user: userAnyone},
	// Streams and calls without a namespace: answers are filtered to the
	// namespaces the caller may read (ListNamespaces, Watch, MountSession).
	"ListNamespaces": {roles: roleGateway, user: userAnyone},
	"Watch":          {roles: roleGateway, user: userAny},
	"MountSession":   {roles: roleMeta, user: userAny},
	"MountReserve":   {roles: roleMeta, user: userAny},
	"Sync":           {roles: roleGateway, user: userAny},
	// Capabilities are renewed only while the caller may still use them
	// (mayRenew, per namespace named inside each token).
	"RenewCaps": {roles: roleGateway, user: userAny},
	// Namespace records: their owner decides.
	"CreateNamespace":   {roles: roleGateway, user: userAny}, // owner must be the caller (createRule)
	"DeleteNamespace":   {roles: roleGateway, user: userOwner},
	"SetVisibility":     {roles: roleGateway, user: userOwner},
	"S3PutBucketConfig": {roles: roleGateway, user: userOwner},
	"S3SetVersioning":   {roles: roleGateway, user: userOwner},
	// Administration: root only.
	"CreateUser":       {roles: roleMeta, user: userRoot},
	"S3CreateUser":     {roles: roleMeta, user: userRoot},
	"S3DeleteUser":     {roles: roleMeta, user: userRoot},
	"S3ListUsers":      {roles: roleMeta, user: userRoot},
	"S3CreateKey":      {roles: roleMeta, user: userRoot},
	"S3DeleteKey":      {roles: roleMeta, user: userRoot},
	"S3ListKeys":       {roles: roleMeta, user: userRoot},
	"S3Grant":          {roles: roleMeta, user: userRoot},
	"ClusterStatus":    {roles: roleMeta, user: userRoot},
	"ClusterDrain":     {roles: roleMeta, user: userRoot},
	"ClusterRebalance": {roles: roleMeta, user: userRoot},
	"RevokeCert":       {roles: roleMeta, user: userRoot},
	"TierSetPolicy":    {roles: roleMeta, user: userRoot},
	"TierGetPolicy":    {roles: roleMeta, user: userRoot},
	"TierStatus":       {roles: roleMeta, user: userRoot},
	// The meta group (raftadmin.go).
	"MetaMembers":      {roles: roleMeta, user: userRoot},
	"MetaAddMember":    {roles: roleMeta, user: userRoot},
	"MetaRemoveMember": {roles: roleMeta, user: userRoot},
	"MetaSnapshot":     {roles: roleMeta, user: userRoot},
	// A follower's question for the read index (raftread.go): members only.
	"MetaReadIndex": {roles: roleMeta, user: userNever},
	// Joining: the token is the credential (a new server has no other);
	// making one needs root, checked by the handler against the call's
	// credentials or the root pair in the request.
	"Join":            {roles: roleAll, user: userAnyone},
	"CreateJoinToken": {roles: roleAll, user: userAnyone},
	// The revocation list names no secret (revokefollow.go).
	"SecretsRevocations": {roles: roleAll, user: userAnyone},
}

// readMethods only read the namespaces they name; every other call that
// names one needs write (a new call is a mutation until listed here).
var readMethods = map[string]bool{
	"Resolve": true, "BatchResolve": true, "List": true, "GetNamespace": true,
	"S3GetBucketConfig": true, "S3GetUpload": true, "S3ListParts": true, "S3ListUploads": true,
	"S3GetVersion": true, "S3ListVersions": true,
	"TierNoteReads": true, // a read the caller served from its cache (tier_intent.go)
}

// rules holds a rule for every method of the service: explicit, else
// derived from its request type; a method with neither has none and is
// refused.
var rules = func() map[string]rule {
	m := map[string]rule{}
	sd := metapb.File_proto_meta_proto.Services().ByName("Meta")
	for i := 0; i < sd.Methods().Len(); i++ {
		md := sd.Methods().Get(i)
		name := string(md.Name())
		if r, ok := explicitRules[name]; ok {
			m[name] = r
			continue
		}
		if carriesNamespace(newMessage(md.Input())) {
			m[name] = rule{roles: roleGateway, user: userNS}
		}
	}
	return m
}()

func newMessage(d protoreflect.MessageDescriptor) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(d.FullName())
	if err != nil {
		panic(err) // the generated package registers every message
	}
	return mt.New().Interface()
}

// nsAccess is one namespace a request names and the access it needs.
type nsAccess struct {
	ns    string
	write bool
}

// namespacesOf lists the namespaces req names. write is the access the
// call needs on the ones it changes (a copy reads its source either way).
func namespacesOf(req any, write bool) []nsAccess {
	switch r := req.(type) {
	case *metapb.NamespaceRequest:
		return []nsAccess{{r.GetName(), write}}
	case *metapb.SetVisibilityRequest:
		return []nsAccess{{r.GetName(), write}}
	case *metapb.S3CopyRequest:
		return []nsAccess{{r.GetSrcNs(), false}, {r.GetDstNs(), write}}
	case *metapb.CommitBatchRequest:
		var out []nsAccess
		for _, c := range r.GetCommits() {
			out = append(out, nsAccess{c.GetNs(), write})
		}
		return out
	case *metapb.BatchResolveRequest:
		var out []nsAccess
		for _, c := range r.GetRequests() {
			out = append(out, nsAccess{c.GetNs(), write})
		}
		return out
	case interface{ GetNs() string }:
		return []nsAccess{{r.GetNs(), write}}
	case interface{ GetBucket() string }:
		return []nsAccess{{r.GetBucket(), write}}
	case interface {
		GetUpload() *metapb.S3UploadRequest
	}:
		return []nsAccess{{r.GetUpload().GetBucket(), write}}
	}
	return nil
}

// carriesNamespace reports whether a request type names namespaces
// (asked of an empty request, whose batches are empty).
func carriesNamespace(req proto.Message) bool {
	switch req.(type) {
	case *metapb.CommitBatchRequest, *metapb.BatchResolveRequest:
		return true
	}
	return len(namespacesOf(req, false)) > 0
}

// authorize decides whether c may make call method with req.
func (s *Service) authorize(c Caller, method string, req any) error {
	op := errors.Op("meta." + method)
	r, ok := rules[method]
	if !ok {
		return errors.E(op, errors.Permission, "no rule allows "+method)
	}
	if c.Role == pki.RoleMeta {
		return nil
	}
	if c.Role != "" {
		for _, role := range r.roles {
			if role == c.Role {
				return nil
			}
		}
		return errors.E(op, errors.Permission, c.String()+" may not call "+method)
	}
	if r.user == userAnyone {
		return nil
	}
	if c.Anonymous() {
		if r.user == userNS && len(namespacesOf(req, false)) > 0 {
			// Anonymous reads of public namespaces (a gateway serving an
			// anonymous request on its behalf).
			if err := s.checkNamespaces(c, method, req); err == nil {
				return nil
			}
		}
		return errors.E(op, errors.Unauthenticated, method+" needs credentials")
	}
	switch r.user {
	case userAny:
		if method == "CreateNamespace" && !c.Root {
			if cr, ok := req.(*metapb.CreateNamespaceRequest); ok && cr.Owner != c.Key {
				return errors.E(op, errors.Permission, errors.Path(cr.Name), "a namespace is created with the caller as its owner")
			}
		}
		return nil
	case userRoot:
		if c.Root {
			return nil
		}
	case userNS:
		return s.checkNamespaces(c, method, req)
	case userOwner:
		if c.Root {
			return nil
		}
		for _, n := range namespacesOf(req, true) {
			if lvl, _ := s.accessTo(c, n.ns); lvl < accessOwner {
				return errors.E(op, errors.Permission, errors.Path(n.ns), c.String()+" does not own this namespace")
			}
		}
		return nil
	}
	return errors.E(op, errors.Permission, c.String()+" may not call "+method)
}

func (s *Service) checkNamespaces(c Caller, method string, req any) error {
	op := errors.Op("meta." + method)
	for _, n := range namespacesOf(req, !readMethods[method]) {
		lvl, exists := s.accessTo(c, n.ns)
		need := accessRead
		if n.write {
			need = accessWrite
		}
		if lvl >= need {
			continue
		}
		if !exists && lvl == accessNone {
			return errors.E(op, errors.NotExist, errors.Path(n.ns), "no such namespace")
		}
		kind := errors.Permission
		if c.Anonymous() {
			kind = errors.Unauthenticated
		}
		what := "read"
		if n.write {
			what = "write"
		}
		return errors.E(op, kind, errors.Path(n.ns), c.String()+" may not "+what+" this namespace")
	}
	return nil
}

// Access levels of a user on a namespace, in order.
type accessLevel int

const (
	accessNone accessLevel = iota
	accessRead
	accessWrite
	accessOwner
)

// accessTo is what c may do on namespace ns (see Rights); exists is false
// only for a namespace known not to exist.
func (s *Service) accessTo(c Caller, ns string) (lvl accessLevel, exists bool) {
	if c.Role != "" || c.Root {
		return accessOwner, true
	}
	n := &metapb.Namespace{Name: ns}
	exists = true
	if v, err := s.cachedView(); err == nil { // the read cache Resolve uses: no iterator on a warm call
		if found, err := v.namespace(ns); err == nil {
			n = found
		} else {
			exists = !errors.Is(errors.NotExist, err)
		}
		v.close()
	}
	read, write, own := Rights(c.Key, c.Root, c.Grants, n)
	switch {
	case own && exists:
		return accessOwner, exists
	case write:
		return accessWrite, exists
	case read:
		return accessRead, exists
	}
	return accessNone, exists
}

// Rights is what a user (access key, root flag, grants) may do on
// namespace n: root and the owner anything, a grant what it grants, anyone
// read a public namespace. It is the one rule of every way in: meta applies
// it to each call, and the gateway, S3 and the mount to decide early.
func Rights(key string, root bool, grants map[string]metapb.S3Access, n *metapb.Namespace) (read, write, own bool) {
	if root || key != "" && key == n.Owner {
		return true, true, true
	}
	switch grants[n.Name] {
	case metapb.S3Access_S3_WRITE:
		return true, true, false
	case metapb.S3Access_S3_READ:
		return true, false, false
	}
	return n.Visibility == metapb.Visibility_PUBLIC_READ, false, false
}

// mayRenew decides whether the caller of a RenewCaps may have a
// capability of namespace ns for ops renewed: read or write on ns as for
// a call, so a grant removed stops the data plane too, within callerTTL
// plus a capability's lifetime.
func (s *Service) mayRenew(ctx context.Context, ns string, ops capability.Op) bool {
	c, ok := CallerOf(ctx)
	if !ok {
		return true // in-process, not through serve: the embedder's own call
	}
	lvl, _ := s.accessTo(c, ns)
	if ops&(capability.Write|capability.Delete) != 0 {
		return lvl >= accessWrite
	}
	return lvl >= accessRead
}

// mayRead reports whether c may read ns (answers and events are filtered
// by it).
func (s *Service) mayRead(c Caller, ns string) bool {
	lvl, _ := s.accessTo(c, ns)
	return lvl >= accessRead
}

// filteredStream is a server stream of events for a user: events of
// namespaces the caller may not read go out with only their sequence
// number (a gap would make the receiver drop everything it caches), and
// the caller's rights are looked up again every callerTTL, so a grant
// removed stops the events within that time.
type filteredStream struct {
	grpc.ServerStream
	s       *Service
	c       Caller
	allowed map[string]bool
	since   time.Time
}

func (f *filteredStream) SendMsg(m any) error {
	if e, ok := m.(*metapb.Event); ok && e.Ns != "" && !f.may(e.Ns) {
		// The protocol fields stay: a mount acknowledges notices by number.
		m = &metapb.Event{Seq: e.Seq, Reset_: e.Reset_, MountFlush: e.MountFlush, MountNotice: e.MountNotice}
	}
	return f.ServerStream.SendMsg(m)
}

func (f *filteredStream) may(ns string) bool {
	if now := time.Now(); f.allowed == nil || now.Sub(f.since) > callerTTL {
		if f.allowed != nil && f.c.Key != "" {
			if c, err := f.s.lookupUser(f.c.Key); err == nil {
				f.c = c
			} else {
				f.c = Caller{} // the key is gone: nothing more is readable
			}
		}
		f.allowed, f.since = map[string]bool{}, now
	}
	ok, seen := f.allowed[ns]
	if !seen {
		ok = f.s.mayRead(f.c, ns)
		f.allowed[ns] = ok
	}
	return ok
}

// serveStream authorises a stream call and wraps the stream so that a
// user sees only the events of namespaces they may read.
func (s *Service) serveStream(ss grpc.ServerStream, method string) (grpc.ServerStream, error) {
	if err := s.leaderGate(method); err != nil {
		return nil, err
	}
	c, err := s.caller(ss.Context())
	if err != nil {
		return nil, err
	}
	if err := s.authorize(c, method, nil); err != nil {
		return nil, err
	}
	if c.Role != "" {
		return ss, nil
	}
	return &filteredStream{ServerStream: ss, s: s, c: c}, nil
}

// filterNamespaces keeps the namespaces c may read.
func (s *Service) filterNamespaces(ctx context.Context, l *metapb.NamespaceList) {
	c, ok := CallerOf(ctx)
	if !ok || c.Role != "" || c.Root {
		return
	}
	kept := l.Namespaces[:0]
	for _, n := range l.Namespaces {
		if read, _, _ := Rights(c.Key, c.Root, c.Grants, n); read {
			kept = append(kept, n)
		}
	}
	l.Namespaces = kept
}
