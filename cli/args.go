package cli

import (
	"fmt"
	"strings"

	"cairn/errors"
	"cairn/pathname"
)

// target is a remote path argument, ns/path.
type target struct {
	ns   string
	path string // clean, "" for the namespace root
	dir  bool   // the argument ended in '/' or named the namespace root
}

func (t target) String() string {
	if t.path == "" {
		return t.ns
	}
	return t.ns + "/" + t.path
}

// parseTarget validates a remote path argument with package pathname, so
// a bad one is refused before any request, with a message that shows the
// expected form.
func parseTarget(arg string) (target, error) {
	const op = errors.Op("cli.parseTarget")
	if arg == "" {
		return target{}, errors.E(op, errors.Invalid, "empty path: want ns/path, like photos/2024/beach.jpg")
	}
	if strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, "./") || strings.HasPrefix(arg, "../") || arg == "." || arg == ".." {
		return target{}, errors.E(op, errors.Invalid, fmt.Errorf(
			"%q looks like a local path: remote paths are ns/path, like photos/2024/beach.jpg", arg))
	}
	ns, p, dir, err := pathname.Split(arg)
	if err != nil {
		// pathname's Op and Path mean nothing to a user; the argument does.
		return target{}, errors.E(op, errors.KindOf(err), fmt.Errorf("bad remote path %q: %s", arg, messageOf(err)))
	}
	return target{ns: ns, path: p, dir: dir || p == ""}, nil
}

// parseFile is parseTarget for commands that need a file, not a namespace
// or directory.
func parseFile(arg string) (target, error) {
	t, err := parseTarget(arg)
	if err != nil {
		return t, err
	}
	if t.path == "" || t.dir {
		return t, errors.E(errors.Op("cli.parseFile"), errors.Invalid,
			fmt.Errorf("%q names a namespace or directory; want ns/path to a file", arg))
	}
	return t, nil
}
