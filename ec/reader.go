package ec

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"runtime/debug"
	"sync"

	"github.com/klauspost/reedsolomon"

	"cairn/errors"
)

// Reader reads an encoded volume file back from its shards: straight from
// the data shard that holds a range while that shard answers, rebuilt
// from any K others when it does not.
type Reader struct {
	l      Layout
	shards []io.ReaderAt // nil: missing
	enc    reedsolomon.Encoder
}

// An Asker is a shard (a peer's) whose read can be sent ahead and its
// answer read later. Ask sends a request for len(p) bytes at shard
// offset off; the function it returns, called once, waits for the answer
// in p. A failed request reports its error there.
type Asker interface {
	Ask(p []byte, off int64) (answer func() error)
}

// rowBufs keeps the K+M buffers of a reconstruction between reads: a
// data server makes a Reader per needle read, and a degraded 155 KiB read
// would otherwise allocate (and zero) K+M times its size.
var rowBufs = sync.Pool{New: func() any { return new([MaxShards][]byte) }}

// NewReader takes the K+M shards in index order; a missing one is nil.
// Fewer than K present is not an error here: reads that need a missing
// shard fail then, and reads that do not still work.
func NewReader(l Layout, shards []io.ReaderAt) (*Reader, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if len(shards) != l.K+l.M {
		return nil, errors.Errorf("ec.NewReader", errors.Invalid, "%d shards for a %d+%d code", len(shards), l.K, l.M)
	}
	enc, err := encoder(l.K, l.M, true)
	if err != nil {
		return nil, errors.E(errors.Op("ec.NewReader"), errors.Invalid, err)
	}
	return &Reader{l: l, shards: shards, enc: enc}, nil
}

// encoders keeps one encoder per code and use: making one inverts
// matrices and allocates, and a data server makes a Reader per needle
// read. Encoders are safe for concurrent use.
var encoders sync.Map // encoderKey -> reedsolomon.Encoder

type encoderKey struct {
	k, m   int
	serial bool
}

// encoder is the code k+m's encoder. A serial one computes in the
// caller's goroutine: a Reader rebuilds a needle's range (a few hundred
// KiB) or a 1 MiB slice of a shard (RebuildShard, several at once), where
// the library's default would split the work over a goroutine per ~16
// KiB (its L1-sized split), whose hand-offs cost more than they save on
// a busy server. Encode, a whole volume a row of cells at a time, keeps
// the split.
func encoder(k, m int, serial bool) (reedsolomon.Encoder, error) {
	key := encoderKey{k, m, serial}
	if e, ok := encoders.Load(key); ok {
		return e.(reedsolomon.Encoder), nil
	}
	var opts []reedsolomon.Option
	if serial {
		opts = append(opts, reedsolomon.WithMaxGoroutines(1))
	}
	e, err := reedsolomon.New(k, m, opts...)
	if err != nil {
		return nil, err
	}
	actual, _ := encoders.LoadOrStore(key, e)
	return actual.(reedsolomon.Encoder), nil
}

// Layout returns the layout the reader was made with.
func (r *Reader) Layout() Layout { return r.l }

// ReadAt reads the encoded file's bytes at off. A piece whose data shard
// is missing or fails is rebuilt from the others.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) { return r.ReadAtAvoiding(p, off, nil) }

// ReadAtAvoiding is ReadAt that does not trust the shards named in avoid:
// a caller whose needle failed its checksum reads the range again without
// the shard it came from.
func (r *Reader) ReadAtAvoiding(p []byte, off int64, avoid []int) (int, error) {
	const op = errors.Op("ec.ReadAt")
	if off < 0 {
		return 0, errors.Errorf(op, errors.Range, "offset %d", off)
	}
	n := int64(len(p))
	var eof error
	if off+n > r.l.Size {
		n = max(0, r.l.Size-off)
		eof = io.EOF
	}
	pcs := r.l.Pieces(off, n)
	if len(pcs) == 1 {
		if err := r.readPiece(p[:n], pcs[0], avoid); err != nil {
			return 0, err
		}
		return int(n), eof
	}
	// A range over several cells (a needle across a cell boundary) reads
	// its pieces at once, a row (K pieces, K shards) at a time: each may
	// be a round trip to another server.
	for len(pcs) > 0 {
		row := pcs[:min(len(pcs), r.l.K)]
		pcs = pcs[len(row):]
		var errs [MaxShards]error
		var wg sync.WaitGroup
		for i, pc := range row[1:] {
			wg.Go(func() { errs[i+1] = r.readPiece(p[pc.At-off:pc.At-off+pc.N], pc, avoid) })
		}
		errs[0] = r.readPiece(p[row[0].At-off:row[0].At-off+row[0].N], row[0], avoid)
		wg.Wait()
		for i, pc := range row {
			if errs[i] != nil {
				return int(pc.At - off), errs[i]
			}
		}
	}
	return int(n), eof
}

