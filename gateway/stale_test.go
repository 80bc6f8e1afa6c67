package gateway_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"cairn"
	"cairn/api"
	"cairn/client"
	"cairn/gateway"
	"cairn/meta"
	"cairn/pki"
	"cairn/server/servertest"
)

// staleMarks records, per meta method, whether each call the gateway sent
// carried meta's stale-OK mark on the wire.
type staleMarks struct {
	mu    sync.Mutex
	calls map[string][]bool
}

func (m *staleMarks) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	md, _ := metadata.FromOutgoingContext(ctx)
	v := md.Get(meta.StaleOKHeader)
	m.mu.Lock()
	m.calls[filepath.Base(method)] = append(m.calls[filepath.Base(method)], len(v) > 0 && v[0] == "1")
	m.mu.Unlock()
	return inv(ctx, method, req, reply, cc, opts...)
}

// take returns the marks of method's calls since the last take.
func (m *staleMarks) take(method string) []bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.calls[method]
	delete(m.calls, method)
	return v
}

// TestListStaleOK lists through a gateway with and without api.StaleOK (the
// X-Cairn-Stale-OK header, `cairn ls --stale`): marked listings reach meta
// marked stale-tolerant, so that behind a meta group any member answers
// them; unmarked ones do not, and go to the leader.
func TestListStaleOK(t *testing.T) {
	s := servertest.Start(t, nil)
	ca, err := pki.LoadCA(filepath.Join(s.DataDir(), "meta"))
	if err != nil {
		t.Fatal(err)
	}
	node, err := ca.Node(pki.RoleGateway, "stale-test", nil)
	if err != nil {
		t.Fatal(err)
	}
	marks := &staleMarks{calls: map[string][]bool{}}
	mc, conn, err := meta.Dial(s.Addr("meta"), meta.DialTLS(node.Client()), grpc.WithChainUnaryInterceptor(marks.intercept))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	cl, err := client.New(client.Config{Meta: mc, NoWatch: true,
		Dial: func(string) cairn.Chunks { t.Error("a listing dialled a data server"); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	g, err := gateway.New(gateway.Config{Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(g)
	defer hs.Close()
	c := api.New(hs.URL, servertest.Root, servertest.RootSecret)
	ctx := context.Background()
	if _, err := c.CreateNamespace(ctx, "stale", api.Private); err != nil {
		t.Fatal(err)
	}
	if err := c.Mkdir(ctx, "stale", "d"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want bool
	}{{"plain", ctx, false}, {"stale", api.StaleOK(ctx), true}} {
		marks.take("List")
		marks.take("ListNamespaces")
		page, err := c.List(tc.ctx, "stale", api.ListOptions{Delimiter: "/"})
		if err != nil || len(page.Entries) != 1 || page.Entries[0].Name != "d/" {
			t.Fatalf("%s: list: %+v %v", tc.name, page, err)
		}
		if got := marks.take("List"); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: List calls' stale marks %v, want [%v]", tc.name, got, tc.want)
		}
		ns, err := c.Namespaces(tc.ctx)
		if err != nil || len(ns) != 1 {
			t.Fatalf("%s: namespaces: %+v %v", tc.name, ns, err)
		}
		if got := marks.take("ListNamespaces"); len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s: ListNamespaces calls' stale marks %v, want [%v]", tc.name, got, tc.want)
		}
	}
}
