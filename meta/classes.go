package meta

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Storage classes (tiers): how a namespace's bytes are kept. "replicated"
// is RF full copies (the namespace's replication); an ec class keeps
// sealed volumes as K data + M parity shards (package ec), at (K+M)/K
// times the data instead of RF times. A class may be pinned to servers by
// media label (--label media=ssd). Classes are configuration, not state:
// every meta of a cluster is started with the same --class flags, and a
// name is checked when a namespace takes it, never when a command applies.

// ClassReplicated is the class of namespaces created without one.
const ClassReplicated = "replicated"

// Class is one storage class.
type Class struct {
	Name string
	// K, M: the erasure code; K == 0 is a replicated class.
	K, M int
	// Replication is the replicas of a replicated class, or of an ec
	// class's volumes while they are written (before sealing). 0: the
	// namespace's.
	Replication uint32
	// Media restricts placement to servers labelled media=Media.
	Media string
}

// EC reports whether the class erasure-codes sealed volumes.
func (c Class) EC() bool { return c.K > 0 }

// ParseClass reads a --class flag: NAME=replicated[:RF] or NAME=ec:K+M,
// each optionally followed by ",media=LABEL" (and for ec, ",rf=N": the
// replicas while written). "ec-K+M" alone names its own code.
func ParseClass(s string) (Class, error) {
	const op = errors.Op("meta.ParseClass")
	name, spec, ok := strings.Cut(s, "=")
	if !ok {
		if c, ok := implicitClass(s); ok {
			return c, nil
		}
		return Class{}, errors.Errorf(op, errors.Invalid, "class %q: want NAME=replicated[:RF] or NAME=ec:K+M[,media=LABEL]", s)
	}
	if !validClassName(name) {
		return Class{}, errors.Errorf(op, errors.Invalid, "class name %q: letters, digits, '-', '+', '_', at most 64", name)
	}
	c := Class{Name: name}
	parts := strings.Split(spec, ",")
	kind, arg, _ := strings.Cut(parts[0], ":")
	switch kind {
	case "replicated":
		if arg != "" {
			rf, err := strconv.ParseUint(arg, 10, 8)
			if err != nil || rf < 1 || rf > 16 {
				return Class{}, errors.Errorf(op, errors.Invalid, "class %q: replication %q: 1 to 16", name, arg)
			}
			c.Replication = uint32(rf)
		}
	case "ec":
		k, m, err := parseCode(arg)
		if err != nil {
			return Class{}, errors.E(op, errors.Invalid, fmt.Sprintf("class %q: %v", name, err))
		}
		c.K, c.M = k, m
	default:
		return Class{}, errors.Errorf(op, errors.Invalid, "class %q: kind %q: replicated or ec", name, kind)
	}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		switch k {
		case "media":
			if v == "" {
				return Class{}, errors.Errorf(op, errors.Invalid, "class %q: empty media", name)
			}
			c.Media = v
		case "rf":
			rf, err := strconv.ParseUint(v, 10, 8)
			if err != nil || rf < 1 || rf > 16 {
				return Class{}, errors.Errorf(op, errors.Invalid, "class %q: rf %q: 1 to 16", name, v)
			}
			c.Replication = uint32(rf)
		default:
			return Class{}, errors.Errorf(op, errors.Invalid, "class %q: unknown option %q", name, p)
		}
	}
	return c, nil
}

// parseCode reads "K+M".
func parseCode(s string) (k, m int, err error) {
	a, b, ok := strings.Cut(s, "+")
	if !ok {
		return 0, 0, fmt.Errorf("code %q: want K+M", s)
	}
	k, err1 := strconv.Atoi(a)
	m, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || k < 1 || m < 1 || k+m > 64 {
		return 0, 0, fmt.Errorf("code %q: K >= 1, M >= 1, K+M <= 64", s)
	}
	return k, m, nil
}

// implicitClass is the class a name like "ec-4+2" stands for without
// configuration.
func implicitClass(name string) (Class, bool) {
	if name == ClassReplicated || name == "" {
		return Class{Name: ClassReplicated}, true
	}
	code, ok := strings.CutPrefix(name, "ec-")
	if !ok {
		return Class{}, false
	}
	k, m, err := parseCode(code)
	if err != nil {
		return Class{}, false
	}
	return Class{Name: name, K: k, M: m}, true
}

func validClassName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '+' || r == '_') {
			return false
		}
	}
	return true
}

// class returns the class named name: configured, or implied by its name.
func (s *Service) class(name string) (Class, error) {
	if name == "" {
		name = ClassReplicated
	}
	for _, c := range s.cfg.Classes {
		if c.Name == name {
			return c, nil
		}
	}
	if c, ok := implicitClass(name); ok {
		return c, nil
	}
	return Class{}, errors.Errorf(errors.Op("meta.class"), errors.Invalid, "unknown storage class %q", name)
}

// classList is every configured class, "replicated" first, for status.
func (s *Service) classList() []*metapb.StorageClass {
	out := []*metapb.StorageClass{{Name: ClassReplicated, Replication: s.cfg.DefaultReplication}}
	for _, c := range s.cfg.Classes {
		if c.Name == ClassReplicated {
			out[0] = classPB(c)
			continue
		}
		out = append(out, classPB(c))
	}
	return out
}

func classPB(c Class) *metapb.StorageClass {
	return &metapb.StorageClass{Name: c.Name, K: uint32(c.K), M: uint32(c.M), Replication: c.Replication, Media: c.Media}
}

// volumeClass is the class name a volume is recorded with ("" for
// replicated, so that volumes made before classes existed match).
func volumeClass(name string) string {
	if name == ClassReplicated {
		return ""
	}
	return name
}

// mediaOK reports whether server d may hold data of class c.
func mediaOK(c Class, d *dataServer) bool {
	return c.Media == "" || d.labels["media"] == c.Media
}

// classCandidates are placementCandidates restricted to c's media.
// Called with pmu.
func (s *Service) classCandidates(c Class, cands []*dataServer) []*dataServer {
	return slices.DeleteFunc(cands, func(d *dataServer) bool { return !mediaOK(c, d) })
}

func validateClasses(cs []Class) error {
	seen := map[string]bool{}
	for _, c := range cs {
		if seen[c.Name] {
			return errors.Errorf(errors.Op("meta.Config"), errors.Invalid, "storage class %q given twice", c.Name)
		}
		seen[c.Name] = true
		if c.Name == ClassReplicated && c.EC() {
			return errors.E(errors.Op("meta.Config"), errors.Invalid, "class \"replicated\" cannot be erasure-coded")
		}
	}
	return nil
}

// namespaceClass checks a new namespace's class and fills in what the
// class decides: a replicated class with its own RF sets the namespace's.
func (s *Service) namespaceClass(r *metapb.CreateNamespaceRequest) error {
	c, err := s.class(r.StorageClass)
	if err != nil {
		return err
	}
	r.StorageClass = volumeClass(c.Name)
	if !c.EC() && c.Replication > 0 {
		r.Replication = c.Replication
	}
	return nil
}
