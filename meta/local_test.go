package meta

import (
	"context"
	"testing"

	"cairn/errors"
	"cairn/pki"
	"cairn/proto/metapb"
)

type namedClient struct {
	name string
	cl   metapb.MetaClient
}

// bothClients returns the gRPC client of ts and an in-process one.
func bothClients(ts *testServer) []namedClient {
	return []namedClient{{"grpc", ts.cl}, {"local", Local(ts.svc, Caller{Role: pki.RoleGateway, ID: "test"}, ts.cl)}}
}

// TestLocalMatchesGRPC runs the same calls through the gRPC client and the
// in-process one: answers, error kinds and paths must agree, and the
// in-process client must not hand out messages the service still holds.
func TestLocalMatchesGRPC(t *testing.T) {
	ts := start(t, nil)
	for _, c := range bothClients(ts) {
		t.Run(c.name, func(t *testing.T) {
			ns := "ns-" + c.name
			mkns(t, c.cl, ns)
			n := put(t, c.cl, ns, "a/b/c.txt", 5, 1)
			n.Size = 999 // must not reach the service
			r, err := c.cl.Resolve(bg, &metapb.ResolveRequest{Ns: ns, Path: "a/b/c.txt", WantExtents: true})
			if err != nil {
				t.Fatal(err)
			}
			if r.Inode.Size != 5 || len(r.Extents) != 1 || r.Extents[0].Key != 1 {
				t.Fatalf("resolve: %v", r)
			}
			r.Extents[0].Key = 77
			r2, err := c.cl.Resolve(bg, &metapb.ResolveRequest{Ns: ns, Path: "a/b/c.txt", WantExtents: true})
			if err != nil || r2.Extents[0].Key != 1 {
				t.Fatalf("resolve after a caller changed its answer: %v, %v", r2, err)
			}
			_, err = c.cl.Resolve(bg, &metapb.ResolveRequest{Ns: ns, Path: "a/b/nope"})
			wantKind(t, err, errors.NotExist)
			if p := errors.PathOf(err); p != errors.Path(ns+"/a/b/nope") {
				t.Fatalf("path of the error: %q", p)
			}
			_, err = c.cl.Commit(bg, &metapb.CommitRequest{Ns: ns, Path: "a/b/c.txt", IfNoneMatch: true, Size: 1, Extents: []*metapb.Extent{ext(0, 1, 1, 2)}})
			wantKind(t, err, errors.Precondition)
			if _, err := c.cl.Rename(bg, &metapb.RenameRequest{Ns: ns, From: "a/b", To: "z"}); err != nil {
				t.Fatal(err)
			}
			l, err := c.cl.List(bg, &metapb.ListRequest{Ns: ns})
			if err != nil || len(l.Entries) != 2 || l.Entries[1].Name != "z/c.txt" {
				t.Fatalf("list: %v, %v", l, err)
			}
			vl, err := c.cl.S3ListVersions(bg, &metapb.S3ListVersionsRequest{Ns: ns, WithFiles: true})
			if err != nil || len(vl.Versions) != 2 || vl.Versions[1].Key != "z/c.txt" || !vl.Versions[1].File || vl.Versions[1].Inode.Size != 5 {
				t.Fatalf("version list: %v, %v", vl, err)
			}
			if _, err := c.cl.Delete(bg, &metapb.DeleteRequest{Ns: ns, Path: "z", Recursive: true}); err != nil {
				t.Fatal(err)
			}
			_, err = c.cl.Resolve(bg, &metapb.ResolveRequest{Ns: ns, Path: "z/c.txt"})
			wantKind(t, err, errors.NotExist)
		})
	}
}

// TestLocalWatch checks the in-process change stream against the gRPC one:
// events arrive in order, and cancelling the caller's context ends it with
// errors.Canceled.
func TestLocalWatch(t *testing.T) {
	ts := start(t, nil)
	for _, c := range bothClients(ts) {
		t.Run(c.name, func(t *testing.T) {
			ns := "watch-" + c.name
			mkns(t, c.cl, ns)
			ctx, cancel := context.WithCancel(bg)
			defer cancel()
			stream, err := c.cl.Watch(ctx, &metapb.WatchRequest{})
			if err != nil {
				t.Fatal(err)
			}
			first, err := stream.Recv() // the stream proves itself live at once
			if err != nil || !first.Reset_ {
				t.Fatalf("first event %v, %v; want a reset", first, err)
			}
			put(t, c.cl, ns, "f1", 1, 1)
			put(t, c.cl, ns, "f2", 1, 2)
			var got []string
			for len(got) < 2 {
				ev, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if ev.Seq <= first.Seq {
					t.Fatalf("event %v at or before the reset %d", ev, first.Seq)
				}
				got = append(got, ev.Path)
			}
			if got[0] != "f1" || got[1] != "f2" {
				t.Fatalf("events %v", got)
			}
			cancel()
			for {
				_, err := stream.Recv()
				if err != nil {
					wantKind(t, err, errors.Canceled)
					break
				}
			}
		})
	}
}
