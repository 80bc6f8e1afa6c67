package s3_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

const publicPolicy = `{"Statement":[{"Effect":"Allow","Principal":"*","Action":"s3:GetObject","Resource":"arn:aws:s3:::%s/*"}]}`

// TestPublicAccessBlock: Put/Get/DeletePublicAccessBlock and the four
// flags enforced.
func TestPublicAccessBlock(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	ak := newKey(t, s.Client().Meta(), "alice", nil)
	bk := newKey(t, s.Client().Meta(), "bob", nil)
	alice := sdk(t, s, ak.Key.AccessKey, ak.Secret)
	bob := sdk(t, s, bk.Key.AccessKey, bk.Secret)
	b := aws.String("pab")
	must(alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: b, ACL: types.BucketCannedACLPublicRead}))
	must(alice.PutObject(ctx, putInput("pab", "k", "v")))
	wantAnon(t, s, "GET", "/pab/k", nil, 200)

	_, err := alice.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: b})
	wantCode(t, err, "NoSuchPublicAccessBlockConfiguration")
	put := func(c *s3.Client, cfg types.PublicAccessBlockConfiguration) error {
		_, err := c.PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: b, PublicAccessBlockConfiguration: &cfg})
		return err
	}
	wantCode(t, put(bob, types.PublicAccessBlockConfiguration{BlockPublicAcls: aws.Bool(true)}), "AccessDenied")

	// IgnorePublicAcls: the public-read ACL no longer lets anyone read.
	if err := put(alice, types.PublicAccessBlockConfiguration{IgnorePublicAcls: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	got := must(alice.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: b})).PublicAccessBlockConfiguration
	if !aws.ToBool(got.IgnorePublicAcls) || aws.ToBool(got.BlockPublicAcls) || aws.ToBool(got.BlockPublicPolicy) || aws.ToBool(got.RestrictPublicBuckets) {
		t.Fatalf("GetPublicAccessBlock: %+v", got)
	}
	wantAnon(t, s, "GET", "/pab/k", nil, 403)
	_, err = bob.GetObject(ctx, &s3.GetObjectInput{Bucket: b, Key: aws.String("k")})
	wantCode(t, err, "AccessDenied")

	// BlockPublicAcls: no public ACL may be set, on the bucket or an object.
	if err := put(alice, types.PublicAccessBlockConfiguration{BlockPublicAcls: aws.Bool(true), BlockPublicPolicy: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	wantAnon(t, s, "GET", "/pab/k", nil, 200) // IgnorePublicAcls is off again
	_, err = alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: b, ACL: types.BucketCannedACLPublicRead})
	wantCode(t, err, "AccessDenied")
	_, err = alice.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String("k2"), ACL: types.ObjectCannedACLPublicRead})
	wantCode(t, err, "AccessDenied")
	if _, err := alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: b, ACL: types.BucketCannedACLPrivate}); err != nil {
		t.Fatalf("a private ACL under BlockPublicAcls: %v", err)
	}
	// BlockPublicPolicy: a public policy is refused, a limited one is not.
	wantCode(t, putPolicy(alice, "pab", fmt.Sprintf(publicPolicy, "pab")), "AccessDenied")
	limited := `{"Statement":[{"Effect":"Allow","Principal":{"AWS":"bob"},"Action":"s3:GetObject","Resource":"arn:aws:s3:::pab/*"}]}`
	if err := putPolicy(alice, "pab", limited); err != nil {
		t.Fatalf("a non-public policy under BlockPublicPolicy: %v", err)
	}
	if string(getBody(t, bob, "pab", "k")) != "v" {
		t.Fatal("bob read other bytes")
	}

	// RestrictPublicBuckets: a public policy's Allows reach no anonymous
	// caller; authenticated users still match "*".
	if _, err := alice.DeletePublicAccessBlock(ctx, &s3.DeletePublicAccessBlockInput{Bucket: b}); err != nil {
		t.Fatal(err)
	}
	_, err = alice.GetPublicAccessBlock(ctx, &s3.GetPublicAccessBlockInput{Bucket: b})
	wantCode(t, err, "NoSuchPublicAccessBlockConfiguration")
	if err := putPolicy(alice, "pab", fmt.Sprintf(publicPolicy, "pab")); err != nil {
		t.Fatal(err)
	}
	wantAnon(t, s, "GET", "/pab/k", nil, 200)
	if err := put(alice, types.PublicAccessBlockConfiguration{RestrictPublicBuckets: aws.Bool(true)}); err != nil {
		t.Fatal(err)
	}
	wantAnon(t, s, "GET", "/pab/k", nil, 403)
	if string(getBody(t, bob, "pab", "k")) != "v" {
		t.Fatal("bob read other bytes")
	}
	_, err = alice.PutPublicAccessBlock(ctx, &s3.PutPublicAccessBlockInput{Bucket: aws.String("absent"),
		PublicAccessBlockConfiguration: &types.PublicAccessBlockConfiguration{}})
	wantCode(t, err, "NoSuchBucket")
}

