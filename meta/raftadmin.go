package meta

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"

	"cairn/errors"
	"cairn/proto/metapb"
)

// The meta group's administration: `cairn admin meta ls|add|remove|snapshot`.

// MetaMembers lists the group's members and its leader. Any member
// answers (anyMemberMethods), from its own view of the configuration.
func (s *Service) MetaMembers(ctx context.Context, _ *metapb.Empty) (*metapb.MetaMembersResponse, error) {
	g := s.group
	if g == nil {
		return &metapb.MetaMembersResponse{}, nil
	}
	f := g.r.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, errors.E(errors.Op("meta.MetaMembers"), errors.Unavailable, err)
	}
	_, leader := g.r.LeaderWithID()
	out := &metapb.MetaMembersResponse{Group: true, Leader: string(leader), Applied: g.applied.Load()}
	for _, m := range f.Configuration().Servers {
		out.Members = append(out.Members, &metapb.MetaMember{
			Id: string(m.ID), RaftAddr: string(m.Address), Leader: m.ID == leader, Voter: m.Suffrage == raft.Voter,
		})
	}
	return out, nil
}

// MetaAddMember adds a voter: a meta started with --raft-listen and no
// --bootstrap, which then catches up from the leader (a snapshot, when
// the log no longer holds everything).
func (s *Service) MetaAddMember(ctx context.Context, req *metapb.MetaMemberRequest) (*metapb.Empty, error) {
	const op = errors.Op("meta.MetaAddMember")
	g, err := s.groupOf(op)
	if err != nil {
		return nil, err
	}
	if req.Id == "" || req.RaftAddr == "" {
		return nil, errors.E(op, errors.Invalid, "id (gRPC address) and raft address are required")
	}
	if err := g.r.AddVoter(raft.ServerID(req.Id), raft.ServerAddress(req.RaftAddr), 0, 30*time.Second).Error(); err != nil {
		return nil, g.changeErr(op, err)
	}
	return &metapb.Empty{}, nil
}

// MetaRemoveMember removes a member (the leader too: it steps down once
// the change is committed).
func (s *Service) MetaRemoveMember(ctx context.Context, req *metapb.MetaMemberRequest) (*metapb.Empty, error) {
	const op = errors.Op("meta.MetaRemoveMember")
	g, err := s.groupOf(op)
	if err != nil {
		return nil, err
	}
	if req.Id == "" {
		return nil, errors.E(op, errors.Invalid, "id is required")
	}
	if err := g.r.RemoveServer(raft.ServerID(req.Id), 0, 30*time.Second).Error(); err != nil {
		return nil, g.changeErr(op, err)
	}
	return &metapb.Empty{}, nil
}

func (s *Service) groupOf(op errors.Op) (*group, error) {
	if s.group == nil {
		return nil, errors.E(op, errors.Precondition, "this meta runs alone (no --raft-listen): there is no group to change")
	}
	return s.group, nil
}

func (g *group) changeErr(op errors.Op, err error) error {
	if err == raft.ErrNotLeader {
		return g.notLeader()
	}
	return errors.E(op, errors.Unavailable, err)
}

// MetaSnapshot streams the whole state, as the leader holds it now, in the
// snapshot format (fsm.go): a backup that RestoreBackup turns back into a
// meta's store.
func (s *Service) MetaSnapshot(_ *metapb.Empty, stream metapb.Meta_MetaSnapshotServer) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	var applied uint64
	if s.group != nil {
		applied = s.group.applied.Load()
	}
	w := bufio.NewWriterSize(chunkWriter{stream}, 1<<20)
	if err := writeSnapshot(w, snap, applied); err != nil {
		return err
	}
	return w.Flush()
}

type chunkWriter struct {
	stream metapb.Meta_MetaSnapshotServer
}

func (c chunkWriter) Write(p []byte) (int, error) {
	if err := c.stream.Send(&metapb.MetaSnapshotChunk{Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

// RestoreBackup makes dir (a new meta's --data, which must hold no store
// yet) start from a backup taken with MetaSnapshot. The applied index is
// reset: the restored meta starts a new group (or runs alone), whose log
// begins again at 1.
func RestoreBackup(dir string, r io.Reader) error {
	const op = errors.Op("meta.RestoreBackup")
	p := filepath.Join(dir, "pebble")
	if _, err := os.Stat(p); err == nil {
		return errors.E(op, errors.Exist, errors.Path(p), "a store is there already; restore into a new directory")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return errors.E(op, errors.IO, err)
	}
	db, err := pebble.Open(p, &pebble.Options{})
	if err != nil {
		return errors.E(op, errors.IO, errors.Path(p), err)
	}
	br := bufio.NewReaderSize(r, 1<<20)
	if _, err := readSnapshotHeader(br); err != nil {
		db.Close()
		return err
	}
	err = loadSnapshot(db, br, 0)
	if err == nil {
		err = db.Delete(keyApplied, pebble.Sync)
	}
	if cerr := db.Close(); err == nil && cerr != nil {
		err = errors.E(op, errors.IO, cerr)
	}
	return err
}

// HandOver gives the lead to another member, when this one leads, and
// waits at most timeout: a meta stopping on SIGTERM hands over first, so
// that the group elects no one while the leader is merely gone.
func (s *Service) HandOver(timeout time.Duration) error {
	g := s.group
	if g == nil || g.r.State() != raft.Leader {
		return nil
	}
	g.ready.Store(false) // stop answering: the next leader answers
	done := make(chan error, 1)
	go func() { done <- g.r.LeadershipTransfer().Error() }()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return errors.E(errors.Op("meta.HandOver"), errors.Unavailable, err)
		}
		return nil
	case <-t.C:
		return errors.E(errors.Op("meta.HandOver"), errors.Unavailable, "leadership transfer timed out")
	}
}
