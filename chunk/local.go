package chunk

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"

	"cairn/errors"
	"cairn/volume"
)

// Local reads: a client on the data server's own host (a mount, a gateway)
// reads needles straight from the volume files instead of over HTTP. The
// data server listens on an abstract Unix socket, which lives in the
// network namespace like its TCP port, so "same host" means what the
// network says (containers and test hosts in namespaces stay remote). Over
// it the client asks where a needle lies (locate) and, once per volume
// file, for the file itself (open: the descriptor comes as SCM_RIGHTS); it
// then preads and verifies the blocks itself (volume.ReadLocated). A read
// of 1 MiB costs one small round trip and one copy out of the page cache,
// where HTTP costs a request, four copies and TCP over loopback.
// Needles of erasure-coded volumes are read the same way from the shard
// file that holds them whole (ec_local.go).
//
// A read asks the server where the needle lies, so the server's word on
// what exists and whether it may serve (its lease) holds as for HTTP;
// only the bytes take the short way. The one exception is a needle
// located less than localTrust ago in a file the server named current
// then: it is read again without asking. The client keeps a file until it has been idle
// for localIdle, so a compacted volume's old file does not hold disk space
// for long.
//
// Frames are fixed-size and little-endian. A request is 16 bytes:
//
//	0  u8   op: 1 locate, 2 open
//	1  [3]  zero
//	4  u32  volume id
//	8  u64  needle key (locate; zero for open)
//
// An answer is 32 bytes, then msglen bytes of error message:
//
//	0  u8   0 ok, 1 error
//	1  u8   errors.Kind of the error
//	2  u16  msglen (at most localMaxMsg)
//	4  [4]  zero
//	8  u64  file instance
//	16 i64  offset of the needle's data (locate)
//	24 i64  needle size (locate)
//
// An open answer that succeeds carries the file's descriptor.

const (
	localLocate byte = 1
	localOpen   byte = 2

	localReqSize  = 16
	localRespSize = 32
	localMaxMsg   = 1024

	// localIdle is how long a client keeps a volume file, or a connection,
	// it has not used.
	localIdle = 30 * time.Second
	// localTrust is how long after the server last named a file its
	// volume's current one a client reads needles it already located in
	// that file without asking again. Needles never change, so the worst
	// a stale location can do is read a needle's bytes from the file a
	// compaction replaced, for at most this long.
	localTrust = 2 * time.Second
	// localMaxLocs bounds the locations a client keeps per data server,
	// all its volume files together (some 3 MiB of maps): per file, a
	// client that reads from many volumes would keep as many times that.
	localMaxLocs = 1 << 16
	// localRetry is how long a client waits before asking a data server
	// again for local reads after they were refused or failed.
	localRetry = 10 * time.Second
)

type localRequest struct {
	op  byte
	vid uint32
	key uint64
}

func (r localRequest) encode() []byte {
	b := make([]byte, localReqSize)
	b[0] = r.op
	binary.LittleEndian.PutUint32(b[4:], r.vid)
	binary.LittleEndian.PutUint64(b[8:], r.key)
	return b
}

func parseLocalRequest(b []byte) (localRequest, error) {
	if len(b) != localReqSize {
		return localRequest{}, errors.E(errors.Invalid, fmt.Sprintf("request of %d bytes, want %d", len(b), localReqSize))
	}
	r := localRequest{op: b[0], vid: binary.LittleEndian.Uint32(b[4:]), key: binary.LittleEndian.Uint64(b[8:])}
	if b[1]|b[2]|b[3] != 0 {
		return localRequest{}, errors.E(errors.Invalid, "request padding is not zero")
	}
	switch {
	case r.op == localLocate && r.key == 0:
		return localRequest{}, errors.E(errors.Invalid, "locate of key 0")
	case r.op == localOpen && r.key != 0:
		return localRequest{}, errors.E(errors.Invalid, "open names a key")
	case r.op != localLocate && r.op != localOpen:
		return localRequest{}, errors.E(errors.Invalid, fmt.Sprintf("unknown op %d", r.op))
	}
	return r, nil
}

type localAnswer struct {
	err *errors.Error // nil: ok
	loc volume.Location
}

