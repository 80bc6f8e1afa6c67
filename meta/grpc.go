package meta

import (
	"context"
	"crypto/tls"
	"io"
	"path"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"cairn/errors"
	"cairn/proto/metapb"
)

// MaxMessageSize bounds a gRPC message either way: a file with many
// extents or a long listing page stays well under it.
const MaxMessageSize = 64 << 20

// kindCodes is the one table from error Kind to gRPC code. The exact Kind
// travels in the status details (metapb.Error); the code is for generic
// gRPC tooling and for callers that see no details.
var kindCodes = map[errors.Kind]codes.Code{
	errors.Other:           codes.Unknown,
	errors.Invalid:         codes.InvalidArgument,
	errors.NotExist:        codes.NotFound,
	errors.Exist:           codes.AlreadyExists,
	errors.NotEmpty:        codes.FailedPrecondition,
	errors.IsDir:           codes.FailedPrecondition,
	errors.NotDir:          codes.FailedPrecondition,
	errors.Permission:      codes.PermissionDenied,
	errors.Unauthenticated: codes.Unauthenticated,
	errors.Precondition:    codes.FailedPrecondition,
	errors.TooLarge:        codes.ResourceExhausted,
	errors.Range:           codes.OutOfRange,
	errors.Corrupt:         codes.DataLoss,
	errors.IO:              codes.Internal,
	errors.Unavailable:     codes.Unavailable,
	errors.ReadOnly:        codes.FailedPrecondition,
	errors.NameTooLong:     codes.InvalidArgument,
	errors.Stale:           codes.FailedPrecondition,
	errors.Canceled:        codes.Canceled,
	errors.NoSpace:         codes.ResourceExhausted,
	errors.DataLoss:        codes.DataLoss,
}

// codeKinds is the inverse, for statuses without details (a proxy, a
// deadline the client set, a server that is down).
var codeKinds = map[codes.Code]errors.Kind{
	codes.InvalidArgument:    errors.Invalid,
	codes.NotFound:           errors.NotExist,
	codes.AlreadyExists:      errors.Exist,
	codes.PermissionDenied:   errors.Permission,
	codes.Unauthenticated:    errors.Unauthenticated,
	codes.FailedPrecondition: errors.Precondition,
	codes.ResourceExhausted:  errors.TooLarge,
	codes.OutOfRange:         errors.Range,
	codes.DataLoss:           errors.Corrupt,
	codes.Internal:           errors.IO,
	codes.Unavailable:        errors.Unavailable,
	codes.DeadlineExceeded:   errors.Unavailable,
	codes.Canceled:           errors.Canceled,
}

// protoError is the wire form of an error.
func protoError(err error) *metapb.Error {
	pe := &metapb.Error{Kind: uint32(errors.KindOf(err)), Path: string(errors.PathOf(err)), Message: err.Error()}
	var e *errors.Error
	if errors.As(err, &e) {
		pe.Op = string(e.Op)
		pe.Message = e.Message()
	}
	return pe
}

// fromProtoError rebuilds the error a server sent.
func fromProtoError(pe *metapb.Error) error {
	return &errors.Error{Op: errors.Op(pe.Op), Kind: errors.Kind(pe.Kind), Path: errors.Path(pe.Path), Err: errors.New(pe.Message)}
}

func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(interface{ GRPCStatus() *status.Status }); ok {
		return err // already a status (from a nested call)
	}
	switch err {
	case context.Canceled:
		err = errors.E(errors.Canceled, err)
	case context.DeadlineExceeded:
		err = errors.E(errors.Unavailable, err)
	}
	kind := errors.KindOf(err)
	code, ok := kindCodes[kind]
	if !ok {
		code = codes.Unknown
	}
	st, derr := status.New(code, err.Error()).WithDetails(protoError(err))
	if derr != nil {
		return status.Error(code, err.Error())
	}
	return st.Err()
}

func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if pe, ok := d.(*metapb.Error); ok {
			return fromProtoError(pe)
		}
	}
	kind, ok := codeKinds[st.Code()]
	if !ok {
		kind = errors.Other
	}
	return &errors.Error{Kind: kind, Err: errors.New(st.Message())}
}

func opName(fullMethod string) string { return path.Base(fullMethod) }

// serve runs one call of the API (method is its bare name, "Commit") the
// way every transport must, gRPC or in-process (Local): timed in the
// per-operation metrics; mounts first commit what they wrote behind, so
// the call sees it; and a call that changed anything is answered only
// once every mount's session dropped what it changed (classify.go).
// Before all that, the caller is established and authorised (caller.go,
// authz.go): this is the one place both transports pass.
func (s *Service) serve(ctx context.Context, method string, req any, h func(context.Context) (any, error)) (any, error) {
	done := s.ops.Start(method)
	err := s.memberGate(ctx, method, req) // raft.go: the group's leader answers, a follower stale reads
	var c Caller
	if err == nil {
		c, err = s.caller(ctx)
	}
	if err == nil {
		err = s.authorize(c, method, req)
	}
	if err == nil && commandMethods[method] {
		err = s.cfg.space.check() // NoSpace while the store's disk is full
	}
	if err != nil {
		done(err)
		return nil, err
	}
	ctx = WithCaller(ctx, c)
	release := s.recallDirty(ctx, method, req) // writebehind.go: what mounts wrote behind, their create claims
	before := s.hub.lastSeq()
	resp, err := h(ctx)
	release()
	// A command that published events changed what mounts may cache
	// (classify.go). A failed one may have applied too (a batch whose
	// answer failed after), so its events are waited for as well.
	if after := s.hub.lastSeq(); after != before && commandMethods[method] {
		s.awaitSessions(ctx, after)
		if s.openFiles().awaited(after) {
			s.reclaim()
		}
	}
	done(err)
	return resp, err
}

