package chunk

import (
	"context"
	"io"
	"time"

	"cairn/errors"
)

// scrubber re-reads every needle of every volume at Config.ScrubRate,
// verifying each block's checksum, and restores a corrupt needle from a
// replica. A pass over everything is followed by a pause of ScrubInterval.
func (s *Store) scrubber(ctx context.Context) {
	var th throttle
	for {
		start := time.Now()
		checked, bad := s.scrubPass(ctx, &th)
		if ctx.Err() != nil {
			return
		}
		if bad > 0 || checked > 0 {
			s.log.Info("scrub pass done", "needles", checked, "corrupt", bad, "took", time.Since(start))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.cfg.ScrubInterval):
		}
	}
}

// scrubPass checks every needle once and returns how many it checked and
// how many were corrupt.
func (s *Store) scrubPass(ctx context.Context, th *throttle) (checked, bad int) {
	for _, st := range s.VolumeStats() {
		v, err := s.volume("chunk.scrub", st.ID)
		if err != nil {
			continue
		}
		for _, n := range v.Needles() {
			if th.wait(ctx, n.Size, s.cfg.ScrubRate) != nil {
				return checked, bad
			}
			_, err := v.ReadTo(n.Key, 0, n.Size, io.Discard)
			checked++
			if !errors.Is(errors.Corrupt, err) {
				continue
			}
			bad++
			s.corrupt.Inc()
			s.log.Error("scrub found a corrupt needle", "volume", st.ID, "key", n.Key, "err", err)
			if rerr := s.RepairNeedle(ctx, st.ID, n.Key); rerr != nil {
				s.log.Error("could not repair a corrupt needle", "volume", st.ID, "key", n.Key, "err", rerr)
			}
		}
	}
	return checked, bad
}