// TestOwnershipControls: Put/Get/DeleteBucketOwnershipControls; with
// BucketOwnerEnforced, ACLs other than the owner's are refused.
func TestOwnershipControls(t *testing.T) {
	s := start(t)
	ctx := context.Background()
	ak := newKey(t, s.Client().Meta(), "alice", nil)
	bk := newKey(t, s.Client().Meta(), "bob", nil)
	alice := sdk(t, s, ak.Key.AccessKey, ak.Secret)
	bob := sdk(t, s, bk.Key.AccessKey, bk.Secret)
	b := aws.String("own")
	must(alice.CreateBucket(ctx, bucketInput("own")))
	_, err := alice.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: b})
	wantCode(t, err, "OwnershipControlsNotFoundError")
	put := func(c *s3.Client, bucket *string, o types.ObjectOwnership) error {
		_, err := c.PutBucketOwnershipControls(ctx, &s3.PutBucketOwnershipControlsInput{Bucket: bucket,
			OwnershipControls: &types.OwnershipControls{Rules: []types.OwnershipControlsRule{{ObjectOwnership: o}}}})
		return err
	}
	wantCode(t, put(alice, b, types.ObjectOwnershipObjectWriter), "NotImplemented")
	wantCode(t, put(alice, b, types.ObjectOwnershipBucketOwnerPreferred), "NotImplemented")
	wantCode(t, put(alice, b, "Nobody"), "MalformedXML")
	wantCode(t, put(bob, b, types.ObjectOwnershipBucketOwnerEnforced), "AccessDenied")
	if err := put(alice, b, types.ObjectOwnershipBucketOwnerEnforced); err != nil {
		t.Fatal(err)
	}
	got := must(alice.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: b}))
	if r := got.OwnershipControls.Rules; len(r) != 1 || r[0].ObjectOwnership != types.ObjectOwnershipBucketOwnerEnforced {
		t.Fatalf("GetBucketOwnershipControls: %+v", r)
	}
	_, err = alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: b, ACL: types.BucketCannedACLPublicRead})
	wantCode(t, err, "AccessControlListNotSupported")
	_, err = alice.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String("k"), Body: nil, ACL: types.ObjectCannedACLPublicRead})
	wantCode(t, err, "AccessControlListNotSupported")
	_, err = alice.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String("k"), Body: nil, ACL: types.ObjectCannedACLBucketOwnerRead})
	wantCode(t, err, "AccessControlListNotSupported")
	for _, acl := range []types.ObjectCannedACL{types.ObjectCannedACLBucketOwnerFullControl, types.ObjectCannedACLPrivate} {
		if _, err := alice.PutObject(ctx, &s3.PutObjectInput{Bucket: b, Key: aws.String("k"), ACL: acl}); err != nil {
			t.Fatalf("PutObject with %s under BucketOwnerEnforced: %v", acl, err)
		}
	}
	if _, err := alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: b, ACL: types.BucketCannedACLPrivate}); err != nil {
		t.Fatalf("PutBucketAcl private under BucketOwnerEnforced: %v", err)
	}
	if _, err := alice.DeleteBucketOwnershipControls(ctx, &s3.DeleteBucketOwnershipControlsInput{Bucket: b}); err != nil {
		t.Fatal(err)
	}
	_, err = alice.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: b})
	wantCode(t, err, "OwnershipControlsNotFoundError")
	if _, err := alice.PutBucketAcl(ctx, &s3.PutBucketAclInput{Bucket: b, ACL: types.BucketCannedACLPublicRead}); err != nil {
		t.Fatal(err)
	}
	// A public bucket cannot have its ACLs disabled.
	wantCode(t, put(alice, b, types.ObjectOwnershipBucketOwnerEnforced), "InvalidBucketAclWithObjectOwnership")

	// CreateBucket with ownership.
	must(alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("own2"), ObjectOwnership: types.ObjectOwnershipBucketOwnerEnforced}))
	got = must(alice.GetBucketOwnershipControls(ctx, &s3.GetBucketOwnershipControlsInput{Bucket: aws.String("own2")}))
	if r := got.OwnershipControls.Rules; len(r) != 1 || r[0].ObjectOwnership != types.ObjectOwnershipBucketOwnerEnforced {
		t.Fatalf("GetBucketOwnershipControls after CreateBucket: %+v", r)
	}
	_, err = alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("own3"), ObjectOwnership: types.ObjectOwnershipObjectWriter})
	wantCode(t, err, "NotImplemented")
	_, err = alice.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("own4"), ACL: types.BucketCannedACLPublicRead,
		ObjectOwnership: types.ObjectOwnershipBucketOwnerEnforced})
	wantCode(t, err, "InvalidBucketAclWithObjectOwnership")
	_, err = alice.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String("own4")})
	if err == nil {
		t.Fatal("a refused CreateBucket made the bucket")
	}
}
