package meta

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"google.golang.org/protobuf/proto"

	"cairn/errors"
	"cairn/pathname"
	"cairn/proto/metapb"
)

// The methods below are the gRPC API, callable in-process too. Reads run on
// one consistent view; mutations become Commands for propose.

var _ metapb.MetaServer = (*Service)(nil)

func (s *Service) CreateNamespace(ctx context.Context, req *metapb.CreateNamespaceRequest) (*metapb.Namespace, error) {
	const op = errors.Op("meta.CreateNamespace")
	if err := pathname.ValidNamespace(req.Name); err != nil {
		return nil, errors.E(op, err)
	}
	r := proto.Clone(req).(*metapb.CreateNamespaceRequest)
	if r.Replication == 0 {
		r.Replication = s.cfg.DefaultReplication
	}
	if err := s.namespaceClass(r); err != nil {
		return nil, errors.E(op, errors.Path(req.Name), err)
	}
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_CreateNamespace{CreateNamespace: r}}))
	if err != nil {
		return nil, err
	}
	return res.ns, nil
}

func (s *Service) DeleteNamespace(ctx context.Context, req *metapb.NamespaceRequest) (*metapb.Empty, error) {
	if err := pathname.ValidNamespace(req.Name); err != nil {
		return nil, errors.E(errors.Op("meta.DeleteNamespace"), err)
	}
	if _, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_DeleteNamespace{DeleteNamespace: req}})); err != nil {
		return nil, err
	}
	return &metapb.Empty{}, nil
}

func (s *Service) GetNamespace(ctx context.Context, req *metapb.NamespaceRequest) (*metapb.Namespace, error) {
	const op = errors.Op("meta.GetNamespace")
	if err := pathname.ValidNamespace(req.Name); err != nil {
		return nil, errors.E(op, err)
	}
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	ns, err := v.namespace(req.Name)
	if err != nil {
		return nil, errors.E(op, err)
	}
	return ns, nil
}

func (s *Service) ListNamespaces(ctx context.Context, _ *metapb.Empty) (*metapb.NamespaceList, error) {
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	it, err := v.newIter([]byte{pNamespace, '/'}, []byte{pNamespace, '/' + 1})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	out := &metapb.NamespaceList{}
	for it.First(); it.Valid(); it.Next() {
		ns := &metapb.Namespace{}
		if err := proto.Unmarshal(it.Value(), ns); err != nil {
			return nil, errors.E(errors.Op("meta.ListNamespaces"), errors.Corrupt, err)
		}
		out.Namespaces = append(out.Namespaces, ns)
	}
	s.filterNamespaces(ctx, out)
	return out, it.Error()
}

func (s *Service) SetVisibility(ctx context.Context, req *metapb.SetVisibilityRequest) (*metapb.Namespace, error) {
	if err := pathname.ValidNamespace(req.Name); err != nil {
		return nil, errors.E(errors.Op("meta.SetVisibility"), err)
	}
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_SetVisibility{SetVisibility: req}}))
	if err != nil {
		return nil, err
	}
	return res.ns, nil
}

// Resolve looks up a whole path in one call. The extents come with their
// read capabilities.
func (s *Service) Resolve(ctx context.Context, req *metapb.ResolveRequest) (*metapb.ResolveResponse, error) {
	resp, err := s.resolveView(req)
	if req.Ino != 0 && (errors.Is(errors.NotExist, err) || errors.Is(errors.NotDir, err) || err == nil && resp.Inode.Ino != req.Ino) {
		// Renamed or unlinked by another client since the caller opened it.
		if r, berr := s.openByIno(ctx, req); berr == nil {
			resp, err = r, nil
		}
	}
	if err != nil {
		return nil, err
	}
	resp.Caps = s.readCaps(req.Ns, resp.Extents)
	if req.WantExtents {
		s.noteRead(resp.Inode) // tier.go: last reads, batched
	}
	return resp, nil
}

func (s *Service) resolveView(req *metapb.ResolveRequest) (*metapb.ResolveResponse, error) {
	v, err := s.cachedView()
	if err != nil {
		return nil, err
	}
	resp, err := resolve(v, req)
	v.close()
	if v.mixed { // raced a write: answer from one consistent view
		if v, err = s.readView(); err != nil {
			return nil, err
		}
		defer v.close()
		return resolve(v, req)
	}
	return resp, err
}

