package s3_test

import (
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func errorsAs(err error, target any) bool { return errors.As(err, target) }

func bucketInput(name string) *s3.CreateBucketInput {
	return &s3.CreateBucketInput{Bucket: aws.String(name)}
}

func putInput(bucket, key, body string) *s3.PutObjectInput {
	return &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}
}
