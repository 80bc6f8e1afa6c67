package gateway

import (
	"context"

	"cairn/client"
)

// ReadSmall returns the whole content of f from the hot-object cache
// (filling it on a miss), or ok=false when f is too large for the cache
// or the cache is off. The S3 API serves small objects through it, so
// both APIs warm and share one cache.
func (g *Gateway) ReadSmall(ctx context.Context, f *client.File) ([]byte, bool, error) {
	if !g.hot.fits(f.Size()) {
		return nil, false, nil
	}
	data, err := g.hotRead(ctx, f)
	return data, err == nil, err
}
