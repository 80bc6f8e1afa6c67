package ec

import (
	"encoding/binary"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"cairn/errors"
)

// Encode reads the l.Size bytes of a sealed volume file from src and
// writes its K+M shard files to dst (dst[i] is shard i), in one pass. The
// caller syncs and renames the files: a shard is complete only once all
// of it is durable.
//
// The writers are usually uploads to K+M servers. Each has a goroutine of
// its own, so that the K+M streams move at once rather than one after
// the other, and rows are encoded ahead of the slowest writer (up to
// encodeDepth rows, each K+M cells of memory), so that reading and coding
// overlap the sending.
func Encode(src io.ReaderAt, vol uint32, l Layout, dst []io.Writer) error {
	const op = errors.Op("ec.Encode")
	if err := l.Validate(); err != nil {
		return err
	}
	if len(dst) != l.K+l.M {
		return errors.Errorf(op, errors.Invalid, "%d writers for a %d+%d code", len(dst), l.K, l.M)
	}
	enc, err := encoder(l.K, l.M)
	if err != nil {
		return errors.E(op, errors.Invalid, err)
	}
	n := l.K + l.M
	type row struct {
		cells   [][]byte
		pending sync.WaitGroup // writers yet to take their cell
	}
	free := make(chan *row, encodeDepth)
	for range encodeDepth {
		rw := &row{cells: make([][]byte, n)}
		buf := make([]byte, int64(n)*l.Cell)
		for i := range rw.cells {
			rw.cells[i] = buf[int64(i)*l.Cell : int64(i+1)*l.Cell]
		}
		free <- rw
	}
	// Each writer takes rows in order from its queue; a failed one keeps
	// draining (so that the others and the encoder never wait on it) and
	// reports its first error.
	queues := make([]chan *row, n)
	errs := make([]error, n)
	var writers sync.WaitGroup
	var failed atomic.Bool
	for i, w := range dst {
		queues[i] = make(chan *row, encodeDepth)
		writers.Go(func() {
			if _, err := w.Write(Header{Volume: vol, Layout: l, Index: i}.marshal()); err != nil {
				errs[i] = err
				failed.Store(true)
			}
			for rw := range queues[i] {
				if errs[i] == nil {
					if _, err := w.Write(rw.cells[i]); err != nil {
						errs[i] = err
						failed.Store(true)
					}
				}
				rw.pending.Done()
			}
		})
	}
	foot := make([][]byte, n)
	var encErr error
	for r := int64(0); r < l.Rows() && encErr == nil && !failed.Load(); r++ {
		rw := <-free
		rw.pending.Wait() // its last row is written everywhere
		for i := 0; i < l.K && encErr == nil; i++ {
			encErr = readCell(src, rw.cells[i], (r*int64(l.K)+int64(i))*l.Cell, l.Size)
		}
		if encErr == nil {
			encErr = enc.Encode(rw.cells)
		}
		if encErr != nil {
			free <- rw
			break
		}
		for i := range rw.cells {
			foot[i] = binary.LittleEndian.AppendUint32(foot[i], crc32.Checksum(rw.cells[i], castagnoli))
		}
		rw.pending.Add(n)
		for _, q := range queues {
			q <- rw
		}
		go func() { rw.pending.Wait(); free <- rw }()
	}
	for _, q := range queues {
		close(q)
	}
	writers.Wait()
	if encErr != nil {
		return errors.E(op, errors.IO, encErr)
	}
	for _, err := range errs {
		if err != nil {
			return errors.E(op, errors.IO, err)
		}
	}
	for i, w := range dst {
		f := binary.LittleEndian.AppendUint32(foot[i], crc32.Checksum(foot[i], castagnoli))
		if _, err := w.Write(f); err != nil {
			return errors.E(op, errors.IO, err)
		}
	}
	return nil
}

// encodeDepth is how many rows Encode keeps in flight.
const encodeDepth = 3

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
