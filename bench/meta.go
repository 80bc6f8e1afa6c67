package bench

import (
	"context"

	"cairn/errors"
	"cairn/proto/metapb"
)

// MetaPath is the 4-deep directory the metadata benchmark resolves: the
// depth at which per-component lookups cost other systems 4 round trips.
const MetaPath = "d1/d2/d3/d4"

// PrepareMeta creates namespace ns (if missing) and MetaPath inside it,
// straight through the metadata service.
func PrepareMeta(ctx context.Context, mc metapb.MetaClient, ns string) error {
	_, err := mc.CreateNamespace(ctx, &metapb.CreateNamespaceRequest{Name: ns, Owner: "bench"})
	if err != nil && !errors.Is(errors.Exist, err) {
		return err
	}
	_, err = mc.Mkdir(ctx, &metapb.MkdirRequest{Ns: ns, Path: MetaPath, Mode: 0o755, Parents: true})
	return err
}

// ResolveOp returns Ops that each resolve ns/MetaPath with one unbatched
// Resolve call: the whole path in one round trip. Worker i uses client
// i mod len(mcs).
func ResolveOp(mcs []metapb.MetaClient, ns string) func(worker int) Op {
	return func(i int) Op {
		mc := mcs[i%len(mcs)]
		req := &metapb.ResolveRequest{Ns: ns, Path: MetaPath}
		return func(ctx context.Context) (int64, error) {
			_, err := mc.Resolve(ctx, req)
			return 0, err
		}
	}
}
