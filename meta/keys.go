package meta

import (
	"encoding/base64"
	"encoding/binary"
	"strings"

	"cairn/errors"
	"cairn/pathname"
)

// Key prefixes; see doc.go for the layout.
const (
	pNamespace = 'n'
	pDirent    = 'd'
	pInode     = 'i'
	pExtent    = 'e'
	pGarbage   = 'g'
	pVolume    = 'v'
	pUser      = 'u'
	pServer    = 's' // data-server state an operator set (membership.go)
)

var (
	keyInoCounter = []byte("c/ino")
	keyVolCounter = []byte("c/vol")
	keySeq        = []byte("c/seq")
	keyRoot       = []byte("c/root")
	keyClusterID  = []byte("c/cluster")
)

func nsKey(name string) []byte { return append([]byte{pNamespace, '/'}, name...) }

func userKey(access string) []byte { return append([]byte{pUser, '/'}, access...) }

func inodeKey(ino uint64) []byte {
	k := make([]byte, 2, 10)
	k[0], k[1] = pInode, '/'
	return binary.BigEndian.AppendUint64(k, ino)
}

// direntPrefix is the prefix of every entry of directory parent.
func direntPrefix(parent uint64) []byte {
	k := make([]byte, 2, 10+64)
	k[0], k[1] = pDirent, '/'
	return binary.BigEndian.AppendUint64(k, parent)
}

// sortName is the name an entry sorts by: directories carry a trailing '/'
// so that a depth-first walk in key order is full-path binary order.
func sortName(name string, dir bool) string {
	if dir {
		return name + "/"
	}
	return name
}

func direntKey(parent uint64, name string, dir bool) []byte {
	return append(direntPrefix(parent), sortName(name, dir)...)
}

// parseDirentKey is the inverse of direntKey.
func parseDirentKey(k []byte) (parent uint64, name string, dir bool, ok bool) {
	if len(k) < 11 || k[0] != pDirent || k[1] != '/' {
		return 0, "", false, false
	}
	parent = binary.BigEndian.Uint64(k[2:10])
	s := string(k[10:])
	dir = strings.HasSuffix(s, "/")
	name = strings.TrimSuffix(s, "/")
	if name == "" || strings.IndexByte(name, '/') >= 0 {
		return 0, "", false, false
	}
	return parent, name, dir, true
}

func extentPrefix(ino uint64) []byte {
	k := make([]byte, 2, 18)
	k[0], k[1] = pExtent, '/'
	return binary.BigEndian.AppendUint64(k, ino)
}

func extentKey(ino, off uint64) []byte {
	return binary.BigEndian.AppendUint64(extentPrefix(ino), off)
}

func garbageKey(vol uint32, key uint64) []byte {
	k := make([]byte, 2, 14)
	k[0], k[1] = pGarbage, '/'
	k = binary.BigEndian.AppendUint32(k, vol)
	return binary.BigEndian.AppendUint64(k, key)
}

func parseGarbageKey(k []byte) (vol uint32, key uint64, ok bool) {
	if len(k) != 14 || k[0] != pGarbage || k[1] != '/' {
		return 0, 0, false
	}
	return binary.BigEndian.Uint32(k[2:6]), binary.BigEndian.Uint64(k[6:]), true
}

func volumeKey(id uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{pVolume, '/'}, id)
}

// prefixEnd is the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}

func u64(b []byte) uint64 {
	if len(b) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(b)
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// A list cursor is the last path a page returned, with the listing mode,
// so that a listing resumes after it whatever changed in between. It holds
// no server state. Encoding: base64url(version 1, mode byte, path).
const cursorVersion = 1

const (
	modeRecursive = 'r'
	modeDelimited = 'd'
)

func encodeCursor(mode byte, last string) string {
	b := make([]byte, 0, 2+len(last))
	b = append(b, cursorVersion, mode)
	b = append(b, last...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor checks a cursor against the listing it is used with: a
// cursor from another mode or outside the prefix is Invalid, never a panic
// or a silently wrong page.
func decodeCursor(c string, mode byte, prefix string) (string, error) {
	const op = errors.Op("meta.List")
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) < 3 || b[0] != cursorVersion || b[1] != mode {
		return "", errors.E(op, errors.Invalid, "bad list cursor")
	}
	last := string(b[2:])
	if !strings.HasPrefix(last, prefix) {
		return "", errors.E(op, errors.Invalid, "list cursor does not belong to this prefix")
	}
	if _, _, err := pathname.Clean(last); err != nil {
		return "", errors.E(op, errors.Invalid, "bad list cursor", err)
	}
	if strings.HasPrefix(last, "/") || last == "/" {
		return "", errors.E(op, errors.Invalid, "bad list cursor")
	}
	return last, nil
}
