package volume

// What erasure coding needs of a sealed volume (chunk/ec.go): where every
// live needle lies in the file being encoded, so that the shards' servers
// can find a needle in the encoded bytes without the volume.

// NeedleLoc is one live needle and where its data lies.
type NeedleLoc struct {
	Key  uint64
	Data int64 // offset of the first data byte in the .dat
	Size int64 // data bytes
}

// Locations returns every live needle of the current file, in key order,
// and the file's instance: the locations hold for that instance only.
func (v *Volume) Locations() (instance uint64, locs []NeedleLoc) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.df != nil {
		instance = v.df.instance
	}
	locs = make([]NeedleLoc, 0, v.idx.live)
	add := func(s slot) {
		if s.off != 0 {
			locs = append(locs, NeedleLoc{Key: s.key(), Data: int64(s.off)*8 + headerSize, Size: int64(s.size)})
		}
	}
	for _, s := range v.idx.sorted {
		add(s)
	}
	for _, s := range v.idx.extra {
		add(s)
	}
	sortLocs(locs)
	return instance, locs
}

func sortLocs(l []NeedleLoc) {
	// keys of sorted are ordered; extra's are few: insertion sort is enough
	for i := 1; i < len(l); i++ {
		for j := i; j > 0 && l[j].Key < l[j-1].Key; j-- {
			l[j], l[j-1] = l[j-1], l[j]
		}
	}
}
