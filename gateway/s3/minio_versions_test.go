package s3_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"cairn/server/servertest"
)

// TestMinioVersioning: versioning and object lock through minio-go, whose
// listing decodes Version and DeleteMarker elements in document order and
// whose RemoveObjects sends version ids in bulk.
func TestMinioVersioning(t *testing.T) {
	s := start(t)
	mc := minioCore(t, s, servertest.Root, servertest.RootSecret, false).Client
	ctx := context.Background()
	const b = "mvers"
	if err := mc.MakeBucket(ctx, b, minio.MakeBucketOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mc.EnableVersioning(ctx, b); err != nil {
		t.Fatal(err)
	}
	if cfg, err := mc.GetBucketVersioning(ctx, b); err != nil || !cfg.Enabled() {
		t.Fatalf("versioning %+v %v", cfg, err)
	}
	put := func(key, body string) string {
		t.Helper()
		info, err := mc.PutObject(ctx, b, key, strings.NewReader(body), int64(len(body)), minio.PutObjectOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return info.VersionID
	}
	v1, v2 := put("k", "one"), put("k", "two")
	if err := mc.RemoveObject(ctx, b, "k", minio.RemoveObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := readMinio(t, mc, b, "k", minio.GetObjectOptions{VersionID: v1})
	if err != nil || string(got) != "one" {
		t.Fatalf("GET v1: %q %v", got, err)
	}
	_, err = readMinio(t, mc, b, "k", minio.GetObjectOptions{})
	wantMinio(t, err, "NoSuchKey")

	var listed []string
	for o := range mc.ListObjects(ctx, b, minio.ListObjectsOptions{WithVersions: true, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		e := o.Key + " " + o.VersionID
		if o.IsDeleteMarker {
			e += " marker"
		}
		if o.IsLatest {
			e += " latest"
		}
		listed = append(listed, e)
	}
	if len(listed) != 3 || !strings.HasSuffix(listed[0], "marker latest") || listed[1] != "k "+v2 || listed[2] != "k "+v1 {
		t.Fatalf("listing %v", listed)
	}

	// Bulk removal of every version empties the bucket.
	objs := make(chan minio.ObjectInfo)
	go func() {
		defer close(objs)
		for o := range mc.ListObjects(ctx, b, minio.ListObjectsOptions{WithVersions: true, Recursive: true}) {
			objs <- o
		}
	}()
	for e := range mc.RemoveObjects(ctx, b, objs, minio.RemoveObjectsOptions{}) {
		t.Fatalf("RemoveObjects: %v", e.Err)
	}
	if err := mc.RemoveBucket(ctx, b); err != nil {
		t.Fatalf("the bucket is not empty after removing every version: %v", err)
	}

	// Object lock: a COMPLIANCE retention holds against a bypass.
	const lb = "mlock"
	if err := mc.MakeBucket(ctx, lb, minio.MakeBucketOptions{ObjectLocking: true}); err != nil {
		t.Fatal(err)
	}
	info, err := mc.PutObject(ctx, lb, "k", strings.NewReader("x"), 1, minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mode := minio.Compliance
	until := time.Now().Add(time.Hour).Truncate(time.Second)
	if err := mc.PutObjectRetention(ctx, lb, "k", minio.PutObjectRetentionOptions{Mode: &mode, RetainUntilDate: &until, VersionID: info.VersionID}); err != nil {
		t.Fatal(err)
	}
	gotMode, gotUntil, err := mc.GetObjectRetention(ctx, lb, "k", info.VersionID)
	if err != nil || *gotMode != minio.Compliance || !gotUntil.Equal(until) {
		t.Fatalf("retention %v %v %v", gotMode, gotUntil, err)
	}
	err = mc.RemoveObject(ctx, lb, "k", minio.RemoveObjectOptions{VersionID: info.VersionID, GovernanceBypass: true})
	wantMinio(t, err, "AccessDenied")
	on := minio.LegalHoldEnabled
	if err := mc.PutObjectLegalHold(ctx, lb, "k", minio.PutObjectLegalHoldOptions{VersionID: info.VersionID, Status: &on}); err != nil {
		t.Fatal(err)
	}
	if st, err := mc.GetObjectLegalHold(ctx, lb, "k", minio.GetObjectLegalHoldOptions{VersionID: info.VersionID}); err != nil || *st != minio.LegalHoldEnabled {
		t.Fatalf("legal hold %v %v", st, err)
	}
	enabled, dmode, _, _, err := mc.GetObjectLockConfig(ctx, lb)
	if err != nil || enabled != "Enabled" || dmode != nil {
		t.Fatalf("lock configuration: %q, default mode %v, %v", enabled, dmode, err)
	}
}
