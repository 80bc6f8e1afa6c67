package client_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc"

	"cairn"
	"cairn/chunk"
	"cairn/chunk/chunktest"
	"cairn/client"
	"cairn/errors"
	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server"
	"cairn/server/servertest"
)

// lostAnswers wraps a MetaClient and, while armed, loses the answer of
// the commands that make uploaded needles part of a file: the command
// reaches meta and applies, and then the caller sees the error gRPC gives
// a call whose context ended while it waited (a writer that gave up, a
// connection cut after the request went out). It records the extents
// each such command named.
type lostAnswers struct {
	metapb.MetaClient

	mu    sync.Mutex
	armed bool
	sent  [][]*metapb.Extent
}

func (l *lostAnswers) arm(on bool) {
	l.mu.Lock()
	l.armed = on
	l.mu.Unlock()
}

// after records exts and, when armed, turns the real answer into a lost
// one.
func (l *lostAnswers) after(exts []*metapb.Extent, err error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sent = append(l.sent, exts)
	if err != nil || !l.armed {
		return err
	}
	return errors.E(errors.Op("test.lostAnswer"), errors.Canceled, context.Canceled)
}

func (l *lostAnswers) Commit(ctx context.Context, in *metapb.CommitRequest, opts ...grpc.CallOption) (*metapb.Inode, error) {
	n, err := l.MetaClient.Commit(ctx, in, opts...)
	if err = l.after(in.Extents, err); err != nil {
		return nil, err
	}
	return n, nil
}

func (l *lostAnswers) Append(ctx context.Context, in *metapb.AppendRequest, opts ...grpc.CallOption) (*metapb.Inode, error) {
	n, err := l.MetaClient.Append(ctx, in, opts...)
	if err = l.after(in.Extents, err); err != nil {
		return nil, err
	}
	return n, nil
}

func (l *lostAnswers) lastSent() []*metapb.Extent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[len(l.sent)-1]
}

func lossyClient(t *testing.T, s *server.Server) (*lostAnswers, *client.Client) {
	t.Helper()
	mc, conn, err := meta.Dial(s.Addr("meta"), meta.DialTLS(s.UserTLS()), meta.WithUser(servertest.Root, servertest.RootSecret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	la := &lostAnswers{MetaClient: mc}
	c, err := client.New(client.Config{
		Meta:       la,
		Dial:       func(addr string) cairn.Chunks { return chunk.NewRemoteTLS(addr, s.UserTLS()) },
		ExtentSize: 64 << 10,
		NoWatch:    true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return la, c
}

// readBack reads ns/p through a client of its own (nothing cached) and
// fails the test unless it holds want.
func readBack(t *testing.T, s *server.Server, ns, p string, want []byte) {
	t.Helper()
	other := s.Client()
	f, err := other.StatFresh(bg, ns, p)
	if err != nil {
		t.Fatalf("%s/%s: %v", ns, p, err)
	}
	got, err := other.ReadAll(bg, f)
	if err != nil {
		t.Fatalf("%s/%s: the file names needles its writer deleted: %v", ns, p, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s/%s: read %d bytes, want the %d bytes committed", ns, p, len(got), len(want))
	}
}

// TestCommitAnswerLost is the regression test for a write that applied
// while its writer saw an error: the client deleted the needles it had
// uploaded, and the file, committed all the same, named data that was
// gone (TestTiering lost archive/churn-3 so: its writer was stopped in
// the middle of the commit). A failed commit whose outcome is unknown
// must leave the needles be; one meta refused must delete them.
func TestCommitAnswerLost(t *testing.T) {
	s := servertest.Start(t, nil)
	la, c := lossyClient(t, s)
	const ns = "lost"
	if _, err := c.CreateNamespace(bg, ns, "root", metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	old := chunktest.Data(1, 100<<10)
	if _, err := c.Put(bg, ns, "put", bytes.NewReader(old), client.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	la.arm(true)
	body := chunktest.Data(2, 150<<10) // three extents
	if _, err := c.Put(bg, ns, "put", bytes.NewReader(body), client.PutOptions{}); !errors.Is(errors.Canceled, err) {
		t.Fatalf("Put with its answer lost: %v, want canceled", err)
	}
	readBack(t, s, ns, "put", body)

	tail := chunktest.Data(3, 70<<10)
	if _, err := c.Append(bg, ns, "put", bytes.NewReader(tail), client.PutOptions{}); !errors.Is(errors.Canceled, err) {
		t.Fatalf("Append with its answer lost: %v, want canceled", err)
	}
	readBack(t, s, ns, "put", append(bytes.Clone(body), tail...))

	stored := chunktest.Data(4, 90<<10)
	st, err := c.Store(bg, ns, bytes.NewReader(stored), int64(len(stored)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CommitStored(bg, ns, "stored", st, client.CommitOptions{}); !errors.Is(errors.Canceled, err) {
		t.Fatalf("CommitStored with its answer lost: %v, want canceled", err)
	}
	readBack(t, s, ns, "stored", stored)
	la.arm(false)

	// A commit meta refused applied nothing: its needles are deleted, not
	// left to take space forever.
	if _, err := c.Put(bg, ns, "put/under", bytes.NewReader(old), client.PutOptions{}); !errors.Is(errors.NotDir, err) {
		t.Fatalf("Put under a file: %v, want not a directory", err)
	}
	refused := la.lastSent()
	if len(refused) == 0 {
		t.Fatal("the refused commit named no extents")
	}
	for _, e := range refused {
		var buf bytes.Buffer
		if _, err := c.ReadNeedle(bg, e.Volume, e.Key, 0, int64(e.Length), &buf); !errors.Is(errors.NotExist, err) {
			t.Errorf("needle %d/%d of a refused commit: %v, want it deleted", e.Volume, e.Key, err)
		}
	}
	readBack(t, s, ns, "put", append(bytes.Clone(body), tail...))
}
