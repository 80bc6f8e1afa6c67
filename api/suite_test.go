package api_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"io"
	"strings"
	"testing"

	"cairn/api"
	"cairn/errors"
)

// runSuite checks a Client against a gateway at endpoint: the fake in
// apitest, or a real one. Every check can fail against a wrong server.
func runSuite(t *testing.T, endpoint, key, secret string) {
	c := api.New(endpoint, key, secret)
	anon := api.New(endpoint, "", "")
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		f    func(*testing.T, context.Context, *api.Client, *api.Client)
	}{
		{"Namespaces", testNamespaces},
		{"PutGet", testPutGet},
		{"Conditional", testConditional},
		{"AppendRename", testAppendRename},
		{"ListDelete", testListDelete},
		{"Anonymous", testAnonymous},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, ctx, c, anon) })
	}
}

func must[T any](t *testing.T) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func wantKind(t *testing.T, err error, kind errors.Kind) {
	t.Helper()
	if !errors.Is(kind, err) {
		t.Fatalf("err = %v (kind %v), want kind %v", err, errors.KindOf(err), kind)
	}
}

func testNamespaces(t *testing.T, ctx context.Context, c, _ *api.Client) {
	ns := must[*api.Namespace](t)(c.CreateNamespace(ctx, "suite-ns", api.Public))
	if ns.Name != "suite-ns" || ns.Visibility != api.Public {
		t.Fatalf("created %+v", ns)
	}
	_, err := c.CreateNamespace(ctx, "suite-ns", api.Private)
	wantKind(t, err, errors.Exist)
	list := must[[]api.Namespace](t)(c.Namespaces(ctx))
	found := false
	for _, n := range list {
		found = found || n.Name == "suite-ns" && n.Visibility == api.Public
	}
	if !found {
		t.Fatalf("suite-ns (public) not in %+v", list)
	}
	ns = must[*api.Namespace](t)(c.SetVisibility(ctx, "suite-ns", api.Private))
	if ns.Visibility != api.Private {
		t.Fatalf("after SetVisibility: %+v", ns)
	}
	must[*api.PutResult](t)(c.Put(ctx, "suite-ns", "f", strings.NewReader("x"), 1, api.PutOptions{}))
	wantKind(t, c.DeleteNamespace(ctx, "suite-ns"), errors.NotEmpty)
	if err := c.Delete(ctx, "suite-ns", "f"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteNamespace(ctx, "suite-ns"); err != nil {
		t.Fatal(err)
	}
	wantKind(t, c.DeleteNamespace(ctx, "suite-ns"), errors.NotExist)
	_, err = c.Stat(ctx, "suite-ns", "f")
	wantKind(t, err, errors.NotExist)
}

func testPutGet(t *testing.T, ctx context.Context, c, _ *api.Client) {
	must[*api.Namespace](t)(c.CreateNamespace(ctx, "suite-data", api.Private))
	data := bytes.Repeat([]byte("0123456789"), 1000)
	name := "dir one/file?#%é.txt" // every character that needs escaping
	res := must[*api.PutResult](t)(c.Put(ctx, "suite-data", name, bytes.NewReader(data), int64(len(data)),
		api.PutOptions{ContentType: "text/plain"}))
	if res.Size != int64(len(data)) || res.ETag == "" || strings.Contains(res.ETag, `"`) {
		t.Fatalf("put result %+v", res)
	}
	body, st, err := c.Get(ctx, "suite-data", name, api.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := must[[]byte](t)(io.ReadAll(body))
	body.Close()
	if !bytes.Equal(got, data) || st.Size != int64(len(data)) || st.ETag != res.ETag || st.Mtime.IsZero() {
		t.Fatalf("get: %d bytes, stat %+v", len(got), st)
	}
	body, st = must2(t)(c.Get(ctx, "suite-data", name, api.GetOptions{Offset: 10, Length: 5}))
	got = must[[]byte](t)(io.ReadAll(body))
	body.Close()
	if string(got) != "01234" || st.Size != int64(len(data)) {
		t.Fatalf("range: %q, size %d", got, st.Size)
	}
	full := must[*api.Stat](t)(c.Stat(ctx, "suite-data", name))
	if full.Size != int64(len(data)) || full.Dir || full.ETag != res.ETag || full.ContentType != "text/plain" {
		t.Fatalf("stat %+v", full)
	}
	dir := must[*api.Stat](t)(c.Stat(ctx, "suite-data", "dir one"))
	if !dir.Dir {
		t.Fatalf("stat of parent %+v", dir)
	}
	// Unknown size: sent chunked.
	res = must[*api.PutResult](t)(c.Put(ctx, "suite-data", "chunked", io.MultiReader(bytes.NewReader(data)), -1, api.PutOptions{}))
	if res.Size != int64(len(data)) {
		t.Fatalf("chunked put stored %d bytes", res.Size)
	}
	empty := must[*api.PutResult](t)(c.Put(ctx, "suite-data", "empty", strings.NewReader(""), 0, api.PutOptions{}))
	if empty.Size != 0 {
		t.Fatalf("empty put %+v", empty)
	}
	_, _, err = c.Get(ctx, "suite-data", "missing", api.GetOptions{})
	wantKind(t, err, errors.NotExist)
	if api.CodeOf(err) != "NoSuchKey" {
		t.Fatalf("code of %v = %q", err, api.CodeOf(err))
	}
	_, _, err = c.Get(ctx, "suite-data", "chunked", api.GetOptions{Offset: 1 << 20})
	wantKind(t, err, errors.Range)
}

func must2(t *testing.T) func(io.ReadCloser, *api.Stat, error) (io.ReadCloser, *api.Stat) {
	return func(r io.ReadCloser, st *api.Stat, err error) (io.ReadCloser, *api.Stat) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return r, st
	}
}

func testConditional(t *testing.T, ctx context.Context, c, _ *api.Client) {
	must[*api.Namespace](t)(c.CreateNamespace(ctx, "suite-cond", api.Private))
	res := must[*api.PutResult](t)(c.Put(ctx, "suite-cond", "f", strings.NewReader("v1"), 2, api.PutOptions{Create: true}))
	_, err := c.Put(ctx, "suite-cond", "f", strings.NewReader("v2"), 2, api.PutOptions{Create: true})
	wantKind(t, err, errors.Precondition)
	_, err = c.Put(ctx, "suite-cond", "f", strings.NewReader("v2"), 2, api.PutOptions{IfMatch: "nope"})
	wantKind(t, err, errors.Precondition)
	must[*api.PutResult](t)(c.Put(ctx, "suite-cond", "f", strings.NewReader("v2"), 2, api.PutOptions{IfMatch: res.ETag}))
	st := must[*api.Stat](t)(c.Stat(ctx, "suite-cond", "f"))
	_, _, err = c.Get(ctx, "suite-cond", "f", api.GetOptions{IfNoneMatch: st.ETag})
	wantKind(t, err, errors.Precondition)
	sum := md5.Sum([]byte("other"))
	_, err = c.Put(ctx, "suite-cond", "g", strings.NewReader("v3"), 2, api.PutOptions{ContentMD5: sum[:]})
	wantKind(t, err, errors.BadDigest)
	sum = md5.Sum([]byte("v3"))
	must[*api.PutResult](t)(c.Put(ctx, "suite-cond", "g", strings.NewReader("v3"), 2, api.PutOptions{ContentMD5: sum[:]}))
}

func testAppendRename(t *testing.T, ctx context.Context, c, _ *api.Client) {
	must[*api.Namespace](t)(c.CreateNamespace(ctx, "suite-app", api.Private))
	for i, want := range []int64{3, 6, 9} {
		n := must[int64](t)(c.Append(ctx, "suite-app", "log/a", strings.NewReader("abc"), 3))
		if n != want {
			t.Fatalf("append %d: size %d, want %d", i, n, want)
		}
	}
	st := must[*api.Stat](t)(c.Rename(ctx, "suite-app", "log/a", "log/b"))
	if st.Size != 9 || st.Name != "log/b" {
		t.Fatalf("renamed stat %+v", st)
	}
	_, err := c.Stat(ctx, "suite-app", "log/a")
	wantKind(t, err, errors.NotExist)
	_, err = c.Put(ctx, "suite-app", "log/b/c", strings.NewReader("x"), 1, api.PutOptions{})
	wantKind(t, err, errors.NotDir)
	_, _, err = c.Get(ctx, "suite-app", "log", api.GetOptions{})
	wantKind(t, err, errors.IsDir)
}

func testListDelete(t *testing.T, ctx context.Context, c, _ *api.Client) {
	must[*api.Namespace](t)(c.CreateNamespace(ctx, "suite-list", api.Private))
	for _, p := range []string{"a", "b/1", "b/2", "b/3", "c/d/e"} {
		must[*api.PutResult](t)(c.Put(ctx, "suite-list", p, strings.NewReader(p), int64(len(p)), api.PutOptions{}))
	}
	if err := c.Mkdir(ctx, "suite-list", "empty/sub"); err != nil {
		t.Fatal(err)
	}
	got := names(t, c.Entries(ctx, "suite-list", api.ListOptions{Delimiter: "/", Limit: 2}))
	if want := "a b/ c/ empty/"; got != want {
		t.Fatalf("root listing %q, want %q", got, want)
	}
	got = names(t, c.Entries(ctx, "suite-list", api.ListOptions{Prefix: "b/", Delimiter: "/", Limit: 1}))
	if want := "b/1 b/2 b/3"; got != want {
		t.Fatalf("b/ listing %q, want %q", got, want)
	}
	page := must[*api.Page](t)(c.List(ctx, "suite-list", api.ListOptions{Prefix: "b/", Limit: 2}))
	if len(page.Entries) != 2 || page.NextCursor == "" {
		t.Fatalf("first page %+v", page)
	}
	wantKind(t, c.Delete(ctx, "suite-list", "b"), errors.NotEmpty)
	if err := c.DeleteAll(ctx, "suite-list", "b"); err != nil {
		t.Fatal(err)
	}
	wantKind(t, c.Delete(ctx, "suite-list", "b/1"), errors.NotExist)
	got = names(t, c.Entries(ctx, "suite-list", api.ListOptions{Delimiter: "/"}))
	if want := "a c/ empty/"; got != want {
		t.Fatalf("after DeleteAll %q, want %q", got, want)
	}
}

// names joins a listing's names, directories marked with '/'.
func names(t *testing.T, seq func(func(api.Entry, error) bool)) string {
	t.Helper()
	var out []string
	for e, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		n := strings.TrimSuffix(e.Name, "/")
		if e.Dir {
			n += "/"
		}
		out = append(out, n)
	}
	return strings.Join(out, " ")
}

