// Package pathname defines which namespace names and file paths Cairn
// accepts. Every edge (HTTP, S3, FUSE, CLI) validates outside input here, so
// the rules are the same whichever way a name comes in.
package pathname

import (
	"strings"
	"unicode/utf8"

	"cairn/errors"
)

const (
	// MaxComponent is the longest name of one file or directory, in bytes
	// (the POSIX NAME_MAX of common local file systems).
	MaxComponent = 255
	// MaxPath is the longest path inside a namespace, in bytes. S3 allows
	// 1024-byte keys; PATH_MAX is 4096.
	MaxPath = 4096
	// MinNamespace and MaxNamespace bound namespace names, as S3 bounds
	// bucket names.
	MinNamespace = 3
	MaxNamespace = 63
)

// ValidNamespace checks a namespace (bucket) name: 3 to 63 characters of
// lowercase letters, digits, '-' and '.', beginning and ending with a letter
// or digit. These are S3's bucket rules, so every namespace is also a valid
// bucket name and a valid DNS label for virtual-host addressing.
func ValidNamespace(ns string) error {
	const op = errors.Op("pathname.ValidNamespace")
	if len(ns) < MinNamespace || len(ns) > MaxNamespace {
		return errors.E(op, errors.Invalid, errors.Path(printable(ns)),
			"namespace name must be 3 to 63 characters")
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if !alnum && c != '-' && c != '.' {
			return errors.E(op, errors.Invalid, errors.Path(printable(ns)),
				"namespace name may hold only lowercase letters, digits, '-' and '.'")
		}
		if !alnum && (i == 0 || i == len(ns)-1) {
			return errors.E(op, errors.Invalid, errors.Path(ns),
				"namespace name must begin and end with a letter or digit")
		}
	}
	if strings.Contains(ns, "..") {
		return errors.E(op, errors.Invalid, errors.Path(ns), "namespace name must not contain '..'")
	}
	return nil
}

// Clean validates a path inside a namespace and returns it without leading
// and trailing slashes. The empty path (the namespace root) is valid. The
// boolean reports whether the input ended in '/', which names a directory.
//
// Refused, never rewritten: invalid UTF-8, NUL, empty components ("a//b"),
// "." and ".." components, a component over MaxComponent bytes and a path
// over MaxPath bytes. Rewriting "a/../b" to "b" would let two spellings name
// one file, which breaks caching and access checks, so it is an error.
func Clean(p string) (clean string, dir bool, err error) {
	const op = errors.Op("pathname.Clean")
	if len(p) > MaxPath {
		return "", false, errors.E(op, errors.NameTooLong, errors.Path(printable(p[:64])+"..."),
			"path is longer than 4096 bytes")
	}
	if !utf8.ValidString(p) {
		return "", false, errors.E(op, errors.Invalid, errors.Path(printable(p)), "path is not valid UTF-8")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", false, errors.E(op, errors.Invalid, errors.Path(printable(p)), "path contains a NUL byte")
	}
	p = strings.TrimPrefix(p, "/")
	dir = strings.HasSuffix(p, "/")
	p = strings.TrimSuffix(p, "/")
	if p == "" {
		return "", true, nil
	}
	for c := range strings.SplitSeq(p, "/") {
		switch {
		case c == "":
			return "", false, errors.E(op, errors.Invalid, errors.Path(p), "path has an empty component ('//')")
		case c == "." || c == "..":
			return "", false, errors.E(op, errors.Invalid, errors.Path(p), "path has a '.' or '..' component")
		case len(c) > MaxComponent:
			return "", false, errors.E(op, errors.NameTooLong, errors.Path(p),
				"a path component is longer than 255 bytes")
		}
	}
	return p, dir, nil
}

// Inside cleans the part of a URL path after the namespace and its slash,
// as Clean does, except that a leading '/' is refused: it is the empty
// component of "ns//a", which would otherwise be stored as "ns/a".
func Inside(rest string) (clean string, dir bool, err error) {
	if strings.HasPrefix(rest, "/") {
		return "", false, errors.E(errors.Op("pathname.Inside"), errors.Invalid, errors.Path(printable(rest)),
			"path has an empty component ('//') after the namespace")
	}
	return Clean(rest)
}

// Split separates "ns/a/b" into the namespace and the cleaned path inside
// it, validating both.
func Split(full string) (ns, p string, dir bool, err error) {
	full = strings.TrimPrefix(full, "/")
	ns, rest, _ := strings.Cut(full, "/")
	if err := ValidNamespace(ns); err != nil {
		return "", "", false, err
	}
	p, dir, err = Inside(rest)
	if err != nil {
		return "", "", false, err
	}
	return ns, p, dir, nil
}

// ValidName checks one path component (a name inside a directory), as the
// FUSE layer receives it.
func ValidName(name string) error {
	const op = errors.Op("pathname.ValidName")
	switch {
	case name == "" || name == "." || name == "..":
		return errors.E(op, errors.Invalid, errors.Path(name), "invalid file name")
	case len(name) > MaxComponent:
		return errors.E(op, errors.NameTooLong, "a file name is longer than 255 bytes")
	case strings.ContainsAny(name, "/\x00"):
		return errors.E(op, errors.Invalid, errors.Path(printable(name)), "file name contains '/' or NUL")
	case !utf8.ValidString(name):
		return errors.E(op, errors.Invalid, errors.Path(printable(name)), "file name is not valid UTF-8")
	}
	return nil
}

// Join joins a directory path and a name; either may be empty.
func Join(dir, name string) string {
	if dir == "" {
		return name
	}
	if name == "" {
		return dir
	}
	return dir + "/" + name
}

// Parent returns the directory part and the last component of a clean path.
func Parent(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// printable makes a name safe to put in a message: invalid UTF-8 and
// control bytes are quoted, so an error never carries raw binary.
func printable(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return s
	}
	q := strings.Trim(quote(s), `"`)
	return q
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r < 0x20 || r == 0x7f {
			const hex = "0123456789abcdef"
			b.WriteString(`\x`)
			b.WriteByte(hex[s[i]>>4])
			b.WriteByte(hex[s[i]&15])
		} else {
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('"')
	return b.String()
}
