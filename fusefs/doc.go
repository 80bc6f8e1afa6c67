// Package fusefs is Cairn's POSIX file system over FUSE (go-fuse v2).
//
// One mounted namespace is a tree of nodes keyed by Cairn inode numbers.
// Metadata comes from meta in one call per path (Resolve resolves a whole
// path) and is cached under a session: meta pushes every change event over
// the session stream and waits for the mount's acknowledgement before it
// answers the writer, and the mount forwards each event to the kernel
// (entry and inode notify) before it acknowledges. That is what lets the
// kernel keep entries and attributes for a long time; a lost session drops
// every cache, and until it is back kernel timeouts are zero.
//
// Files are written back: writes land in a per-inode dirty buffer, which
// close (flush) and fsync pack into needles and commit to meta as a new
// extent list in one call. Reads go through a block cache keyed by needle
// (so a block is fetched once whatever file version or handle asks) with
// readahead that follows sequential access and fetches ahead in parallel.
//
// Files by concern: fs.go (mounting, options, server-op counting), node.go
// (attributes, paths), dir.go (lookup, listing, namespace changes), file.go
// (the per-inode write-back state), handle.go (open files), cache.go (the
// block cache and readahead), session.go (invalidations), errno.go (the one
// Kind -> errno table).
package fusefs
