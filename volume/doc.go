// Package volume is the on-disk format of one append-only volume: many
// needles (small files, or extents of big ones) packed into one file, each
// with its own checksums, found through a compact in-memory index.
//
// # Files
//
// Volume 7 in a directory is two files: 7.dat, the records, and 7.idx, an
// index that only makes opening fast (it can always be rebuilt from 7.dat).
// All integers are little-endian.
//
// 7.dat starts with a 64-byte superblock:
//
//	0   [8]  magic "CAIRNVOL"
//	8   u32  format version (2; 1 is read, see Keys and cookies)
//	12  u32  volume id
//	16  u64  generation (mutations carrying another generation are errors.Stale)
//	24  u64  key floor: keys below it may have been used (survives compaction)
//	32  u64  instance: random, new for every file compaction writes
//	40  i64  creation time, unix ns
//	48  u8   1 if marked read-only
//	49  [11] zero
//	60  u32  CRC32C of bytes 0..60
//
// Then records, each at an 8-byte aligned offset:
//
//	0   u32  magic 0x4c44454e ("NEDL")
//	4   u8   flags: 1 data, 2 tombstone
//	5   [3]  zero
//	8   u64  needle key: sequence number (low 32 bits, never 0), cookie (high 32)
//	16  u32  data length n (0 for a tombstone)
//	20  u32  CRC32C of bytes 0..20
//	24  [n]  data
//	    [b]u32  one CRC32C per 64 KiB block of data, b = ceil(n/64Ki),
//	            over (block bytes, key u64, block index u32)
//	    zero padding to a multiple of 8
//
// 7.idx is a 16-byte header ("CAIRNIDX", the .dat's instance) then one
// 16-byte entry per record in file order: key u64, offset/8 u32, length
// u32 (0xFFFFFFFF for a tombstone).
//
// # Keys and cookies
//
// A needle's key is a random 32-bit cookie (high half, never 0 for a new
// needle) over the volume's sequence number (low half, assigned in order
// from 1), as Haystack's cookie: the sequence number finds the record, and
// a read, a size, a location or a delete must also name the cookie, or it
// is answered exactly as for a needle that does not exist (NotExist, and no
// Range error that would give the size away). The key is what meta stores
// in its extents and what every caller already passes around, so the
// cookie travels with it through replication, copies, repair, scrub and
// compaction with no change to the record layout; it is folded into every
// block checksum with the rest of the key. The in-memory index holds the
// cookie in the slot beside the sequence number (still 16 bytes), so the
// check costs no I/O.
//
// Format version 1 had no cookies: its keys are sequence numbers (cookie
// 0), and reads by those keys, which meta holds, go on working. A version 1
// file is opened as it is and marked version 2 (one superblock write and
// fdatasync) just before its first needle with a cookie, so that a binary
// that knows only version 1 refuses it rather than take cookies for
// sequence numbers. testdata/v1 is a volume written by version 1's code.
//
// # Why this layout
//
// Per-block checksums: a reader of 4 KiB in the middle of a 64 MiB needle
// reads and verifies 64 KiB and 4 bytes, not 64 MiB; yet every byte it
// returns was verified. Blocks are 64 KiB because that is where a CRC32C
// (with hardware support, ~20 GB/s) costs less than the read itself, and
// the checksum array stays at 1/16384 of the data. The key and block index
// are folded into each block's CRC after the data, so a record misplaced by
// a bad index entry, or blocks swapped on disk, never verify; folding them
// in after the data lets the writer checksum data before the append lock,
// when the key is not yet known.
//
// The header has its own CRC so that recovery can trust a length before
// reading the data it describes; the checksum array follows the data so
// that a read reaching a needle's last block gets data and checksums in one
// pread (whole small needles always do). Padding must be zero, so no byte
// of a record goes unchecked (the fuzz test holds the parser to that).
// Alignment to 8 lets the index keep offsets in 8-byte units in a uint32:
// volumes up to 32 GiB (default limit 8 GiB).
//
// # Writes and durability
//
// Append checksums and copies the data outside any lock, then under the
// append lock assigns the key, writes the record with one pwrite (records
// over 1 MiB: header, data, tail as three, to avoid copying the data), and
// queues it. Then group commit: the first waiting writer that finds no
// sync running takes every queued record, calls fdatasync once, appends
// their .idx entries and publishes them in the in-memory index, and wakes
// the others. A write is acknowledged only after an fdatasync that covers
// it. The .idx is written after that sync and never synced by itself, so
// it can lag but never point at data that is not durable. A failed
// fdatasync stops all writes to the volume (the kernel may have dropped
// the dirty pages, so retrying could acknowledge data that is gone).
//
// # Opening and recovery
//
// Open reads the .idx (a torn last entry, entries out of order or past the
// end of the .dat are dropped; an .idx of another instance is ignored) and
// checks the header of the last indexed record. It then reads every record
// after it and verifies it fully (header and every block). The file is cut
// at the first record that does not verify: the torn tail of a crash. A
// record with a good header but bad data followed by a good record is bit
// rot, not a torn tail: it is kept (reads of it say errors.Corrupt) so that
// the records after it are not lost.
//
// # The in-memory index
//
// Keys from Append grow monotonically, so the index is a slice of
// {key u64, offset/8 u32, length u32} sorted by key, appended to, searched
// by bisection; the rare key that arrives out of order (AppendKey) goes to
// a small map. Deleted slots stay in the slice, marked, until compaction.
// Measured (TestIndexBytesPerEntry, 1M entries): 17.7 bytes per needle,
// including the slice's spare capacity; and no pointers for the garbage
// collector to scan. Open of 1M small needles (TestOpenTime, 2-core VM):
// 0.24 s from the .idx, 0.35 s rebuilding it by verifying every record.
//
// # Reads
//
// ReadTo preads only the blocks that cover the range, with their CRCs, into
// a pooled buffer (at most 1 MiB at a time, so huge needles stream), and
// verifies each block before any of its bytes reach the writer. A mismatch
// is errors.Corrupt, counted in Stats.Corrupt. Reads take no lock beyond a
// read-lock held for an index lookup.
//
// # Compaction
//
// Compact copies the live records below the current end into a new file,
// without blocking anyone; then, holding the append lock (writers wait,
// readers do not), copies what was appended meanwhile (with the tombstones
// that kill copied needles), syncs, renames the new .dat then the new .idx
// over the old ones and swaps file and index. Readers that already hold
// the old file finish on it: it is reference counted and closed by the last
// one. Records are verified as they are copied; a corrupt needle stops
// compaction with errors.Corrupt rather than being hidden.
package volume
