package meta

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/cockroachdb/pebble/v2"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

const (
	defaultListLimit = 1000
	maxListLimit     = 10000
)

// List lists one directory (delimiter "/") or a whole subtree (no
// delimiter) in UTF-8 binary order of the full path. It walks the tree with
// one iterator per level of depth and never loads a directory: a page costs
// O(limit + depth) memory whatever the directory's size, and the cursor is
// the last path returned, so nothing is kept between pages.
func (s *Service) List(ctx context.Context, req *metapb.ListRequest) (*metapb.ListResponse, error) {
	const op = errors.Op("meta.List")
	if err := pathname.ValidNamespace(req.Ns); err != nil {
		return nil, errors.E(op, err)
	}
	var mode byte
	switch req.Delimiter {
	case "":
		mode = modeRecursive
	case "/":
		mode = modeDelimited
	default:
		return nil, errors.E(op, errors.Invalid, "delimiter must be \"/\" or empty")
	}
	limit := int(req.Limit)
	if limit == 0 {
		limit = defaultListLimit
	}
	limit = min(limit, maxListLimit)

	prefix := strings.TrimPrefix(req.Prefix, "/")
	dirPart, namePrefix, ok := splitListPrefix(prefix)
	if !ok {
		return nil, errors.E(op, errors.Invalid, fullPath(req.Ns, prefix), "bad list prefix")
	}
	dirSlash := ""
	if dirPart != "" {
		dirSlash = dirPart + "/"
	}
	var last string
	if req.Cursor != "" {
		var err error
		if last, err = decodeCursor(req.Cursor, mode, prefix); err != nil {
			return nil, err
		}
		rel := last[len(dirSlash):]
		if rel == "" || rel == "/" || mode == modeDelimited && strings.Contains(strings.TrimSuffix(rel, "/"), "/") {
			return nil, errors.E(op, errors.Invalid, "list cursor does not belong to this listing")
		}
	}

	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	ns, err := v.namespace(req.Ns)
	if err != nil {
		return nil, errors.E(op, err)
	}
	var out []*metapb.ListEntry
	// One entry past the limit is collected so that the last page has no
	// cursor.
	err = walkTree(v, ns, dirPart, namePrefix, mode == modeDelimited, last, func(name string, dir bool, ino uint64) (bool, error) {
		n, err := v.inode(ino)
		if err != nil {
			return false, err
		}
		out = append(out, &metapb.ListEntry{Name: name, Dir: dir, Inode: n})
		return len(out) <= limit, nil
	})
	if err != nil {
		return nil, errors.E(op, fullPath(req.Ns, prefix), err)
	}
	resp := &metapb.ListResponse{Entries: out}
	if len(out) > limit {
		resp.Entries = out[:limit]
		resp.NextCursor = encodeCursor(mode, resp.Entries[limit-1].Name)
	}
	return resp, nil
}

// splitListPrefix splits a listing's prefix into the directory listed
// and the start of the names in it; ok is false for a prefix no path can
// have.
func splitListPrefix(prefix string) (dirPart, namePrefix string, ok bool) {
	namePrefix = prefix
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirPart, namePrefix = prefix[:i], prefix[i+1:]
	}
	if clean, _, err := pathname.Clean(dirPart); err != nil || clean != dirPart {
		return "", "", false
	}
	if !utf8.ValidString(namePrefix) || strings.IndexByte(namePrefix, 0) >= 0 {
		return "", "", false
	}
	return dirPart, namePrefix, true
}

// walkTree walks ns's tree in UTF-8 binary order of the full path, after
// the path last ("" from the start): one directory (delimited, whose
// sub-directories are visited as "name/") or the whole subtree below
// directory dirPart, entries whose names start with namePrefix. visit is
// handed each entry until it answers false. A dirPart that is not a
// directory has nothing to walk.
func walkTree(v *view, ns *metapb.Namespace, dirPart, namePrefix string, delimited bool, last string, visit func(name string, dir bool, ino uint64) (bool, error)) error {
	dirIno, isDir, err := v.walk(ns.RootIno, dirPart)
	if errors.Is(errors.NotExist, err) || errors.Is(errors.NotDir, err) || err == nil && !isDir {
		return nil // like S3: no such prefix, no entries
	}
	if err != nil {
		return errors.E(fullPath(ns.Name, dirPart), err)
	}
	dirSlash := ""
	if dirPart != "" {
		dirSlash = dirPart + "/"
	}
	l := &lister{v: v, visit: visit}
	if delimited {
		return l.directory(dirIno, dirSlash, namePrefix, last)
	}
	return l.tree(dirIno, dirSlash, namePrefix, last)
}