func (a localAnswer) encode() []byte {
	var msg string
	b := make([]byte, localRespSize, localRespSize+localMaxMsg)
	if a.err != nil {
		msg = a.err.Error()
		if len(msg) > localMaxMsg {
			msg = msg[:localMaxMsg]
		}
		b[0], b[1] = 1, byte(a.err.Kind)
		binary.LittleEndian.PutUint16(b[2:], uint16(len(msg)))
	}
	binary.LittleEndian.PutUint64(b[8:], a.loc.Instance)
	binary.LittleEndian.PutUint64(b[16:], uint64(a.loc.Data))
	binary.LittleEndian.PutUint64(b[24:], uint64(a.loc.Size))
	return append(b, msg...)
}

// parseLocalAnswer decodes an answer's fixed part: the location, or
// (failed) the error's kind and the length of the message that follows.
func parseLocalAnswer(b []byte) (loc volume.Location, failed bool, kind errors.Kind, msglen int, err error) {
	if len(b) != localRespSize {
		return loc, false, 0, 0, errors.E(errors.Invalid, fmt.Sprintf("answer of %d bytes, want %d", len(b), localRespSize))
	}
	if b[0] > 1 || b[4]|b[5]|b[6]|b[7] != 0 || (b[0] == 0 && b[1]|b[2]|b[3] != 0) {
		return loc, false, 0, 0, errors.E(errors.Invalid, "malformed answer")
	}
	msglen = int(binary.LittleEndian.Uint16(b[2:]))
	if msglen > localMaxMsg {
		return loc, false, 0, 0, errors.E(errors.Invalid, fmt.Sprintf("message of %d bytes", msglen))
	}
	loc = volume.Location{
		Instance: binary.LittleEndian.Uint64(b[8:]),
		Data:     int64(binary.LittleEndian.Uint64(b[16:])),
		Size:     int64(binary.LittleEndian.Uint64(b[24:])),
	}
	return loc, b[0] == 1, errors.Kind(b[1]), msglen, nil
}

// ---- server ----------------------------------------------------------------

// localSocket is the abstract socket name of the data server with id.
func localSocket(id string) string { return "@cairn-chunk-" + id }

// serveLocal answers local readers until ctx ends. A socket it cannot
// bind (another server with this id on the host, a system without
// abstract sockets) leaves local reads off; HTTP serves as before.
func (s *Store) serveLocal(ctx context.Context) {
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: localSocket(s.id), Net: "unix"})
	if err != nil {
		s.log.Warn("local reads off: cannot listen", "socket", localSocket(s.id), "err", err)
		return
	}
	s.localOn.Store(true)
	go func() { <-ctx.Done(); s.localOn.Store(false); l.Close() }()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("local reads stop", "err", err)
				s.localOn.Store(false)
			}
			return
		}
		go s.serveLocalConn(ctx, c)
	}
}

func (s *Store) serveLocalConn(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	// The volumes are readable only by the server's user: so is this.
	if uid, err := trustedPeer(c); err != nil {
		s.log.Warn("local reads refused to a process of another user", "uid", uid, "err", err)
		return
	}
	req := make([]byte, localReqSize)
	for {
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		r, err := parseLocalRequest(req)
		if err != nil {
			c.Write(localAnswer{err: errors.E(errors.Op("chunk.local"), err).(*errors.Error)}.encode())
			return // the stream may be out of step: start over
		}
		var a localAnswer
		var rights []byte
		release := func() {}
		switch r.op {
		case localLocate:
			a.loc, err = s.locate(r.vid, r.key)
		case localOpen:
			var f *os.File
			if f, a.loc.Instance, release, err = s.share(r.vid); err == nil {
				rights = syscall.UnixRights(int(f.Fd()))
			}
		}
		if err != nil {
			a.err, release = asError(err), func() {}
		}
		_, _, err = c.WriteMsgUnix(a.encode(), rights, nil)
		release() // the receiver has its own copy of the descriptor now
		if err != nil {
			return
		}
	}
}

func asError(err error) *errors.Error {
	if e, ok := err.(*errors.Error); ok {
		return e
	}
	return errors.E(errors.IO, err).(*errors.Error)
}

// locate is where needle key of volume vid lies, for a local reader.
func (s *Store) locate(vid uint32, key uint64) (loc volume.Location, err error) {
	const op errors.Op = "chunk.Locate"
	done := s.ops.Start("locate")
	defer func() { done(err) }()
	if err := s.serving(op); err != nil {
		return loc, err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		if ev := s.ecVolume(vid); ev != nil {
			return s.ecLocateLocal(ev, key) // ec_local.go
		}
		return loc, err
	}
	return v.Locate(key)
}

