package s3

import (
	"time"

	"cairn/proto/metapb"
)

// ForgeGrant makes the server's key cache say that access (with secret)
// may write bucket: a gateway whose own check went wrong. Tests use it to
// show that meta, which the server names the signer to, still refuses.
func ForgeGrant(s *Server, access, secret, bucket string) {
	s.keys.mu.Lock()
	defer s.keys.mu.Unlock()
	s.keys.entries[access] = keyEntry{secret: secret, expires: time.Now().Add(time.Hour),
		p: principal{access: access, grants: map[string]metapb.S3Access{bucket: metapb.S3Access_S3_WRITE}}}
}
