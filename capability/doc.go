// Package capability is Cairn's data-plane authorisation: a capability is
// a short token that meta signs (the idea of HDFS block access tokens) and
// a data server verifies before it serves a needle.
//
// A capability names the operations it allows (Read, Write, Delete,
// Replicate, Admin), one volume (or AnyVolume), a range of needle keys
// (one key for a file's extent, all keys for a volume-wide write), the
// namespace it was issued for, its expiry, and the id of the key that
// signed it. The MAC is HMAC-SHA256, truncated to 128 bits, over the
// encoded fields, with a secret meta creates, rotates and hands to data
// servers in its heartbeat answers. A data server accepts the current and
// the previous key, so a capability stays good across one rotation.
//
// # Encoding
//
// Base64url (no padding) of, little-endian:
//
//	0  u8   version (1)
//	1  u8   ops (bit set of Op)
//	2  u32  key id
//	6  u32  volume (AnyVolume: every volume)
//	10 u64  first key
//	18 u64  last key (inclusive)
//	26 u32  expiry, unix seconds
//	30 u8   namespace length n
//	31 [n]  namespace
//	31+n [16] MAC
//
// About 70 characters for a short namespace: small enough for a header
// (X-Cairn-Cap) or a query parameter (cap=) on every request.
//
// # Where the tokens travel
//
// Callers of the data plane put a Source in the context
// (NewContext): the client library's store of tokens meta gave it, or a
// Keyring that signs (meta, and data servers calling each other).
// chunk.Remote asks the Source for the token of each request's exact
// operation, volume and key. The in-process path (a *chunk.Store called
// directly) checks nothing: the caller is the server's own process.
//
// The secret is symmetric: a data server that can verify could also sign.
// That is the trust HDFS gives DataNodes too; a data server is trusted
// with the bytes of every volume it holds anyway. Data servers use it to
// sign their calls to each other (replication, copies, repair) and the
// read/delete capability of a needle a client has just written.
package capability