// lister walks a listing's entries in order, handing each to visit.
type lister struct {
	v     *view
	visit func(name string, dir bool, ino uint64) (more bool, err error)
}

// emit hands an entry to visit and reports whether the walk goes on.
func (l *lister) emit(name string, dir bool, ino uint64) (bool, error) {
	return l.visit(name, dir, ino)
}

// seekAfter positions it on the first entry after sort name sn.
func seekAfter(it *pebble.Iterator, dir uint64, sn string) {
	k := append(direntPrefix(dir), sn...)
	it.SeekGE(append(k, 0))
}

func (l *lister) dirIter(dir uint64, namePrefix string) (*pebble.Iterator, error) {
	lower := append(direntPrefix(dir), namePrefix...)
	return l.v.newIter(lower, prefixEnd(lower))
}

func (l *lister) directory(dir uint64, dirSlash, namePrefix, last string) error {
	it, err := l.dirIter(dir, namePrefix)
	if err != nil {
		return err
	}
	defer it.Close()
	if last != "" {
		seekAfter(it, dir, last[len(dirSlash):])
	} else {
		it.First()
	}
	for ; it.Valid(); it.Next() {
		_, name, isDir, ok := parseDirentKey(it.Key())
		if !ok {
			return errors.E(errors.Corrupt, "bad directory entry key")
		}
		more, err := l.emit(dirSlash+sortName(name, isDir), isDir, u64(it.Value()))
		if err != nil || !more {
			return err
		}
	}
	return it.Error()
}

// frame is one level of the depth-first walk: its iterator always sits on
// the next entry to visit.
type frame struct {
	it   *pebble.Iterator
	path string // the directory's path with a trailing '/', "" at the root
}

func (l *lister) tree(dir uint64, dirSlash, namePrefix, last string) (err error) {
	top, err := l.dirIter(dir, namePrefix)
	if err != nil {
		return err
	}
	stack := []frame{{top, dirSlash}}
	defer func() {
		for _, f := range stack {
			f.it.Close()
		}
	}()
	if last == "" {
		top.First()
	} else if err := l.resume(&stack, dir, last[len(dirSlash):]); err != nil {
		return err
	}
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if !f.it.Valid() {
			err := f.it.Error()
			f.it.Close()
			stack = stack[:len(stack)-1]
			if err != nil {
				return err
			}
			continue
		}
		_, name, isDir, ok := parseDirentKey(f.it.Key())
		if !ok {
			return errors.E(errors.Corrupt, "bad directory entry key")
		}
		child := u64(f.it.Value())
		f.it.Next()
		if !isDir {
			if more, err := l.emit(f.path+name, false, child); err != nil || !more {
				return err
			}
			continue
		}
		sub, err := l.dirIter(child, "")
		if err != nil {
			return err
		}
		if sub.First() {
			stack = append(stack, frame{sub, f.path + name + "/"})
			continue
		}
		err = sub.Error()
		sub.Close()
		if err != nil {
			return err
		}
		// An empty directory is listed as "name/", like an S3 folder marker.
		if more, err := l.emit(f.path+name+"/", true, child); err != nil || !more {
			return err
		}
	}
	return nil
}

// resume rebuilds the walk's stack from the cursor path rel (relative to
// the listed directory): at each level the iterator is placed after the
// cursor's component, and the walk descends while those directories still
// exist. Whatever changed since, it continues at the first path after rel.
func (l *lister) resume(stack *[]frame, dir uint64, rel string) error {
	dirLast := strings.HasSuffix(rel, "/")
	comps := strings.Split(strings.TrimSuffix(rel, "/"), "/")
	for i, c := range comps {
		f := (*stack)[len(*stack)-1]
		isLast := i == len(comps)-1
		seekAfter(f.it, dir, sortName(c, !isLast || dirLast))
		if isLast {
			break
		}
		child, found, err := l.v.get(direntKey(dir, c, true))
		if err != nil {
			return err
		}
		if !found {
			break
		}
		dir = u64(child)
		sub, err := l.dirIter(dir, "")
		if err != nil {
			return err
		}
		*stack = append(*stack, frame{sub, f.path + c + "/"})
	}
	return nil
}
