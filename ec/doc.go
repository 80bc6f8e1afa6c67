// Package ec erasure-codes sealed volumes: a volume's records, read-only
// for the rest of their life, are cut into K data shards and M parity
// shards (Reed-Solomon, github.com/klauspost/reedsolomon) kept on K+M
// servers. Any K of the K+M shards give the volume back, so a K+M code
// survives M lost disks at (K+M)/K times the data's size instead of RF
// times.
//
// # Layout
//
// What is encoded (the "encoded file") is the .dat's superblock and live
// records packed end to end (Packed; the encoder in package chunk lays
// them out and writes the index of where each needle's data now lies),
// with a record that would cross a cell boundary moved to the next cell
// when little space is lost that way. The encoded file is read as cells
// of Cell bytes (4 MiB by default). Cell c lies
// in row c/K, in data shard c%K, at offset (c/K)*Cell of that shard; the
// last row is padded with zeros. Parity shard j holds, for every row, the
// j-th parity cell of the row's K data cells. Reed-Solomon works byte by
// byte across the K+M cells of a row, so any byte range of a cell can be
// rebuilt from the same range of any K other shards: a 4 KiB read that
// meets a lost shard reads 4 KiB from each of K others, not K cells.
//
// Why cells rather than K contiguous slices of the file: a needle is
// still read from the one shard that holds it (most needles are far
// smaller than a cell), and the data shards of a row fill at the same
// rate, so shards are equal in size and a file of any length encodes in
// one streaming pass with K cells of memory.
//
// # Shard files
//
//	0   [8]  magic "CAIRNEC1"
//	8   u32  volume id
//	12  u8   K
//	13  u8   M
//	14  u8   shard index (0..K-1 data, K..K+M-1 parity)
//	15  u8   zero
//	16  u32  cell size
//	20  u64  size of the encoded file
//	28  u32  CRC32C of bytes 0..28
//	32  cells: rows*Cell bytes
//	    footer: one CRC32C per cell, then a u32 CRC32C of the footer
//
// Reads do not check cell CRCs (that would read a whole cell for a 4 KiB
// read): the needle's own block checksums (package volume) verify what a
// read returns, and a reader that finds a needle corrupt asks for the
// range again rebuilt without the shard it came from. The cell CRCs are
// for scrubbing a shard on its own server, where no needle boundaries are
// known, and for choosing which shard to rebuild.
package ec