// share hands out the current file of volume vid, for a local reader.
func (s *Store) share(vid uint32) (*os.File, uint64, func(), error) {
	const op errors.Op = "chunk.Share"
	if err := s.serving(op); err != nil {
		return nil, 0, nil, err
	}
	v, err := s.volume(op, vid)
	if err != nil {
		if ev := s.ecVolume(vid); ev != nil {
			return s.ecShare(ev)
		}
		return nil, 0, nil, err
	}
	return v.Share()
}

// localInfo is the answer of GET /local.
type localInfo struct {
	Socket string `json:"socket"`
}

func (s *Store) handleLocal(w http.ResponseWriter, r *http.Request) {
	if !s.localOn.Load() {
		writeError(w, r, errors.E(errors.Op("chunk.http.Local"), errors.NotExist, "local reads are off on this data server"))
		return
	}
	writeJSON(w, localInfo{Socket: localSocket(s.id)})
}

// ---- client ----------------------------------------------------------------

// localReader reads needles of one data server through its local socket.
type localReader struct {
	socket string

	mu    sync.Mutex
	idle  []*localConn
	files map[uint32]*sharedFile
	nlocs int         // locations kept in files' locs, at most localMaxLocs
	timer *time.Timer // the janitor, while there is anything to close
}

type localConn struct {
	c    *net.UnixConn
	used time.Time
}

// sharedFile is a volume file received from the server, with the readers
// using it: it is closed once it is replaced or idle and nobody reads.
type sharedFile struct {
	f        *os.File
	vid      uint32
	instance uint64
	shard    bool // a shard file of an erasure-coded volume (ec_local.go)
	refs     int
	gone     bool // replaced or dropped: close at the last release
	used     time.Time

	// locs are needles located in this file, read again without asking
	// while the server named this file its current one less than
	// localTrust ago (confirmed).
	locs      map[uint64]volume.Location
	confirmed time.Time
}

// errLocalDown marks a failure of the local path itself (the socket, a
// descriptor), after which the caller reads over HTTP instead.
type errLocalDown struct{ err error }

func (e errLocalDown) Error() string { return "local read path failed: " + e.err.Error() }
func (e errLocalDown) Unwrap() error { return e.err }

// dialLocal connects to a data server's local socket and checks that the
// process answering runs as root or as this process's user.
func dialLocal(ctx context.Context, socket string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	uc := c.(*net.UnixConn)
	if _, err := trustedPeer(uc); err != nil {
		uc.Close()
		return nil, fmt.Errorf("local socket %s: %w", socket, err)
	}
	return uc, nil
}

// trustedPeer returns the uid of the process at the other end of c, and
// an error unless it is root or this process's user: the only ones that
// may read the volume files, on either end.
func trustedPeer(c *net.UnixConn) (uint32, error) {
	uid, err := peerUID(c)
	if err != nil {
		return uid, err
	}
	if uid != 0 && uid != uint32(os.Getuid()) {
		return uid, fmt.Errorf("peer runs as uid %d", uid)
	}
	return uid, nil
}

// readTo is Remote.ReadTo through the local socket. An errLocalDown says
// nothing was written and HTTP should be tried.
func (l *localReader) readTo(ctx context.Context, vid uint32, key uint64, off, length int64, w io.Writer) (n int64, err error) {
	err = l.located(ctx, vid, key, func(sf *sharedFile, loc volume.Location) (err error) {
		if sf.shard {
			n, err = readShardRecord(sf.f, key, loc, off, length, w)
		} else {
			n, err = volume.ReadLocated(sf.f, key, loc, off, length, w)
		}
		return err
	})
	return n, err
}

// readAt reads bytes [off, off+len(p)) of a needle into p through the
// local socket; errors as readTo.
func (l *localReader) readAt(ctx context.Context, vid uint32, key uint64, p []byte, off int64) (n int, err error) {
	err = l.located(ctx, vid, key, func(sf *sharedFile, loc volume.Location) (err error) {
		if sf.shard {
			var m int64
			m, err = readShardRecord(sf.f, key, loc, off, int64(len(p)), &sliceWriter{p: p})
			n = int(m)
		} else {
			n, err = volume.ReadLocatedAt(sf.f, key, loc, p, off)
		}
		return err
	})
	return n, err
}

