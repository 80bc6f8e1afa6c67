package s3

import (
	"net/http"

	"cairn/proto/metapb"
)

// ACLs: the canned private and public-read, which are the namespace's
// visibility.

const allUsers = "http://acs.amazonaws.com/groups/global/AllUsers"

func aclOf(n *metapb.Namespace) accessControlPolicy {
	const xsi = "http://www.w3.org/2001/XMLSchema-instance"
	p := accessControlPolicy{Xmlns: s3NS, Owner: ownerOf(n.Owner), Grants: []grant{{
		Grantee:    grantee{XMLNS: xsi, Type: "CanonicalUser", ID: n.Owner, DisplayName: n.Owner},
		Permission: "FULL_CONTROL",
	}}}
	if n.Visibility == metapb.Visibility_PUBLIC_READ {
		p.Grants = append(p.Grants, grant{Grantee: grantee{XMLNS: xsi, Type: "Group", URI: allUsers}, Permission: "READ"})
	}
	return p
}

func (s *Server) getBucketACL(q *request) error {
	n, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	writeXML(q.w, http.StatusOK, aclOf(n))
	return nil
}

func (s *Server) getObjectACL(q *request) error {
	n, err := s.authorize(q, read)
	if err != nil {
		return err
	}
	if _, err := s.stat(q); err != nil {
		return err
	}
	writeXML(q.w, http.StatusOK, aclOf(n))
	return nil
}

func (s *Server) putBucketACL(q *request) error {
	n, err := s.authorize(q, write)
	if err != nil {
		return err
	}
	if !q.p.root && n.Owner != q.p.access {
		return apiErr(http.StatusForbidden, "AccessDenied", "only the bucket's owner may change its ACL")
	}
	vis, err := requestedVisibility(q, n.Owner)
	if err != nil {
		return err
	}
	if err := s.checkACL(q, vis, q.r.Header.Get("X-Amz-Acl")); err != nil {
		return err
	}
	if _, err := s.client.SetVisibility(q.ctx(), q.bucket, vis); err != nil {
		return err
	}
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// requestedVisibility reads the ACL a Put*Acl asks for, canned (the
// x-amz-acl header) or as a policy body, as a visibility: public-read is
// a READ grant to AllUsers.
// Grants to anyone but AllUsers (READ) and the owner (FULL_CONTROL) are
// refused: they cannot be kept, and ignoring one would leave access other
// than asked.
func requestedVisibility(q *request, owner string) (metapb.Visibility, error) {
	if canned := q.r.Header.Get("X-Amz-Acl"); canned != "" {
		return cannedVisibility(canned)
	}
	var in aclIn
	if err := readXML(q.body, &in); err != nil {
		return 0, err
	}
	vis := metapb.Visibility_PRIVATE
	for _, g := range in.Grants {
		switch {
		case g.Grantee.URI == allUsers && g.Permission == "READ":
			vis = metapb.Visibility_PUBLIC_READ
		case g.Grantee.URI != "":
			return 0, errNotImplemented("only READ for AllUsers can be granted to a group")
		case g.Grantee.EmailAddress != "" || g.Grantee.ID != owner || g.Permission != "FULL_CONTROL":
			return 0, errNotImplemented("grants to users are not supported: the owner has FULL_CONTROL, and access keys carry the others")
		}
	}
	return vis, nil
}

// putObjectACL accepts the ACL the object has already, its bucket's, and
// refuses any other: objects cannot have ACLs of their own here.
func (s *Server) putObjectACL(q *request) error {
	n, err := s.authorize(q, write)
	if err != nil {
		return err
	}
	if _, err := s.stat(q); err != nil {
		return err
	}
	vis, err := requestedVisibility(q, n.Owner)
	if err != nil {
		return err
	}
	if err := s.checkACL(q, vis, q.r.Header.Get("X-Amz-Acl")); err != nil {
		return err
	}
	if vis != n.Visibility {
		return errNotImplemented("an object's ACL is its bucket's; set the bucket's ACL instead")
	}
	q.w.WriteHeader(http.StatusOK)
	return nil
}

// authorizeObjectWrite authorizes a write of the request's object and
// checks that an x-amz-acl it carries is the bucket's.
func (s *Server) authorizeObjectWrite(q *request) error {
	n, err := s.authorize(q, write)
	if err != nil {
		return err
	}
	if acl := q.r.Header.Get("X-Amz-Acl"); acl != "" {
		vis := metapb.Visibility_PRIVATE
		if acl == "public-read" {
			vis = metapb.Visibility_PUBLIC_READ
		}
		if err := s.checkACL(q, vis, acl); err != nil {
			return err
		}
	}
	return checkObjectACL(q.r.Header, n)
}
