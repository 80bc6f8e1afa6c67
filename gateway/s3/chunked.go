package s3

import (
	"bufio"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
)

// aws-chunked bodies (Content-Encoding: aws-chunked):
//
//	hex-size[;chunk-signature=sig]\r\n data \r\n ... 0[;chunk-signature=sig]\r\n
//	[trailer-name:value\r\n ...] \r\n
//
// With a signing key every chunk's signature is checked before any of its
// bytes are handed on, so a forged chunk never reaches storage; an error
// anywhere fails the read, and the caller then stores nothing.

const (
	maxChunk      = 16 << 20 // larger signed chunks are refused (memory bound)
	maxChunkLine  = 4096
	maxTrailerLen = 16 << 10
)

type chunkedReader struct {
	br       *bufio.Reader
	signer   *chunkSigner // nil: unsigned chunks
	buf      []byte       // the current chunk (signed mode), verified
	pos      int
	left     int64 // unsigned mode: bytes left in the current chunk
	trailers http.Header
	done     bool
	err      error
}

func newChunkedReader(r io.Reader, s *chunkSigner) *chunkedReader {
	return &chunkedReader{br: bufio.NewReaderSize(r, maxChunkLine), signer: s, trailers: http.Header{}}
}

func errIncompleteBody(msg string) *apiError {
	return apiErr(http.StatusBadRequest, "IncompleteBody", "malformed aws-chunked body: "+msg)
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	for {
		if c.err != nil {
			return 0, c.err
		}
		if c.pos < len(c.buf) {
			n := copy(p, c.buf[c.pos:])
			c.pos += n
			return n, nil
		}
		if c.left > 0 {
			n, err := c.br.Read(p[:min(int64(len(p)), c.left)])
			c.left -= int64(n)
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			if err != nil {
				c.err = errIncompleteBody("body ends inside a chunk")
				return n, c.err
			}
			if c.left == 0 {
				if err := c.crlf(); err != nil {
					c.err = err
					return n, nil
				}
			}
			return n, nil
		}
		if c.done {
			return 0, io.EOF
		}
		c.err = c.next()
	}
}

func (c *chunkedReader) line() (string, error) {
	l, err := c.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return "", errIncompleteBody("line too long")
	}
	if err != nil {
		return "", errIncompleteBody("body ends early")
	}
	s := string(l)
	if !strings.HasSuffix(s, "\r\n") {
		return "", errIncompleteBody("line not ended by CRLF")
	}
	return s[:len(s)-2], nil
}

func (c *chunkedReader) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil || b != [2]byte{'\r', '\n'} {
		return errIncompleteBody("chunk data not followed by CRLF")
	}
	return nil
}

// next reads the next chunk header (and, signed, the whole chunk).
func (c *chunkedReader) next() error {
	hdr, err := c.line()
	if err != nil {
		return err
	}
	sizeStr, ext, _ := strings.Cut(hdr, ";")
	size, err := strconv.ParseUint(sizeStr, 16, 63)
	if err != nil || len(sizeStr) > 16 {
		return errIncompleteBody("bad chunk size")
	}
	var sig []byte
	if c.signer != nil {
		v, ok := strings.CutPrefix(ext, "chunk-signature=")
		if !ok {
			return errIncompleteBody("chunk without signature")
		}
		if sig, ok = parseSignature(v); !ok {
			return errIncompleteBody("bad chunk signature")
		}
		if size > maxChunk {
			return errIncompleteBody("chunk larger than 16 MiB")
		}
		if cap(c.buf) < int(size) {
			c.buf = make([]byte, size)
		}
		c.buf, c.pos = c.buf[:size], 0
		if _, err := io.ReadFull(c.br, c.buf); err != nil {
			return errIncompleteBody("body ends inside a chunk")
		}
		if !c.signer.verify(c.buf, sig) {
			c.buf = c.buf[:0]
			return errSignature()
		}
		if size > 0 {
			return c.crlf()
		}
	} else {
		c.left = int64(size)
		if size > 0 {
			return nil
		}
	}
	c.done = true
	return c.readTrailers()
}

// trailerSignature is the trailer that signs the others in
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER bodies.
const trailerSignature = "X-Amz-Trailer-Signature"

// readTrailers reads the header lines after the last chunk, up to the
// empty line (or the end of the body, which some clients send instead).
// Trailer lines may end in a bare LF: minio-go ends its trailers with
// "\n", then "\r\n" before the trailer signature, so in signed mode an
// empty line that comes between the trailers and their signature is
// skipped. With signed chunks, trailers must come with their signature.
//
// The trailer signature itself is not recomputed: the SDK's signers have
// no string-to-sign for it (AWS4-HMAC-SHA256-TRAILER) and the data it
// would protect is only the checksum, which is verified against the
// signed chunks' bytes anyway; a forged one can only fail the upload.
func (c *chunkedReader) readTrailers() error {
	total := 0
	for {
		l, err := c.br.ReadSlice('\n')
		switch {
		case err == bufio.ErrBufferFull:
			return errIncompleteBody("trailer line too long")
		case err != nil && len(l) == 0 && total == 0:
			return nil // a body that ends right after the last chunk
		case err != nil:
			return errIncompleteBody("body ends inside the trailers")
		}
		total += len(l)
		if total > maxTrailerLen {
			return errIncompleteBody("trailers too long")
		}
		line := strings.TrimSuffix(strings.TrimSuffix(string(l), "\n"), "\r")
		if line == "" {
			if c.signer != nil && len(c.trailers) > 0 && c.trailers.Get(trailerSignature) == "" {
				continue
			}
			break
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) == "" {
			return errIncompleteBody("bad trailer")
		}
		c.trailers.Add(textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(k)), strings.TrimSpace(v))
	}
	if c.signer != nil && len(c.trailers) > 0 {
		if _, ok := parseSignature(c.trailers.Get(trailerSignature)); !ok {
			return errIncompleteBody("trailers without a valid x-amz-trailer-signature")
		}
	}
	return nil
}

// storedContentEncoding is Content-Encoding without aws-chunked, which
// describes the transfer, not the object.
func storedContentEncoding(h http.Header) string {
	var keep []string
	for _, e := range strings.Split(h.Get("Content-Encoding"), ",") {
		if e = strings.TrimSpace(e); e != "" && e != "aws-chunked" {
			keep = append(keep, e)
		}
	}
	return strings.Join(keep, ",")
}
