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
	n, err := s.authorize(q.ctx(), q.p, q.bucket, read)
	if err != nil {
		return err
	}
	writeXML(q.w, http.StatusOK, aclOf(n))
	return nil
}

func (s *Server) getObjectACL(q *request) error {
	n, err := s.authorize(q.ctx(), q.p, q.bucket, read)
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
	n, err := s.authorize(q.ctx(), q.p, q.bucket, write)
	if err != nil {
		return err
	}
	if !q.p.root && n.Owner != q.p.access {
		return apiErr(http.StatusForbidden, "AccessDenied", "only the bucket's owner may change its ACL")
	}
	var vis metapb.Visibility
	if canned := q.r.Header.Get("X-Amz-Acl"); canned != "" {
		if vis, err = cannedVisibility(canned); err != nil {
			return err
		}
	} else {
		// A policy body: public-read is a READ grant to AllUsers.
		var in aclIn
		if err := readXML(q.body, &in); err != nil {
			return err
		}
		for _, g := range in.Grants {
			switch {
			case g.Grantee.URI == allUsers && g.Permission == "READ":
				vis = metapb.Visibility_PUBLIC_READ
			case g.Grantee.URI != "":
				return errNotImplemented("only READ for AllUsers can be granted to a group")
			}
		}
	}
	if _, err := s.client.SetVisibility(q.ctx(), q.bucket, vis); err != nil {
		return err
	}
	q.w.WriteHeader(http.StatusOK)
	return nil
}
