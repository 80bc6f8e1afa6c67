package meta

import (
	"context"
	"regexp"
	"time"

	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

// Certificate revocation (pki/revoke.go). The list is a set of
// RevokedCert records under x/{id or serial}, applied as commands so it
// replicates with meta's log; Config.Revoked holds it in memory for the
// handshakes of meta's listener (the embedder guards its TLS config with
// it), for caller (a connection opened before the revocation is refused
// on its next call) and for the heartbeat answers that carry it to data
// servers.

const pRevoked = 'x'

func revokedKey(name string) []byte { return append([]byte{pRevoked, '/'}, name...) }

var hexSerial = regexp.MustCompile(`^[0-9a-f]{1,40}$`)

// RevokeCert revokes the certificates of an id issued until now, or one
// by serial, and answers the whole list.
func (s *Service) RevokeCert(ctx context.Context, req *metapb.RevokedCert) (*metapb.RevokedCerts, error) {
	const op = errors.Op("meta.RevokeCert")
	switch {
	case (req.Id == "") == (req.Serial == ""):
		return nil, errors.E(op, errors.Invalid, "name an id or a serial")
	case len(req.Id) > 255:
		return nil, errors.E(op, errors.Invalid, "id over 255 bytes")
	case req.Serial != "" && !hexSerial.MatchString(req.Serial):
		return nil, errors.E(op, errors.Invalid, errors.Path(req.Serial), "a serial is lower-case hex")
	}
	rec := &metapb.RevokedCert{Id: req.Id, Serial: req.Serial, RevokedNs: time.Now().UnixNano()}
	if _, err := s.propose(&metapb.Command{Op: &metapb.Command_RevokeCert{RevokeCert: rec}}); err != nil {
		return nil, errors.E(op, err)
	}
	list, err := s.loadRevoked()
	if err != nil {
		return nil, errors.E(op, err)
	}
	s.log.Warn("certificate revoked", "id", req.Id, "serial", req.Serial)
	return list, nil
}

// loadRevoked reads the list from the store into Config.Revoked.
func (s *Service) loadRevoked() (*metapb.RevokedCerts, error) {
	out := &metapb.RevokedCerts{}
	prefix := revokedKey("")
	err := s.scan(prefix, func() proto.Message { return &metapb.RevokedCert{} }, func(m proto.Message) bool {
		out.Revoked = append(out.Revoked, m.(*metapb.RevokedCert))
		return true
	})
	if err != nil {
		return nil, err
	}
	list := make([]pki.Revoked, len(out.Revoked))
	for i, r := range out.Revoked {
		list[i] = pki.Revoked{ID: r.Id, Serial: r.Serial, At: time.Unix(0, r.RevokedNs)}
	}
	s.cfg.Revoked.Set(list)
	return out, nil
}

// revokedList is the list for a heartbeat answer.
func (s *Service) revokedList() []*metapb.RevokedCert {
	list := s.cfg.Revoked.List()
	if len(list) == 0 {
		return nil
	}
	out := make([]*metapb.RevokedCert, len(list))
	for i, r := range list {
		out[i] = &metapb.RevokedCert{Id: r.ID, Serial: r.Serial, RevokedNs: r.At.UnixNano()}
	}
	return out
}

// revokeCert stores one entry; revoking an id again moves its time on.
func (t *txn) revokeCert(rec *metapb.RevokedCert) error {
	name := rec.Id
	if rec.Serial != "" {
		name = "serial:" + rec.Serial
	}
	if name == "" || rec.RevokedNs == 0 {
		return errors.E(errors.Invalid, "incomplete revocation")
	}
	t.res.revoked = true
	return t.put(revokedKey(name), rec)
}
