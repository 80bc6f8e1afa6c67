// Package client is the library every Cairn front end uses (the gateway,
// later the mount): it resolves paths through meta with a metadata cache,
// reads straight from the data servers, and writes by uploading needles
// first and committing the file's extents to meta in one call.
//
// # Consistency
//
// Metadata (path -> inode, extents) is cached. A cached entry is dropped
//   - at once when this client changes the path itself (read-your-writes),
//   - when meta's change stream (the Watch RPC) reports a change to the path
//     or to a directory above it, which reaches every client within
//     milliseconds of the commit,
//   - and after Config.CacheTTL when the stream is down (no stream, no
//     trust beyond the TTL). A gap in the stream's sequence drops the whole
//     cache.
//
// So a client reads its own writes at once, and another client's writes
// once the change event has arrived (in practice a millisecond on one
// host). The mount issue replaces this with leases that meta revokes before
// it acknowledges a conflicting change.
//
// Data needles are immutable: an overwrite writes new needles and swaps the
// extent list atomically in meta, so a reader holding an old extent list
// reads the old content in full (until garbage collection deletes those
// needles, which meta delays for in-flight reads; a read that races a
// deletion fails with NotExist and is retried once after a fresh resolve).
package client
