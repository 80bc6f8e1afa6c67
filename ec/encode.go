package ec

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"cairn/errors"
)

// encodeMemory bounds the rows of cells Encode holds at once (at least
// two: one read and coded while the other is written).
const encodeMemory = 96 << 20

// encodeRow is one row of K+M cells in flight: read and coded by Encode,
// then written by every shard's writer; the last writer done with it
// hands it back for the next row.
type encodeRow struct {
	buf     *[]byte // the cells' memory, from encodeBufs
	cells   [][]byte
	pending atomic.Int32 // writers yet to write it
}

// encodeBufs keeps rows' memory between encodes, by size (int64 -> *sync.Pool
// of *[]byte): a data server encodes volume after volume, and fresh rows
// cost an allocation, zeroing and page faults each time.
var encodeBufs sync.Map

func newEncodeRow(n int, cell int64) *encodeRow {
	size := int64(n) * cell
	p, _ := encodeBufs.LoadOrStore(size, &sync.Pool{})
	bp, _ := p.(*sync.Pool).Get().(*[]byte)
	if bp == nil {
		b := make([]byte, size)
		bp = &b
	}
	rw := &encodeRow{buf: bp, cells: make([][]byte, n)}
	for i := range rw.cells {
		rw.cells[i] = (*bp)[int64(i)*cell : int64(i+1)*cell]
	}
	return rw
}

func (rw *encodeRow) release() {
	p, _ := encodeBufs.Load(int64(len(*rw.buf)))
	p.(*sync.Pool).Put(rw.buf)
}

// Encode reads the l.Size bytes of a sealed volume file from src and
// writes its K+M shard files to dst (dst[i] is shard i), in one pass. It
// is a pipeline: while the shards' writers (a goroutine each, so that a
// slow destination does not hold the others) write row r's cells, each
// in one Write, the next rows are read from src and coded, as many as
// fit in encodeMemory (two at least; more only while the writers lag).
// The caller syncs and renames the
// files: a shard is complete only once all of it is durable.
func Encode(src io.ReaderAt, vol uint32, l Layout, dst []io.Writer) error {
	const op = errors.Op("ec.Encode")
	if err := l.Validate(); err != nil {
		return err
	}
	if len(dst) != l.K+l.M {
		return errors.Errorf(op, errors.Invalid, "%d writers for a %d+%d code", len(dst), l.K, l.M)
	}
	enc, err := encoder(l.K, l.M, false)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	n := l.K + l.M
	rowBytes := int64(n) * l.Cell
	depth := int(max(1, min(max(2, encodeMemory/rowBytes), l.Rows())))
	free := make(chan *encodeRow, depth)
	var made []*encodeRow // at most depth, made as the writers fall behind
	defer func() {
		for _, rw := range made {
			rw.release() // the writers are done with them: wg.Wait below
		}
	}()
	// A row sent to the writers' queues never waits there: no more than
	// depth rows exist.
	queues := make([]chan *encodeRow, n)
	for i := range queues {
		queues[i] = make(chan *encodeRow, depth)
	}
	// The first failure (a writer's, or reading src) stops the pipeline:
	// no more rows are read, no writer writes again (nor ends its file
	// with a footer), and writers that can be closed with an error
	// (io.PipeWriter) are, so that a Write blocked on a stalled reader
	// returns.
	failed := make(chan struct{})
	var (
		failOnce sync.Once
		firstErr error
		stopped  atomic.Bool
	)
	abort := func(err error) {
		failOnce.Do(func() {
			firstErr = err
			stopped.Store(true)
			close(failed)
			for _, w := range dst {
				if c, ok := w.(interface{ CloseWithError(error) error }); ok {
					c.CloseWithError(err)
				}
			}
		})
	}
	var wg sync.WaitGroup
	// allRows is a barrier: a writer ends its shard with the footer only
	// once every writer has written every row (a fast shard must not be
	// finished while a slow one fails).
	var allRows sync.WaitGroup
	allRows.Add(n)
	for i, w := range dst {
		wg.Go(func() {
			write := func(b []byte) {
				if stopped.Load() {
					return
				}
				if _, err := w.Write(b); err != nil {
					abort(errors.E(op, errors.IO, err))
				}
			}
			write(Header{Volume: vol, Layout: l, Index: i}.marshal())
			foot := make([]byte, 0, l.footerSize())
			// Rows are taken (and handed back) until the queue closes,
			// written only while nothing failed.
			for rw := range queues[i] {
				write(rw.cells[i])
				foot = binary.LittleEndian.AppendUint32(foot, crc32.Checksum(rw.cells[i], castagnoli))
				if rw.pending.Add(-1) == 0 {
					free <- rw
				}
			}
			allRows.Done()
			allRows.Wait()
			write(binary.LittleEndian.AppendUint32(foot, crc32.Checksum(foot, castagnoli)))
		})
	}
rows:
	for r := int64(0); r < l.Rows(); r++ {
		if stopped.Load() {
			break
		}
		var rw *encodeRow
		select {
		case rw = <-free:
		default:
		}
		if rw == nil && len(made) < depth {
			rw = newEncodeRow(n, l.Cell)
			made = append(made, rw)
		}
		if rw == nil {
			select {
			case rw = <-free:
			case <-failed:
				break rows
			}
		}
		for i := 0; i < l.K; i++ {
			if err := readCell(src, rw.cells[i], (r*int64(l.K)+int64(i))*l.Cell, l.Size); err != nil {
				abort(errors.E(op, errors.IO, err))
				break rows
			}
		}
		if err := enc.Encode(rw.cells); err != nil {
			abort(errors.E(op, errors.IO, err))
			break rows
		}
		rw.pending.Store(int32(n))
		for _, q := range queues {
			q <- rw
		}
	}
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	return firstErr
}

// readCell fills cell with the file's bytes from off, zeros past size.
func readCell(src io.ReaderAt, cell []byte, off, size int64) error {
	n := max(0, min(int64(len(cell)), size-off))
	clear(cell[n:])
	if n == 0 {
		return nil
	}
	got, err := src.ReadAt(cell[:n], off)
	if int64(got) == n {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
