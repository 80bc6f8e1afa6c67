package meta

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/proto/metapb"
)

// Local returns a client of svc for a caller in the same process (the
// gateway of `cairn server`). The request/answer calls go straight to svc:
// no marshalling, no HTTP/2 framing, no loopback syscalls, which measured
// as a large share of the CPU of every small PUT and cold GET. Calls Local
// does not carry itself (any RPC added later, the rare administrative
// ones) go to remote, a client of the same service over gRPC.
//
// Requests and answers are cloned at the boundary, so neither side can
// see the other change a message it still holds, as over the wire.
//
// who is the identity every call carries (`cairn server` gives its gateway
// a gateway identity); a call made with OnBehalfOf is checked as that user.
func Local(svc *Service, who Caller, remote metapb.MetaClient) metapb.MetaClient {
	return &local{MetaClient: remote, s: svc, who: who}
}

type local struct {
	metapb.MetaClient
	s   *Service
	who Caller
}

// call runs one method of the service as the gRPC server would (see
// Service.serve), on a copy of the request, and answers with a copy.
func call[Req, Resp proto.Message](ctx context.Context, l *local, name string, h func(context.Context, Req) (Resp, error), req Req) (Resp, error) {
	req = proto.Clone(req).(Req)
	resp, err := l.s.serve(WithCaller(ctx, l.who), name, req, func(ctx context.Context) (any, error) { return h(ctx, req) })
	if err != nil {
		var zero Resp
		return zero, err
	}
	return proto.Clone(resp.(Resp)).(Resp), nil
}

func (l *local) GetNamespace(ctx context.Context, in *metapb.NamespaceRequest, _ ...grpc.CallOption) (*metapb.Namespace, error) {
	return call(ctx, l, "GetNamespace", l.s.GetNamespace, in)
}

func (l *local) CommitBatch(ctx context.Context, in *metapb.CommitBatchRequest, _ ...grpc.CallOption) (*metapb.CommitBatchResponse, error) {
	return call(ctx, l, "CommitBatch", l.s.CommitBatch, in)
}

func (l *local) Sync(ctx context.Context, in *metapb.Empty, _ ...grpc.CallOption) (*metapb.Empty, error) {
	return call(ctx, l, "Sync", l.s.Sync, in)
}

func (l *local) Resolve(ctx context.Context, in *metapb.ResolveRequest, _ ...grpc.CallOption) (*metapb.ResolveResponse, error) {
	return call(ctx, l, "Resolve", l.s.Resolve, in)
}

func (l *local) BatchResolve(ctx context.Context, in *metapb.BatchResolveRequest, _ ...grpc.CallOption) (*metapb.BatchResolveResponse, error) {
	return call(ctx, l, "BatchResolve", l.s.BatchResolve, in)
}

func (l *local) List(ctx context.Context, in *metapb.ListRequest, _ ...grpc.CallOption) (*metapb.ListResponse, error) {
	return call(ctx, l, "List", l.s.List, in)
}

// S3ListVersions is local for ListObjectVersions, whose pages of up to
// 1,000 versions each cost as much to marshal over gRPC as to list.
func (l *local) S3ListVersions(ctx context.Context, in *metapb.S3ListVersionsRequest, _ ...grpc.CallOption) (*metapb.S3VersionList, error) {
	return call(ctx, l, "S3ListVersions", l.s.S3ListVersions, in)
}

func (l *local) Mkdir(ctx context.Context, in *metapb.MkdirRequest, _ ...grpc.CallOption) (*metapb.Inode, error) {
	return call(ctx, l, "Mkdir", l.s.Mkdir, in)
}

func (l *local) Commit(ctx context.Context, in *metapb.CommitRequest, _ ...grpc.CallOption) (*metapb.Inode, error) {
	return call(ctx, l, "Commit", l.s.Commit, in)
}

func (l *local) Append(ctx context.Context, in *metapb.AppendRequest, _ ...grpc.CallOption) (*metapb.Inode, error) {
	return call(ctx, l, "Append", l.s.Append, in)
}

func (l *local) Delete(ctx context.Context, in *metapb.DeleteRequest, _ ...grpc.CallOption) (*metapb.DeleteResponse, error) {
	return call(ctx, l, "Delete", l.s.Delete, in)
}

func (l *local) Rename(ctx context.Context, in *metapb.RenameRequest, _ ...grpc.CallOption) (*metapb.Inode, error) {
	return call(ctx, l, "Rename", l.s.Rename, in)
}

