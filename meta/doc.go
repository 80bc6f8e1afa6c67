// Package meta is Cairn's metadata service: namespaces, the directory tree,
// inodes and each file's extents, data-server membership, volume placement,
// access keys and a change stream. State lives in Pebble; the API is the
// gRPC service of proto/meta.proto (NewGRPCServer, Dial).
//
// # Store layout
//
// All integers in keys are big-endian so that byte order is numeric order.
//
//	n/{name}                       metapb.Namespace
//	d/{parent ino:8}{sort name}    directory entry -> child ino (8 bytes)
//	i/{ino:8}                      metapb.Inode
//	f/{ino:8}{gen:8}{offset:8}     metapb.Extent of a file, keyed by file offset, in
//	                               the generation Inode.extent_gen names (extents.go)
//	e/{ino:8}{offset:8}            the same, for a file stored before generations (gen 0)
//	g/{volume:4}{needle key:8}     garbage: a needle no file refers to any more
//	v/{volume:4}                   metapb.Volume
//	u/{access key}                 metapb.User (salted SHA-256 of the secret)
//	j/{token id}                   metapb.JoinTokenRecord (SHA-256 of the secret, role, expiry, uses left)
//	s/{server id}                  metapb.ClusterServerState (draining)
//	x/{id}, x/serial:{hex}         metapb.RevokedCert (certificate revocation, revoke.go)
//	c/ino, c/vol, c/seq, c/root    counters: next inode, next volume id, last
//	                               event sequence; the root access key
//	r/{volume:4}{needle key:8}     owners of a shared needle beyond the first (s3objects.go)
//	sU/, sK/, sB/, c/s3root        S3 users, access keys (sealed secrets), bucket
//	                               config, the root's S3 key (s3keys.go)
//	sM/, sP/                       S3 multipart uploads and their parts (multipart.go)
//	sV/{ns} 0 {path} 0 {^order:8}  S3 stored versions and delete markers; c/s3ver
//	                               the version counter (versions.go)
//	c/applied                      the last Raft entry applied (fsm.go)
//	c/req/{id:16}, c/reqo/{slot:8}, c/reqn
//	                               request ids: outcome, order, count (dedup.go)
//
// Extents live apart from their inode so that a log file with a million
// appends adds one small key per append instead of rewriting one huge value.
// Any other change of the list writes it whole under the next generation,
// so that reading it never steps over keys that earlier changes deleted.
//
// The sort name of a directory entry is the name for a file and name+"/" for
// a directory. A depth-first walk of the entries in key order then yields
// full paths in UTF-8 binary order ("a-b" < "a/x" because '-' < '/'), which
// is the order S3 listings promise, with no sorting and no buffering. A name
// is looked up as a file first, then as a directory; the two never coexist
// (POSIX), which Commit, Mkdir and Rename enforce. Each namespace has its own
// root directory inode; inode numbers come from the c/ino counter.
//
// # Mutations
//
// Every mutation is a metapb.Command applied by one deterministic function,
// (*Service).apply, which reads only the batch and the command (the clock
// comes in Command.now_ns). That is the seam where a replicated log
// (hashicorp/raft) goes later: the leader proposes Commands, every replica
// applies them.
//
// Apply is serialized by one mutex. It builds an indexed Pebble batch and
// hands it to Pebble with ApplyNoSyncWait while holding the mutex, then
// releases the mutex and waits for the WAL fsync before acknowledging. So
// concurrent mutations share fsyncs (group commit) and nothing is acked
// before it is durable. The nuance: a mutation is visible to readers (and
// watchers are told about it) a moment before it is durable. A reader may
// therefore see a change that a crash in the next millisecond undoes; the
// writer, though, was never told it succeeded. This is the same contract
// as a local file system's page cache before fsync returns, and it is what
// lets one fsync carry many mutations.
//
// # Reads
//
// A read uses one Pebble iterator (and its clones), which is a consistent
// point-in-time view: Resolve never sees a new size with old extents.
// Resolve walks the whole path in one call; List walks the tree with seeks,
// holding O(depth) state, and its cursor is the last path returned, so it
// is stable across mutations and costs no server memory between pages.
//
// # Garbage
//
// Extents dropped by an overwrite, truncate, delete or replacing rename are
// queued under g/ in the same batch as the change. A background loop deletes
// the needles on the data servers (Config.Chunks) and then removes the queue
// entries with a GarbageDone command; failures are retried with backoff.
// A needle may be shared by several files and multipart parts (S3 copies
// reuse data); r/ counts its extra owners and only the last owner to let
// go queues it (s3objects.go).
package meta