func resolve(v *view, req *metapb.ResolveRequest) (*metapb.ResolveResponse, error) {
	const op = errors.Op("meta.Resolve")
	p, err := checkPath(op, req.Ns, req.Path)
	if err != nil {
		return nil, err
	}
	ns, err := v.namespace(req.Ns)
	if err != nil {
		return nil, errors.E(op, err)
	}
	ino, _, err := v.walk(ns.RootIno, p)
	if err != nil {
		return nil, errors.E(op, fullPath(req.Ns, p), err)
	}
	n, err := v.inode(ino)
	if err != nil {
		return nil, errors.E(op, fullPath(req.Ns, p), err)
	}
	resp := &metapb.ResolveResponse{Inode: n}
	if req.WantExtents && n.Type != metapb.FileType_DIRECTORY {
		if resp.Extents, err = v.extents(n); err != nil {
			return nil, errors.E(op, fullPath(req.Ns, p), err)
		}
	}
	return resp, nil
}

// maxBatch bounds BatchResolve so one call cannot pin a view for long.
const maxBatch = 10000

// BatchResolve resolves many paths against one consistent view; each
// result carries its own error.
func (s *Service) BatchResolve(ctx context.Context, req *metapb.BatchResolveRequest) (*metapb.BatchResolveResponse, error) {
	if len(req.Requests) > maxBatch {
		return nil, errors.E(errors.Op("meta.BatchResolve"), errors.TooLarge, "more than 10000 paths")
	}
	v, err := s.readView()
	if err != nil {
		return nil, err
	}
	defer v.close()
	out := &metapb.BatchResolveResponse{Results: make([]*metapb.ResolveResult, len(req.Requests))}
	for i, r := range req.Requests {
		resp, err := resolve(v, r)
		if err != nil {
			out.Results[i] = &metapb.ResolveResult{Error: protoError(err)}
			continue
		}
		resp.Caps = s.readCaps(r.Ns, resp.Extents)
		if r.WantExtents {
			s.noteRead(resp.Inode)
		}
		out.Results[i] = &metapb.ResolveResult{Response: resp}
	}
	return out, nil
}

func (s *Service) Mkdir(ctx context.Context, req *metapb.MkdirRequest) (*metapb.Inode, error) {
	if _, err := checkPath("meta.Mkdir", req.Ns, req.Path); err != nil {
		return nil, err
	}
	res, err := s.proposeWait(withRequest(ctx, &metapb.Command{Op: &metapb.Command_Mkdir{Mkdir: req}}), !req.NoSyncWait)
	if err != nil {
		return nil, err
	}
	return res.inode, nil
}

// Sync returns once everything applied so far is durable: it syncs a
// log record of its own, and the log is ordered.
func (s *Service) Sync(ctx context.Context, _ *metapb.Empty) (*metapb.Empty, error) {
	if s.group != nil {
		// A member applies only what a majority's synced Raft log holds,
		// and its store has no log of its own to sync.
		return &metapb.Empty{}, nil
	}
	if err := s.db.LogData([]byte("sync"), pebble.Sync); err != nil {
		return nil, errors.E(errors.Op("meta.Sync"), errors.IO, err)
	}
	return &metapb.Empty{}, nil
}

func (s *Service) Commit(ctx context.Context, req *metapb.CommitRequest) (*metapb.Inode, error) {
	if _, err := checkPath("meta.Commit", req.Ns, req.Path); err != nil {
		return nil, err
	}
	if req.OpenIno != 0 && !s.openFiles().holds(sessionOf(ctx), req.OpenIno) {
		req.OpenIno = 0 // by inode only through the caller's own open
	}
	if err := s.validClass("meta.Commit", req.StorageClass); err != nil { // tier_apply.go
		return nil, err
	}
	return s.mutateInode(withRequest(ctx, &metapb.Command{Op: &metapb.Command_Commit{Commit: req}}))
}