func (l *local) SetAttr(ctx context.Context, in *metapb.SetAttrRequest, _ ...grpc.CallOption) (*metapb.Inode, error) {
	return call(ctx, l, "SetAttr", l.s.SetAttr, in)
}

func (l *local) MountAccess(ctx context.Context, in *metapb.MountAccessRequest, _ ...grpc.CallOption) (*metapb.Empty, error) {
	return call(ctx, l, "MountAccess", l.s.MountAccess, in)
}

func (l *local) Assign(ctx context.Context, in *metapb.AssignRequest, _ ...grpc.CallOption) (*metapb.AssignResponse, error) {
	return call(ctx, l, "Assign", l.s.Assign, in)
}

func (l *local) Volumes(ctx context.Context, in *metapb.VolumesRequest, _ ...grpc.CallOption) (*metapb.VolumesResponse, error) {
	return call(ctx, l, "Volumes", l.s.Volumes, in)
}

func (l *local) Authenticate(ctx context.Context, in *metapb.AuthRequest, _ ...grpc.CallOption) (*metapb.AuthResponse, error) {
	return call(ctx, l, "Authenticate", l.s.Authenticate, in)
}

// Watch runs the service's change stream for this process on a goroutine,
// handing events over a channel instead of HTTP/2: every write of the
// gateway comes back to its own cache as events, and over gRPC that echo
// cost several percent of a small PUT's CPU.
func (l *local) Watch(ctx context.Context, in *metapb.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[metapb.Event], error) {
	c, err := l.s.caller(WithCaller(ctx, l.who))
	if err == nil {
		err = l.s.authorize(c, "Watch", nil)
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	p := &pipe{ctx: ctx, cancel: cancel, ch: make(chan *metapb.Event, 1024), done: make(chan struct{})}
	req := proto.Clone(in).(*metapb.WatchRequest)
	go func() {
		done := l.s.ops.Start("Watch")
		err := l.s.Watch(req, (*pipeServer)(p))
		if errors.Is(errors.Canceled, err) {
			err = nil // the watcher hung up: the normal end, as over gRPC
		}
		done(err)
		p.err = err
		close(p.done)
	}()
	return (*pipeClient)(p), nil
}

// pipe carries one Watch stream inside the process: pipeServer is the
// service's end, pipeClient the caller's.
type pipe struct {
	ctx    context.Context
	cancel context.CancelFunc
	ch     chan *metapb.Event
	done   chan struct{} // closed when the service's Watch returned
	err    error         // what it returned; read after done
}

type pipeServer pipe

func (p *pipeServer) Send(e *metapb.Event) error {
	select {
	case p.ch <- proto.Clone(e).(*metapb.Event):
		return nil
	case <-p.ctx.Done():
		return errors.E(errors.Canceled, p.ctx.Err())
	}
}

func (p *pipeServer) Context() context.Context     { return p.ctx }
func (p *pipeServer) SetHeader(metadata.MD) error  { return nil }
func (p *pipeServer) SendHeader(metadata.MD) error { return nil }
func (p *pipeServer) SetTrailer(metadata.MD)       {}
func (p *pipeServer) SendMsg(m any) error          { return p.Send(m.(*metapb.Event)) }
func (p *pipeServer) RecvMsg(any) error            { return io.EOF }

type pipeClient pipe

// Recv returns the next event; once the service's end has returned and
// every event it sent was read, its error, or io.EOF.
func (p *pipeClient) Recv() (*metapb.Event, error) {
	select {
	case e := <-p.ch:
		return e, nil
	case <-p.ctx.Done():
		return nil, errors.E(errors.Canceled, p.ctx.Err())
	case <-p.done:
		select {
		case e := <-p.ch:
			return e, nil
		default:
		}
		if p.err != nil {
			return nil, p.err
		}
		return nil, io.EOF
	}
}

func (p *pipeClient) Context() context.Context     { return p.ctx }
func (p *pipeClient) Header() (metadata.MD, error) { return nil, nil }
func (p *pipeClient) Trailer() metadata.MD         { return nil }
func (p *pipeClient) CloseSend() error             { return nil }
func (p *pipeClient) SendMsg(any) error            { return nil }
func (p *pipeClient) RecvMsg(m any) error {
	e, err := p.Recv()
	if err == nil {
		proto.Merge(m.(*metapb.Event), e)
	}
	return err
}
