package meta

import (
	"context"
	"time"

	"cairn/pki"
	"cairn/proto/metapb"
)

// Data servers learn the revocation list in their heartbeat answers.
// Gateways and users' clients do not heartbeat, yet they connect to data
// servers at the addresses meta names: they ask for the list
// (SecretsRevocations) and refuse a revoked data server in the handshake
// and on every answer (chunk.Remote.SetRevoked).

// SecretsRevocations answers the revocation list. It names ids and
// serials only, nothing secret: every role and user may ask.
func (s *Service) SecretsRevocations(context.Context, *metapb.Empty) (*metapb.RevokedCerts, error) {
	return &metapb.RevokedCerts{Revoked: s.revokedList()}, nil
}

// FollowRevocations keeps rv equal to meta's revocation list: now, then
// every interval, until ctx ends. A failed ask keeps the list as it was.
func FollowRevocations(ctx context.Context, mc metapb.MetaClient, rv *pki.Revocations, interval time.Duration) {
	ask := func() {
		cctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		r, err := mc.SecretsRevocations(cctx, &metapb.Empty{})
		if err != nil {
			return
		}
		list := make([]pki.Revoked, len(r.Revoked))
		for i, x := range r.Revoked {
			list[i] = pki.Revoked{ID: x.Id, Serial: x.Serial, At: time.Unix(0, x.RevokedNs)}
		}
		rv.Set(list)
	}
	ask()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			ask()
		}
	}
}