// NewGRPCServer returns a gRPC server with svc registered. Its interceptors
// time every call into svc.Ops() and turn *errors.Error into a status that
// carries the Kind, Op and Path. extra options come last: cairn meta and
// cairn server pass ServerTLS.
func NewGRPCServer(svc *Service, extra ...grpc.ServerOption) *grpc.Server {
	ops := svc.Ops()
	unary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		ctx, err := withRequestID(ctx, opName(info.FullMethod)) // dedup.go
		if err != nil {
			return nil, toStatus(err)
		}
		resp, err := svc.serve(ctx, opName(info.FullMethod), req, func(ctx context.Context) (any, error) { return h(ctx, req) })
		return resp, toStatus(err)
	}
	stream := func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		done := ops.Start(opName(info.FullMethod))
		ss, err := svc.serveStream(ss, opName(info.FullMethod))
		if err == nil {
			err = h(srv, ss)
		}
		if errors.Is(errors.Canceled, err) {
			err = nil // a watcher that hangs up is the normal end of a stream
		}
		done(err)
		return toStatus(err)
	}
	opts := []grpc.ServerOption{
		grpc.UnaryInterceptor(unary),
		grpc.StreamInterceptor(stream),
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		// Clients ping every 30s while idle; allow it, and drop peers
		// that stop answering so that dead watchers are freed.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: time.Minute, Timeout: 20 * time.Second}),
		// Serve calls on long-lived goroutines whose stacks have already
		// grown, rather than a new goroutine per call: on a warm Resolve,
		// stack growth alone cost several percent of the CPU. A call that
		// finds every worker busy gets a new goroutine after all, so there
		// are enough for the calls a busy meta has in flight (4 workers
		// let most of 32 concurrent Resolves spill over; 64 gained 3-8%).
		grpc.NumStreamWorkers(uint32(max(64, 32*runtime.GOMAXPROCS(0)))),
		grpc.SharedWriteBuffer(true),
	}
	s := grpc.NewServer(append(opts, extra...)...)
	metapb.RegisterMetaServer(s, svc)
	return s
}

// Dial connects to a meta server (or a group's members, "a,b,c": the
// calls follow the leader, see failover.go), in plain text unless extra holds
// DialTLS (every listener cairn meta and cairn server open speaks TLS;
// plain text is for tests of meta alone). Errors from the returned client are
// *errors.Error with the server's Kind, Op and Path, so callers test them
// with errors.Is(errors.NotExist, err) as in-process. extra options come
// last (the mount adds an interceptor that counts calls per FUSE op).
func Dial(addr string, extra ...grpc.DialOption) (metapb.MetaClient, *grpc.ClientConn, error) {
	return dial(addr, hangCheck, extra...)
}

// dial is Dial with a group client's hang check given (failover.go; 0:
// calls are not watched, a benchmark's baseline).
func dial(addr string, hang time.Duration, extra ...grpc.DialOption) (metapb.MetaClient, *grpc.ClientConn, error) {
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return fromStatus(inv(ctx, method, req, reply, cc, opts...))
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, st grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cs, err := st(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, fromStatus(err)
		}
		return errStream{cs}, nil
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(unary),
		grpc.WithChainStreamInterceptor(stream),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// Reconnect within about a second of meta being reachable again,
		// whatever the outage lasted (gRPC's default backoff grows to two
		// minutes): a data server back from a partition must heartbeat,
		// drop its stale copies and serve again promptly.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
	}
	target := addr
	if strings.Contains(addr, ",") { // a group's members (failover.go)
		t, gopts, err := groupDialOptions(addr, hang)
		if err != nil {
			return nil, nil, err
		}
		target, opts = t, append(opts, gopts...)
	}
	conn, err := grpc.NewClient(target, append(opts, extra...)...)
	if err != nil {
		return nil, nil, errors.E(errors.Op("meta.Dial"), errors.Invalid, errors.Path(addr), err)
	}
	return metapb.NewMetaClient(conn), conn, nil
}

// ServerTLS is the server option of a meta listener speaking TLS with cfg
// (pki.Node.Server): callers' certificates, when given, are verified, and
// the authorisation reads them through credentials.TLSInfo.
func ServerTLS(cfg *tls.Config) grpc.ServerOption {
	return grpc.Creds(credentials.NewTLS(cfg))
}

// DialTLS is the Dial option of a client speaking TLS with cfg
// (pki.ClientConfig, or a pki.Node's Client): it replaces Dial's default,
// plaintext.
func DialTLS(cfg *tls.Config) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// errStream translates the errors of a client stream (Watch).
type errStream struct{ grpc.ClientStream }

func (s errStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == nil || err == io.EOF {
		return err
	}
	return fromStatus(err)
}