// readPiece reads one piece straight from its shard, or rebuilt when the
// shard is missing, avoided or fails.
func (r *Reader) readPiece(dst []byte, pc Piece, avoid []int) error {
	if s := r.shards[pc.Shard]; s != nil && !contains(avoid, pc.Shard) {
		if _, err := s.ReadAt(dst, pc.Off); err == nil {
			return nil
		}
	}
	return r.rebuild(dst, pc.Shard, pc.Off, avoid)
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// rebuild fills dst with shard want's bytes at shard offset off, read
// from the same range of K other shards. Local shards lend their bytes in
// place when they can (Lender); a lent range that faults (its file cut
// short under the mapping: no writer here does that, but a disk tool or
// an operator may) costs the read its loans, not the process: the range
// is rebuilt again from reads, where a short shard is a failed one.
func (r *Reader) rebuild(dst []byte, want int, off int64, avoid []int) error {
	err := r.rebuildFrom(dst, want, off, avoid, true)
	if err == errFault {
		err = r.rebuildFrom(dst, want, off, avoid, false)
	}
	return err
}

// errFault is a fault met reading lent bytes.
var errFault = errors.E(errors.IO, "fault reading a lent shard range")

// faultSafe runs decode, which reads bytes lent from mapped files, with a
// memory fault (SIGBUS: the file was truncated under the mapping) turned
// into errFault instead of a crash. The fault must happen in this
// goroutine: the readers' encoders are serial (encoder).
func faultSafe(decode func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if _, fault := p.(interface{ Addr() uintptr }); !fault {
				panic(p)
			}
			err = errFault
		}
	}()
	return decode()
}

// rebuildFrom is rebuild, lending local shards' bytes if lend.
func (r *Reader) rebuildFrom(dst []byte, want int, off int64, avoid []int, lend bool) error {
	const op = errors.Op("ec.rebuild")
	all := r.l.K + r.l.M
	bufs := rowBufs.Get().(*[MaxShards][]byte)
	defer rowBufs.Put(bufs)
	rows := bufs[:all]
	// Read K shards at once (remote shards cost a round trip each); if
	// some fail, as many more as are missing.
	// Shard files of this process first (a pread each), then peers'.
	var cands []int
	for i := 0; i < all; i++ {
		rows[i] = rows[i][:0]
		if _, local := r.shards[i].(*Shard); local && i != want && !contains(avoid, i) {
			cands = append(cands, i)
		}
	}
	for i := 0; i < all; i++ {
		if _, local := r.shards[i].(*Shard); !local && i != want && r.shards[i] != nil && !contains(avoid, i) {
			cands = append(cands, i)
		}
	}
	have := 0
	var firstErr error
	var answers [MaxShards]func() error
	// pooled keeps the buffers of rows lent in place, to go back in the
	// pool instead: it must never keep a lent (read-only) slice.
	var pooled [MaxShards][]byte
	lent := false
	defer func() {
		for i, b := range pooled[:all] {
			if b != nil {
				rows[i] = b[:0]
			}
		}
	}()
	for next := 0; have < r.l.K && next < len(cands); {
		batch := cands[next:min(next+r.l.K-have, len(cands))]
		next += len(batch)
		// Peers' shards are asked first, all at once, and their answers
		// read in this goroutine after the local reads: they arrive
		// meanwhile, and no goroutine per shard is started and woken.
		// Shards that cannot be asked ahead are read in goroutines.
		errs := make([]error, len(batch))
		var wg sync.WaitGroup
		for bi, i := range batch {
			b := growTo(rows[i], len(dst))
			rows[i] = b
			answers[bi] = nil
			switch s := r.shards[i].(type) {
			case *Shard:
			case Asker:
				answers[bi] = s.Ask(b, off)
			default:
				wg.Go(func() { _, errs[bi] = s.ReadAt(b, off) })
			}
		}
		for bi, i := range batch {
			if s, local := r.shards[i].(*Shard); local {
				// A mapped shard file's range is used in place: the
				// decoder only reads present shards.
				if lend {
					if b, done, ok := s.Lend(off, int64(len(dst))); ok {
						pooled[i], rows[i] = rows[i], b
						defer done()
						lent = true
						continue
					}
				}
				_, errs[bi] = s.ReadAt(rows[i], off)
			}
		}
		for bi := range batch {
			if answers[bi] != nil {
				errs[bi] = answers[bi]()
			}
		}
		wg.Wait()
		for bi, err := range errs {
			if err == nil {
				have++
			} else {
				rows[batch[bi]] = rows[batch[bi]][:0] // missing to the decoder (never a lent row: those do not fail)
				if firstErr == nil {
					firstErr = err
				}
			}
		}
	}
	if have < r.l.K {
		msg := fmt.Sprintf("shard %d: only %d of the %d shards needed to rebuild it answered", want, have, r.l.K)
		if firstErr != nil {
			msg += " (" + firstErr.Error() + ")"
		}
		return errors.E(op, errors.Unavailable, msg)
	}
	// Only the shard wanted is made: a read that fetched a parity shard
	// in place of another data shard need not rebuild that one too. The
	// result is written into dst itself (ReconstructSome fills a missing
	// shard's slice if it has the capacity), saving a copy.
	var required [MaxShards]bool
	required[want] = true
	rows[want] = dst[:0]
	decode := func() error { return r.enc.ReconstructSome(rows, required[:all]) }
	var err error
	if lent {
		err = faultSafe(decode)
	} else {
		err = decode()
	}
	if err == errFault {
		rows[want] = nil
		return err
	}
	if err == nil && len(dst) > 0 && &rows[want][0] != &dst[0] {
		copy(dst, rows[want])
	}
	// rows[want] is dst, the caller's: the pool must not keep it.
	rows[want] = nil
	if err != nil {
		return errors.E(op, errors.Corrupt, err)
	}
	return nil
}

