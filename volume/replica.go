package volume

import (
	"os"
	"sort"

	"cairn/errors"
)

// What replication needs of a volume: the primary learns a new needle's
// key before its fdatasync (so replicas write in parallel with it), a
// copy lists the live needles, a repair rewrites a needle past the
// read-only mark, and a stale copy is removed.

// NeedleInfo is one live needle: its key and data length.
type NeedleInfo struct {
	Key  uint64 `json:"k"`
	Size int64  `json:"n"`
}

// AppendStarted is Append that calls started with the needle's key as soon
// as the record is written and before it is synced, so that a primary can
// send the needle to its replicas while its own fdatasync runs. It still
// returns only once the needle is durable here.
func (v *Volume) AppendStarted(gen uint64, data []byte, started func(key uint64)) (uint64, error) {
	return v.write("volume.Append", gen, 0, flagData, data, writeOpts{started: started})
}

// Restore writes data under key even if the volume is read-only or full
// (up to what the index can address): a repair replacing a corrupt copy,
// or a copy filling a new replica. The generation must still match.
func (v *Volume) Restore(gen, key uint64, data []byte) error {
	if uint32(key) == 0 {
		return errors.E(errors.Op("volume.Restore"), errors.Invalid, v.path(), "key 0 is reserved")
	}
	_, err := v.write("volume.Restore", gen, key, flagData, data, writeOpts{force: true})
	return err
}

// Needles returns the live needles in key order.
func (v *Volume) Needles() []NeedleInfo {
	v.mu.RLock()
	out := make([]NeedleInfo, 0, v.idx.live)
	for _, s := range v.idx.sorted {
		if s.off != 0 {
			out = append(out, NeedleInfo{s.key(), int64(s.size)})
		}
	}
	for _, s := range v.idx.extra {
		out = append(out, NeedleInfo{s.key(), int64(s.size)})
	}
	v.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Remove closes the volume and deletes its files: a stale copy that
// another server now holds.
func (v *Volume) Remove() error {
	cerr := v.Close()
	var errs []error
	for _, name := range []string{v.datPath, v.idxPath} {
		if err := v.opts.FS.Remove(name); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	if err := v.opts.FS.SyncDir(v.dir); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.E(errors.Op("volume.Remove"), errors.IO, v.path(), errors.Join(errs...))
	}
	_ = cerr // the files are gone; a failed final sync no longer matters
	return nil
}
