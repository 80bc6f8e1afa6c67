package meta

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

func garbage(t *testing.T, svc *Service, key uint64) bool {
	t.Helper()
	v, err := svc.readView()
	if err != nil {
		t.Fatal(err)
	}
	defer v.close()
	ok, err := v.has(garbageKey(1, key))
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestSharedNeedles follows needle ownership through S3 copies, overwrites,
// truncation, multipart completion and abort: a needle becomes garbage
// exactly when its last owner lets go.
func TestSharedNeedles(t *testing.T) {
	ts := start(t, nil) // no data servers: garbage stays queued for inspection
	cl, svc := ts.cl, ts.svc
	mkns(t, cl, "bkt")
	put(t, cl, "bkt", "a", 100, 1)
	cp := func(from, to string) {
		t.Helper()
		if _, err := cl.S3Copy(bg, &metapb.S3CopyRequest{SrcNs: "bkt", SrcPath: from, DstNs: "bkt", DstPath: to}); err != nil {
			t.Fatal(err)
		}
	}
	del := func(p string) {
		t.Helper()
		if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "bkt", Path: p}); err != nil {
			t.Fatal(err)
		}
	}
	cp("a", "b")
	cp("a", "c")
	cp("c", "c") // onto itself: ownership unchanged
	del("a")
	del("b")
	if garbage(t, svc, 1) {
		t.Fatal("needle 1 queued while c still owns it")
	}
	del("c")
	if !garbage(t, svc, 1) {
		t.Fatal("needle 1 not queued after its last owner went")
	}

	// Overwrite of a shared file releases one owner only.
	put(t, cl, "bkt", "x", 100, 2)
	cp("x", "y")
	put(t, cl, "bkt", "x", 100, 3)
	if garbage(t, svc, 2) {
		t.Fatal("overwrite of x released y's needle")
	}

	// Multipart: parts 1 and 2 completed, part 3 left out, one part shared.
	up, err := cl.S3CreateUpload(bg, &metapb.S3Upload{Bucket: "bkt", Key: "m/obj"})
	if err != nil {
		t.Fatal(err)
	}
	ref := &metapb.S3UploadRequest{Bucket: "bkt", Key: "m/obj", UploadId: up.UploadId}
	part := func(n uint32, key uint64, shared bool, etag string) {
		t.Helper()
		if _, err := cl.S3PutPart(bg, &metapb.S3PutPartCommand{Upload: ref, Shared: shared, Part: &metapb.S3Part{
			Number: n, Size: 10, Etag: etag, Extents: []*metapb.Extent{ext(0, 10, 1, key)}}}); err != nil {
			t.Fatal(err)
		}
	}
	part(1, 10, false, "00")
	part(1, 11, false, "01") // replaces part 1: needle 10 is garbage
	part(2, 3, true, "02")   // shares x's needle (UploadPartCopy)
	part(3, 12, false, "03")
	if !garbage(t, svc, 10) {
		t.Fatal("a replaced part's needle was not queued")
	}
	_, err = cl.S3CompleteUpload(bg, &metapb.S3CompleteRequest{Upload: ref, Parts: []*metapb.S3CompletePart{{Number: 1, Etag: "01"}, {Number: 2, Etag: "02"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !garbage(t, svc, 12) || garbage(t, svc, 11) || garbage(t, svc, 3) {
		t.Fatal("completion: left-out part must be garbage, completed parts not")
	}
	r, err := cl.Resolve(bg, &metapb.ResolveRequest{Ns: "bkt", Path: "m/obj", WantExtents: true})
	if err != nil || r.Inode.Size != 20 || len(r.Extents) != 2 || r.Extents[1].Offset != 10 || r.Extents[1].Key != 3 {
		t.Fatalf("completed file: %v %v", r, err)
	}
	del("x")
	if garbage(t, svc, 3) {
		t.Fatal("the multipart object's shared needle was released with x")
	}
	del("m/obj")
	if !garbage(t, svc, 3) || !garbage(t, svc, 11) {
		t.Fatal("needles of a deleted multipart object not queued")
	}
	if _, err := cl.S3ListParts(bg, &metapb.S3ListPartsRequest{Upload: ref}); !errors.Is(errors.NotExist, err) {
		t.Fatalf("parts of a completed upload: %v", err)
	}

	// Abort releases every part.
	up2, _ := cl.S3CreateUpload(bg, &metapb.S3Upload{Bucket: "bkt", Key: "n"})
	ref = &metapb.S3UploadRequest{Bucket: "bkt", Key: "n", UploadId: up2.UploadId}
	part(1, 20, false, "aa")
	if _, err := cl.S3AbortUpload(bg, ref); err != nil {
		t.Fatal(err)
	}
	if !garbage(t, svc, 20) {
		t.Fatal("an aborted part's needle was not queued")
	}
	// Wrong ETag, order, size: refused, nothing changed.
	up3, _ := cl.S3CreateUpload(bg, &metapb.S3Upload{Bucket: "bkt", Key: "o"})
	ref = &metapb.S3UploadRequest{Bucket: "bkt", Key: "o", UploadId: up3.UploadId}
	part(1, 30, false, "a1")
	part(2, 31, false, "a2")
	for _, parts := range [][]*metapb.S3CompletePart{
		{{Number: 1, Etag: "zz"}},
		{{Number: 2, Etag: "a2"}, {Number: 1, Etag: "a1"}},
		{{Number: 1, Etag: "a1"}, {Number: 5, Etag: "a2"}},
	} {
		_, err := cl.S3CompleteUpload(bg, &metapb.S3CompleteRequest{Upload: ref, Parts: parts})
		wantKind(t, err, errors.Invalid)
	}
	_, err = cl.S3CompleteUpload(bg, &metapb.S3CompleteRequest{Upload: ref, MinPartSize: 11,
		Parts: []*metapb.S3CompletePart{{Number: 1, Etag: "a1"}, {Number: 2, Etag: "a2"}}})
	wantKind(t, err, errors.Invalid)
	if l, err := cl.S3ListParts(bg, &metapb.S3ListPartsRequest{Upload: ref}); err != nil || len(l.Parts) != 2 {
		t.Fatalf("a refused completion changed the upload: %v %v", l, err)
	}
}

// TestTruncateKeepsSharedRange: two extents of one file in one needle
// (UploadPartCopy of two ranges); cutting off the second must not release
// the needle the first still uses.
func TestTruncateKeepsSharedRange(t *testing.T) {
	ts := start(t, nil)
	cl, svc := ts.cl, ts.svc
	mkns(t, cl, "bkt")
	_, err := cl.Commit(bg, &metapb.CommitRequest{Ns: "bkt", Path: "f", Size: 20, Extents: []*metapb.Extent{
		ext(0, 10, 1, 7), {Offset: 10, Length: 10, Volume: 1, Key: 7, NeedleOffset: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	size := uint64(10)
	if _, err := cl.SetAttr(bg, &metapb.SetAttrRequest{Ns: "bkt", Path: "f", Size: &size}); err != nil {
		t.Fatal(err)
	}
	if garbage(t, svc, 7) {
		t.Fatal("truncation released a needle the file still reads")
	}
}

func TestS3KeysSealed(t *testing.T) {
	dir := t.TempDir()
	svc, err := Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.S3CreateUser(bg, &metapb.S3User{Name: "carol"}); err != nil {
		t.Fatal(err)
	}
	k, err := svc.S3CreateKey(bg, &metapb.S3CreateKeyRequest{User: "carol"})
	if err != nil {
		t.Fatal(err)
	}
	svc.Close()
	// The secret appears in no file of the store, WAL included.
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(k.Secret)) {
				t.Errorf("%s holds the secret in the clear", p)
			}
		}
		return nil
	})
	if fi, err := os.Stat(filepath.Join(dir, MasterKeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("master key file: %v %v", fi, err)
	}
	svc, err = Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	got, err := svc.S3GetSecret(bg, &metapb.S3KeyRequest{AccessKey: k.Key.AccessKey})
	if err != nil || got.Secret != k.Secret || got.Key.User != "carol" {
		t.Fatalf("secret after reopen: %v %v", got, err)
	}
	svc.Close()
	// Another master key opens nothing.
	os.WriteFile(filepath.Join(dir, MasterKeyFile), bytes.Repeat([]byte{1}, 32), 0o600)
	svc, err = Open(testConfig(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	_, err = svc.S3GetSecret(bg, &metapb.S3KeyRequest{AccessKey: k.Key.AccessKey})
	wantKind(t, err, errors.Corrupt)
}
