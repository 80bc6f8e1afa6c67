package s3_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"cairn/meta"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func bucketInput(name string) *s3.CreateBucketInput {
	return &s3.CreateBucketInput{Bucket: aws.String(name)}
}

func putInput(bucket, key, body string) *s3.PutObjectInput {
	return &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}
}

// newKey creates user (unless it exists) and an access key of theirs
// with the given grants.
func newKey(t *testing.T, m metapb.MetaClient, user string, grants map[string]metapb.S3Access) *metapb.S3KeySecret {
	t.Helper()
	ctx := meta.OnBehalfOf(context.Background(), servertest.Root) // administration is root's
	if _, err := m.S3CreateUser(ctx, &metapb.S3User{Name: user}); err != nil && !strings.Contains(err.Error(), "exist") {
		t.Fatal(err)
	}
	k, err := m.S3CreateKey(ctx, &metapb.S3CreateKeyRequest{User: user, Grants: grants})
	if err != nil {
		t.Fatal(err)
	}
	return k
}