// maxCommitBatch bounds CommitBatch: one mutation holds the apply mutex
// while it runs.
const maxCommitBatch = 1024

// CommitBatch applies several commits as one mutation (one fsync).
func (s *Service) CommitBatch(ctx context.Context, req *metapb.CommitBatchRequest) (*metapb.CommitBatchResponse, error) {
	if len(req.Commits) > maxCommitBatch {
		return nil, errors.E(errors.Op("meta.CommitBatch"), errors.TooLarge, fmt.Sprintf("more than %d commits", maxCommitBatch))
	}
	for _, c := range req.Commits {
		if _, err := checkPath("meta.CommitBatch", c.Ns, c.Path); err != nil {
			return nil, err
		}
	}
	res, err := s.propose(withRequest(ctx, &metapb.Command{Op: &metapb.Command_CommitBatch{CommitBatch: req}}))
	if err != nil {
		return nil, err
	}
	for i, n := range res.inodes {
		n.Seq = res.seqs[i].Seq // stored already; only the answer carries it
	}
	return &metapb.CommitBatchResponse{Inodes: res.inodes}, nil
}

func (s *Service) Append(ctx context.Context, req *metapb.AppendRequest) (*metapb.Inode, error) {
	if _, err := checkPath("meta.Append", req.Ns, req.Path); err != nil {
		return nil, err
	}
	if req.OpenIno != 0 && !s.openFiles().holds(sessionOf(ctx), req.OpenIno) {
		req.OpenIno = 0 // by inode only through the caller's own open
	}
	return s.mutateInode(withRequest(ctx, &metapb.Command{Op: &metapb.Command_Append{Append: req}}))
}

func (s *Service) Delete(ctx context.Context, req *metapb.DeleteRequest) (*metapb.DeleteResponse, error) {
	if _, err := checkPath("meta.Delete", req.Ns, req.Path); err != nil {
		return nil, err
	}
	s.holdFor(ctx, req.Ns, req.Path, req.HeldIno)
	cmd := &metapb.Command{Op: &metapb.Command_Delete{Delete: req}}
	s.prepareHeld(ctx, cmd)
	res, err := s.propose(withRequest(ctx, cmd))
	if err != nil {
		return nil, err
	}
	resp := &metapb.DeleteResponse{}
	if len(res.events) > 0 {
		resp.Seq = res.events[len(res.events)-1].Seq
	}
	return resp, nil
}

func (s *Service) Rename(ctx context.Context, req *metapb.RenameRequest) (*metapb.Inode, error) {
	if _, err := checkPath("meta.Rename", req.Ns, req.From); err != nil {
		return nil, err
	}
	if _, err := checkPath("meta.Rename", req.Ns, req.To); err != nil {
		return nil, err
	}
	s.holdFor(ctx, req.Ns, req.To, req.HeldIno)
	cmd := &metapb.Command{Op: &metapb.Command_Rename{Rename: req}}
	s.prepareHeld(ctx, cmd)
	return s.mutateInode(withRequest(ctx, cmd))
}

func (s *Service) SetAttr(ctx context.Context, req *metapb.SetAttrRequest) (*metapb.Inode, error) {
	if _, err := checkPath("meta.SetAttr", req.Ns, req.Path); err != nil {
		return nil, err
	}
	if req.OpenIno != 0 && !s.openFiles().holds(sessionOf(ctx), req.OpenIno) {
		req.OpenIno = 0
	}
	return s.mutateInode(withRequest(ctx, &metapb.Command{Op: &metapb.Command_SetAttr{SetAttr: req}}))
}

func (s *Service) mutateInode(cmd *metapb.Command) (*metapb.Inode, error) {
	res, err := s.propose(cmd)
	if err != nil {
		return nil, err
	}
	return res.inode, nil
}

// Version is reported by Info.
const Version = "cairn-meta/1"

func (s *Service) Info(ctx context.Context, _ *metapb.Empty) (*metapb.InfoResponse, error) {
	out := &metapb.InfoResponse{Version: Version, ClusterId: s.clusterID}
	for _, d := range s.liveServers() {
		out.DataServers = append(out.DataServers, d.addr)
	}
	return out, nil
}
