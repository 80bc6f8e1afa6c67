package meta

import (
	"strings"

	"cairn/pathname"
)

// ListCursorAfter returns a List cursor that resumes after the key after,
// for a listing of prefix (S3's start-after and marker, which may name a
// key that does not exist). With ok false nothing under prefix sorts after
// it. A key that is not a valid path is ignored: the listing starts at the
// beginning.
func ListCursorAfter(delimited bool, prefix, after string) (cursor string, ok bool) {
	last, ok := listAfter(delimited, prefix, after)
	if last == "" {
		return "", ok
	}
	if delimited {
		return encodeCursor(modeDelimited, last), true
	}
	return encodeCursor(modeRecursive, last), true
}

// listAfter is ListCursorAfter's path: the last path a walk of the
// listing (walkTree) resumes after, "" to start at the beginning.
func listAfter(delimited bool, prefix, after string) (last string, ok bool) {
	prefix = strings.TrimPrefix(prefix, "/")
	if after <= prefix {
		return "", true
	}
	if !strings.HasPrefix(after, prefix) {
		return "", false // every key under prefix sorts before after
	}
	if strings.HasPrefix(after, "/") {
		return "", true
	}
	if _, _, err := pathname.Clean(after); err != nil {
		return "", true
	}
	if !delimited {
		return after, true
	}
	dirSlash := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		dirSlash = prefix[:i+1]
	}
	rel := after[len(dirSlash):]
	if i := strings.IndexByte(rel, '/'); i >= 0 && i < len(rel)-1 {
		// Deeper than the listed directory: resume after the component
		// as a file, so its directory ("comp/", sorting just after) is
		// still listed.
		rel = rel[:i]
	}
	if rel == "" || rel == "/" {
		return "", true
	}
	last = dirSlash + rel
	if !strings.HasPrefix(last, prefix) {
		return "", true
	}
	return last, true
}
