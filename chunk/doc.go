// Package chunk is a Cairn data server: the volumes (package volume) of
// one directory, served in-process as cairn.Chunks (*Store) and over an
// HTTP/1.1 data plane (Store.Handler), with a client for it (*Remote).
// chunk/chunktest is the suite both implementations pass.
//
// # Directory
//
//	server.id        random hex id, created once, sent with heartbeats
//	{vid}.dat        a volume's records (format in package volume)
//	{vid}.idx        its index hint
//
// # HTTP routes
//
// Every route but GET /local needs a capability (package capability,
// auth.go) in the X-Cairn-Cap header or the cap= query parameter, for the
// operation, volume and key named below, or a verified meta or
// data-server identity (mutual TLS). None: 401; forged, expired, unknown
// key or too narrow: 403; the request then reads and changes nothing.
//
//	route                                       capability          answer
//	POST   /v/{vid}?gen=G                       write vid           200 {"key":K,"cap":C}
//	       body = needle (Content-Length required); C reads and deletes K
//	PUT    /v/{vid}/{key}?gen=G                 replicate vid/key   200 {"key":K}
//	       key chosen by the caller (replication, copies)
//	GET    /v/{vid}/{key}                       read vid/key        the needle; "Range:
//	HEAD   /v/{vid}/{key}                       read vid/key        bytes=a-b", "a-" or "-n"
//	       (one range) -> 206 with Content-Range; Content-Length always set
//	DELETE /v/{vid}/{key}?gen=G                 delete vid/key      204 (also for a needle that is not there)
//	PUT    /admin/volumes/{vid}?gen=G           admin vid           create a volume -> 204
//	GET    /admin/volumes                       admin, any volume   {"server_id":..., "volumes":[...]}
//	POST   /admin/volumes/{vid}/compact         admin vid           compact now -> 204
//	PUT    /admin/volumes/{vid}/replicas?gen=G&addrs=a,b,c
//	                                            admin vid           replica set (meta) -> 204
//	GET    /admin/volumes/{vid}/needles         admin vid           [{"k":key,"n":size},...]
//	POST   /admin/volumes/{vid}/copy?gen=G&from=ADDR&rate=N
//	                                            admin vid           copy from a peer -> 204
//	POST   /v/{vid}/{key}/repair                read vid/key        restore a corrupt needle from a peer
//	GET    /local                               none                {"socket":"@cairn-chunk-ID"}: the
//	       local-read socket (local.go), which checks its peer's uid; 404 when off
//	PUT    /ec/{vid}/index                      admin vid           store an encoded volume's needle index
//	       (header Cairn-Ec-Servers: a,b,c: where every shard goes, until meta's heartbeat says)
//	GET    /ec/{vid}/index                      admin vid           the index (deleted needles left out)
//	GET    /ec/{vid}/index/{key}                read vid/key        the same, for a reader finding its shard
//	PUT    /ec/{vid}/shards/{i}                 admin vid           store shard i (a whole shard file)
//	GET    /ec/{vid}/shards/{i}?off=&n=         admin vid           n cell bytes of shard i (a peer's rebuild)
//	POST   /ec/{vid}/encode                     admin vid           {"gen","k","m","cell","to":[...]}: encode
//	       this server's copy onto the servers in to -> {"size":N} once all shards are durable
//	POST   /ec/{vid}/rebuild/{i}                admin vid           {"k","m","cell","size","servers":[...]}:
//	       rebuild shard i here from the others -> 200 once durable
//	POST   /ec/{vid}/compact                    admin vid           {"gen","to":[...]}: encode the live needles
//	       into a staged generation gen on the servers in to -> {"size":N} (ec_compact.go)
//	PUT    /ec/{vid}/staged/{gen}/index         admin vid           store a staged generation's index
//	PUT    /ec/{vid}/staged/{gen}/shards/{i}    admin vid           store a staged generation's shard i
//	POST   /ec/{vid}/switch/{gen}               admin vid           make staged generation gen current here
//	A GET/HEAD/DELETE of /v/{vid}/{key} of an erasure-coded volume works on
//	any of its shard servers (ec.go).
//
// "admin vid" and "write vid" need a capability of every key of the
// volume. Until meta's first heartbeat answer brings the keys, every
// route but /local is 503 Unavailable.
//
// A needle key carries a random cookie in its high 32 bits
// (volume/doc.go): a key whose sequence number exists with another cookie
// is answered exactly as a missing needle (404 NotExist, before any Range
// check), whatever capability it comes with. A peer whose certificate meta
// revoked (the list comes with heartbeat answers) fails the handshake, or
// gets 401 on a connection it already had.
//
// In a cluster (replicate.go) a POST to the volume's primary is forwarded
// to the other replicas and answered once every copy is durable; every
// data-plane call is Unavailable while the server holds no lease from meta.
//
// A POST or PUT of a needle, once its body is read, is answered with an
// interim "102 Processing" every KeepAliveEvery (200 ms) until the final
// answer. Remote's Put and PutKey give up on a server that shows no sign
// of life (takes no body bytes, sends no interim, no answer) for Silence
// (1 s) and report it Unavailable, naming it: a dead or cut-off primary or
// replica costs a writer about a second, while a slow fdatasync or a slow
// replica, which keep saying so, does not fail the write.
//
// Errors are JSON, {"error":{"code":"NotExist","message":"...","path":"1/42"}},
// with the status from the single table kindStatus (http.go): Invalid 400,
// Unauthenticated 401, Permission 403, NotExist 404, TooLarge 413, Range 416, Stale/ReadOnly/Exist 409, Corrupt
// and IO 500, Unavailable 503. Remote turns the code back into the same
// errors.Kind, so callers test errors.Is(errors.Corrupt, err) whichever
// implementation they hold.
//
// A GET sends its status line with the first verified byte: damage in the
// first window read (1 MiB) is a clean 500 "Corrupt". Damage found later,
// after the 200/206 and some bytes are on the wire, can only be signalled
// by cutting the connection; Remote reports that as errors.IO, and the
// bytes it already passed on were verified. (Sending the checksum state as
// an HTTP trailer would need chunked encoding and no Content-Length.)
//
// The range semantics differ at the edges on purpose: HTTP clamps a range
// whose end is past the needle (RFC 9110); cairn.Chunks calls that
// errors.Range, so Remote checks the Content-Length it got against what
// it asked for.
//
// # Why HTTP/1.1 and these choices
//
// A read is one request on a pooled keep-alive connection (Remote shares
// one Transport, up to 256 idle connections per server, TCP_NODELAY as Go
// sets it): no per-read connect and no metadata hop. Bodies are needle
// bytes, not framed: nothing to decode. The store reads PUT bodies of up
// to 256 KiB into pooled buffers, since a needle must be complete in
// memory to be checksummed before the append lock.
//
// # Background work
//
// Run sends a heartbeat to meta (server id, address, labels, capacity and
// free space from statfs, every volume's stats) every HeartbeatInterval,
// or six times per lease if that is more often, and again soon after one
// fails; and it compacts, one at a time, volumes whose garbage ratio
// passes CompactRatio.
// Run also serves local reads (local.go): clients on this host read
// needles straight from the volume files, asking the server where each
// lies. Every operation is counted in metrics.Ops (role "chunk": put,
// putkey, get, head, delete, create, compact, volumes, locate, repair), and corrupt reads in
// cairn_chunk_corrupt_reads_total.
package chunk