// located asks the server where needle key lies and calls read with the
// volume file holding it.
func (l *localReader) located(ctx context.Context, vid uint32, key uint64, read func(*sharedFile, volume.Location) error) error {
	const op errors.Op = "chunk.Remote.ReadTo"
	for range 3 {
		sf, loc, ok := l.known(vid, key)
		if !ok {
			a, err := l.call(ctx, localRequest{op: localLocate, vid: vid, key: key})
			if err != nil {
				return err
			}
			if sf, err = l.file(ctx, vid, a.loc.Instance); err != nil {
				return err
			}
			if sf == nil {
				continue // the volume was compacted meanwhile: locate again
			}
			loc = a.loc
			l.remember(sf, key, loc)
		}
		err := read(sf, loc)
		l.release(sf)
		if err != nil {
			return errors.E(op, errors.Path(fmt.Sprintf("%d/%d", vid, key)), err)
		}
		return nil
	}
	return errLocalDown{fmt.Errorf("volume %d changed file three times during one read", vid)}
}

// known returns the file and location of a needle located recently, with
// a reference held on the file.
func (l *localReader) known(vid uint32, key uint64) (*sharedFile, volume.Location, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sf := l.files[vid]
	if sf == nil || time.Since(sf.confirmed) >= localTrust {
		return nil, volume.Location{}, false
	}
	loc, ok := sf.locs[key]
	if !ok {
		return nil, volume.Location{}, false
	}
	sf.refs++
	sf.used = time.Now()
	return sf, loc, true
}

// remember notes that the server just located needle key in sf, its
// volume's current file.
func (l *localReader) remember(sf *sharedFile, key uint64, loc volume.Location) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if sf.gone {
		return // replaced: known no longer finds it
	}
	if _, ok := sf.locs[key]; !ok {
		if l.nlocs >= localMaxLocs {
			l.forgetLocsLocked()
		}
		if sf.locs == nil {
			sf.locs = map[uint64]volume.Location{}
		}
		l.nlocs++
	}
	sf.locs[key] = loc
	sf.confirmed = time.Now()
}

// forgetLocsLocked drops every location kept. The maps are replaced, not
// cleared: a cleared map keeps the room it grew to.
func (l *localReader) forgetLocsLocked() {
	for _, sf := range l.files {
		sf.locs = nil
	}
	l.nlocs = 0
}

// file returns volume vid's file of the given instance, asking the server
// for it if this reader does not hold it; nil if the server's current
// file is another instance.
func (l *localReader) file(ctx context.Context, vid uint32, instance uint64) (*sharedFile, error) {
	l.mu.Lock()
	if sf := l.files[vid]; sf != nil && sf.instance == instance {
		sf.refs++
		sf.used = time.Now()
		l.mu.Unlock()
		return sf, nil
	}
	l.mu.Unlock()
	a, f, err := l.open(ctx, vid)
	if err != nil {
		return nil, err
	}
	shard, err := checkShared(f, vid, a.loc.Instance)
	if err != nil {
		f.Close()
		return nil, errLocalDown{err}
	}
	sf := &sharedFile{f: f, vid: vid, instance: a.loc.Instance, shard: shard, used: time.Now()}
	l.mu.Lock()
	if old := l.files[vid]; old != nil {
		l.dropLocked(old)
	}
	l.files[vid] = sf
	l.armLocked()
	if sf.instance != instance {
		l.mu.Unlock()
		return nil, nil
	}
	sf.refs++
	l.mu.Unlock()
	return sf, nil
}

func (l *localReader) release(sf *sharedFile) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sf.refs--
	if sf.refs == 0 && sf.gone {
		sf.f.Close()
	}
}

// dropLocked forgets sf; its file is closed now or by its last reader.
func (l *localReader) dropLocked(sf *sharedFile) {
	if l.files[sf.vid] == sf {
		delete(l.files, sf.vid)
	}
	sf.gone = true
	l.nlocs -= len(sf.locs)
	sf.locs = nil
	if sf.refs == 0 {
		sf.f.Close()
	}
}

// armLocked starts the janitor if it is not running.
func (l *localReader) armLocked() {
	if l.timer == nil {
		l.timer = time.AfterFunc(localIdle/2, l.sweep)
	}
}

// sweep closes files and connections idle for localIdle.
func (l *localReader) sweep() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timer = nil
	cut := time.Now().Add(-localIdle)
	for _, sf := range l.files {
		if sf.refs == 0 && sf.used.Before(cut) {
			l.dropLocked(sf)
		}
	}
	keep := l.idle[:0]
	for _, c := range l.idle {
		if c.used.Before(cut) {
			c.c.Close()
		} else {
			keep = append(keep, c)
		}
	}
	clear(l.idle[len(keep):])
	l.idle = keep
	if len(l.files) > 0 || len(l.idle) > 0 {
		l.armLocked()
	}
}