func growTo(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n)
	}
	return b[:n]
}

// RebuildShard writes shard idx whole (header, cells, footer) from the
// other shards: how repair replaces a lost shard. The shard is rebuilt in
// slices of at most rebuildSlice bytes (a cell, or part of one: memory
// does not grow with the cell size), rebuildDepth at a time (each a
// round trip to K servers), written in order, so that the transfers of
// one slice overlap those of the next.
func (r *Reader) RebuildShard(vol uint32, idx int, w io.Writer) error {
	const op = errors.Op("ec.RebuildShard")
	l := r.l
	if idx < 0 || idx >= l.K+l.M {
		return errors.Errorf(op, errors.Invalid, "shard %d of a %d+%d code", idx, l.K, l.M)
	}
	if _, err := w.Write(Header{Volume: vol, Layout: l, Index: idx}.marshal()); err != nil {
		return errors.E(op, errors.IO, err)
	}
	type job struct {
		b    []byte // the slice's bytes; it ends its cell if end
		end  bool
		err  error
		done chan struct{}
	}
	step := min(l.Cell, rebuildSlice)
	free := make(chan []byte, rebuildDepth)
	for range rebuildDepth {
		free <- make([]byte, step)
	}
	queue := make(chan *job, rebuildDepth)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(queue)
		for off, n := int64(0), int64(0); off < l.ShardSize(); off += n {
			n = min(step, l.Cell-off%l.Cell)
			at := off
			var j *job
			select {
			case b := <-free:
				j = &job{b: b[:n], end: (at+n)%l.Cell == 0, done: make(chan struct{})}
			case <-stop:
				return
			}
			go func() {
				j.err = r.rebuild(j.b, idx, at, nil)
				close(j.done)
			}()
			select {
			case queue <- j:
			case <-stop:
				return
			}
		}
	}()
	var foot []byte
	var crc uint32 // of the cell so far
	for j := range queue {
		<-j.done
		if j.err != nil {
			return j.err
		}
		if _, err := w.Write(j.b); err != nil {
			return errors.E(op, errors.IO, err)
		}
		crc = crc32.Update(crc, castagnoli, j.b)
		if j.end {
			foot = binary.LittleEndian.AppendUint32(foot, crc)
			crc = 0
		}
		free <- j.b[:cap(j.b)]
	}
	foot = binary.LittleEndian.AppendUint32(foot, crc32.Checksum(foot, castagnoli))
	if _, err := w.Write(foot); err != nil {
		return errors.E(op, errors.IO, err)
	}
	return nil
}

// rebuildDepth is how many slices RebuildShard rebuilds at once, and
// rebuildSlice the most bytes of a shard in one.
const (
	rebuildDepth = 4
	rebuildSlice = 1 << 20
)
