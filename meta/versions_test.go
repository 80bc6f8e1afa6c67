package meta

import (
	"testing"

	"cairn/errors"
	"cairn/proto/metapb"
)

// TestVersionNeedles follows needle ownership through versioning: an
// overwrite or delete in a versioned namespace keeps the old needle (the
// stored version owns it), a copy from a version shares it, and deleting
// the last version that points into a needle queues it as garbage.
func TestVersionNeedles(t *testing.T) {
	ts := start(t, nil) // no data servers: garbage stays queued for inspection
	cl, svc := ts.cl, ts.svc
	mkns(t, cl, "vers")
	put(t, cl, "vers", "k", 10, 1) // the null version
	if _, err := cl.S3SetVersioning(bg, &metapb.S3VersioningRequest{Ns: "vers", State: metapb.S3Versioning_S3_VERSIONING_ENABLED}); err != nil {
		t.Fatal(err)
	}
	v2 := put(t, cl, "vers", "k", 10, 2)
	if v2.S3Version == 0 {
		t.Fatal("a versioned commit has no version id")
	}
	put(t, cl, "vers", "k", 10, 3)
	if _, err := cl.Delete(bg, &metapb.DeleteRequest{Ns: "vers", Path: "k"}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []uint64{1, 2, 3} {
		if garbage(t, svc, key) {
			t.Fatalf("needle %d queued while a version owns it", key)
		}
	}
	// A copy of the null version shares needle 1.
	if _, err := cl.S3Copy(bg, &metapb.S3CopyRequest{SrcNs: "vers", SrcPath: "k", SrcVersionId: "null", DstNs: "vers", DstPath: "c"}); err != nil {
		t.Fatal(err)
	}
	l, err := cl.S3ListVersions(bg, &metapb.S3ListVersionsRequest{Ns: "vers"})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Versions) != 4 || !l.Versions[0].Current || !l.Versions[0].DeleteMarker || !l.Versions[3].NullId {
		t.Fatalf("stored versions %v", l.Versions)
	}
	for _, v := range l.Versions {
		if v.Key != "k" {
			continue
		}
		if _, err := cl.S3DeleteVersion(bg, &metapb.S3VersionRequest{Ns: "vers", Path: "k", VersionId: versionIDOf(v)}); err != nil {
			t.Fatal(err)
		}
	}
	if !garbage(t, svc, 2) || !garbage(t, svc, 3) {
		t.Fatal("needles of deleted versions not queued")
	}
	if garbage(t, svc, 1) {
		t.Fatal("needle 1 queued while the copy owns it")
	}
	_, err = cl.S3GetVersion(bg, &metapb.S3VersionRequest{Ns: "vers", Path: "k"})
	wantKind(t, err, errors.NotExist)
	// The bucket still holds the copy's versions (one, current) only.
	l, err = cl.S3ListVersions(bg, &metapb.S3ListVersionsRequest{Ns: "vers"})
	if err != nil || len(l.Versions) != 0 {
		t.Fatalf("stored versions left: %v %v", l.GetVersions(), err)
	}
}

// FuzzParseVersionID: a version id from a request parses only if it is
// what VersionID prints.
func FuzzParseVersionID(f *testing.F) {
	for _, s := range []string{"null", "0000000000000001", "00000000000000ff", "0000000000000000", "3HL4kqtJlcpXroDTDmJ", "", "ffffffffffffffff", "+000000000000001", "000000000000000G"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, null, err := ParseVersionID(s)
		if err != nil {
			return
		}
		if null && s != "null" || !null && VersionID(n) != s {
			t.Fatalf("%q parsed as %d (null %v)", s, n, null)
		}
	})
}