// close drops every file and connection (the server stopped answering).
func (l *localReader) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, sf := range l.files {
		l.dropLocked(sf)
	}
	for _, c := range l.idle {
		c.c.Close()
	}
	l.idle = nil
}

func (l *localReader) conn(ctx context.Context) (*localConn, error) {
	l.mu.Lock()
	if n := len(l.idle); n > 0 {
		c := l.idle[n-1]
		l.idle[n-1] = nil
		l.idle = l.idle[:n-1]
		l.mu.Unlock()
		return c, nil
	}
	l.mu.Unlock()
	c, err := dialLocal(ctx, l.socket)
	if err != nil {
		return nil, errLocalDown{err}
	}
	return &localConn{c: c}, nil
}

func (l *localReader) put(c *localConn) {
	c.used = time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.idle) >= 16 {
		c.c.Close()
		return
	}
	l.idle = append(l.idle, c)
	l.armLocked()
}

// roundTrip sends one request on a pooled connection and reads its
// answer (and, with rights, the descriptor it carries).
func (l *localReader) roundTrip(ctx context.Context, r localRequest, rights bool) (localAnswer, *os.File, error) {
	c, err := l.conn(ctx)
	if err != nil {
		return localAnswer{}, nil, err
	}
	a, f, err := exchange(ctx, c.c, r, rights)
	if err != nil && !answered(err) {
		c.c.Close() // out of step
		if ctx.Err() != nil {
			return a, nil, errors.E(errors.Op("chunk.Remote.ReadTo"), errors.Canceled, ctx.Err())
		}
		return a, nil, err
	}
	l.put(c)
	return a, f, err
}

// answered says err is the server's answer, not a failure of the exchange.
func answered(err error) bool {
	_, down := err.(errLocalDown)
	return !down
}

func (l *localReader) call(ctx context.Context, r localRequest) (localAnswer, error) {
	a, _, err := l.roundTrip(ctx, r, false)
	return a, err
}

func (l *localReader) open(ctx context.Context, vid uint32) (localAnswer, *os.File, error) {
	return l.roundTrip(ctx, localRequest{op: localOpen, vid: vid}, true)
}

// exchange is one request and answer on c. Failures of the connection or
// a malformed answer are errLocalDown; an error the server answered is
// returned as an *errors.Error.
func exchange(ctx context.Context, c *net.UnixConn, r localRequest, rights bool) (localAnswer, *os.File, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(10 * time.Second) // a server that stopped answering
	}
	c.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	if _, err := c.Write(r.encode()); err != nil {
		return localAnswer{}, nil, errLocalDown{err}
	}
	buf := make([]byte, localRespSize+localMaxMsg)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf[:localRespSize], oob)
	if err != nil {
		return localAnswer{}, nil, errLocalDown{err}
	}
	var f *os.File
	if oobn > 0 {
		fds, err := parseRights(oob[:oobn])
		if err != nil {
			return localAnswer{}, nil, errLocalDown{err}
		}
		if len(fds) > 0 {
			f = os.NewFile(uintptr(fds[0]), "volume file")
		}
		for _, fd := range fds[min(1, len(fds)):] {
			syscall.Close(fd)
		}
	}
	fail := func(err error) (localAnswer, *os.File, error) {
		if f != nil {
			f.Close()
		}
		return localAnswer{}, nil, errLocalDown{err}
	}
	if n < localRespSize {
		if _, err := io.ReadFull(c, buf[n:localRespSize]); err != nil {
			return fail(err)
		}
	}
	loc, failed, kind, msglen, err := parseLocalAnswer(buf[:localRespSize])
	if err != nil {
		return fail(err)
	}
	if failed {
		msg := buf[localRespSize : localRespSize+msglen]
		if _, err := io.ReadFull(c, msg); err != nil {
			return fail(err)
		}
		if f != nil {
			f.Close()
		}
		path := errors.Path(fmt.Sprint(r.vid))
		if r.op == localLocate {
			path = errors.Path(fmt.Sprintf("%d/%d", r.vid, r.key))
		}
		return localAnswer{}, nil, errors.E(kind, path, string(msg))
	}
	if rights != (f != nil) {
		return fail(fmt.Errorf("answer to op %d carries %d bytes of control data", r.op, oobn))
	}
	return localAnswer{loc: loc}, f, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, m := range msgs {
		r, err := syscall.ParseUnixRights(&m)
		if err != nil {
			return nil, err
		}
		fds = append(fds, r...)
	}
	return fds, nil
}