func testAnonymous(t *testing.T, ctx context.Context, c, anon *api.Client) {
	must[*api.Namespace](t)(c.CreateNamespace(ctx, "suite-priv", api.Private))
	must[*api.Namespace](t)(c.CreateNamespace(ctx, "suite-pub", api.Public))
	for _, ns := range []string{"suite-priv", "suite-pub"} {
		must[*api.PutResult](t)(c.Put(ctx, ns, "f", strings.NewReader("hi"), 2, api.PutOptions{}))
	}
	_, _, err := anon.Get(ctx, "suite-priv", "f", api.GetOptions{})
	if !errors.Is(errors.Unauthenticated, err) && !errors.Is(errors.Permission, err) {
		t.Fatalf("anonymous GET of a private file: %v", err)
	}
	body, _ := must2(t)(anon.Get(ctx, "suite-pub", "f", api.GetOptions{}))
	if b := must[[]byte](t)(io.ReadAll(body)); string(b) != "hi" {
		t.Fatalf("anonymous GET of a public file: %q", b)
	}
	body.Close()
	_, err = anon.Put(ctx, "suite-pub", "g", strings.NewReader("x"), 1, api.PutOptions{})
	if !errors.Is(errors.Unauthenticated, err) && !errors.Is(errors.Permission, err) {
		t.Fatalf("anonymous PUT: %v", err)
	}
	bad := api.New(c.Endpoint(), "nobody", "wrong")
	_, err = bad.Stat(ctx, "suite-priv", "f")
	wantKind(t, err, errors.Unauthenticated)
}
