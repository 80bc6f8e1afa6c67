package s3_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// BenchmarkListVersions lists a whole versioned bucket of CAIRN_BENCH_KEYS
// keys (default 10,000; the figure is 100,000), 1,000 per page:
// ListObjectsV2 as the baseline (of the bucket "one", every key written
// once, and of "two", every key overwritten once), ListObjectVersions of
// "one" (one version per key) and of "two" (two per key, so half the
// entries are stored versions merged in). keys/s is the rate, cpu-us/key
// the process's CPU per key.
//
//	CAIRN_BENCH_KEYS=100000 go test -run '^$' -bench BenchmarkListVersions -benchtime 3x ./gateway/s3/
func BenchmarkListVersions(b *testing.B) {
	n := 10000
	if v, err := strconv.Atoi(os.Getenv("CAIRN_BENCH_KEYS")); err == nil && v > 0 {
		n = v
	}
	s := servertest.Start(b, nil)
	ctx := context.Background()
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(s.S3URL()), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(servertest.Root, servertest.RootSecret, ""),
	})
	fill := func(bucket string, rounds int) {
		if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			b.Fatal(err)
		}
		if _, err := s.Meta().S3SetVersioning(ctx, &metapb.S3VersioningRequest{Ns: bucket, State: metapb.S3Versioning_S3_VERSIONING_ENABLED}); err != nil {
			b.Fatal(err)
		}
		// Empty files committed straight to meta, a thousand at a time:
		// listing is what is measured, not uploading.
		for r := 0; r < rounds; r++ {
			for i := 0; i < n; i += 1000 {
				req := &metapb.CommitBatchRequest{}
				for j := i; j < min(i+1000, n); j++ {
					req.Commits = append(req.Commits, &metapb.CommitRequest{Ns: bucket, Path: fmt.Sprintf("d%03d/k%07d", j%100, j), Parents: true, Etag: "d41d8cd98f00b204e9800998ecf8427e"})
				}
				if _, err := s.Meta().CommitBatch(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	fill("one", 1)
	fill("two", 2)
	// Pages are fetched over signed HTTP and read with a byte scan (count
	// the <Key> elements, pick out the markers), the same for both
	// listings: what is measured is the server's rate. A client's XML
	// decoding is its own cost, and it differs by client: encoding/xml
	// takes ~2x longer for a version page (1.75x the bytes: VersionId,
	// IsLatest, Owner) than for a ListObjectsV2 page, and the SDK's
	// decoder of version lists ~20x the server's time per page.
	signer := v4.NewSigner()
	creds := aws.Credentials{AccessKeyID: servertest.Root, SecretAccessKey: servertest.RootSecret}
	get := func(query url.Values) []byte {
		req, err := http.NewRequest(http.MethodGet, s.S3URL()+"/?"+query.Encode(), nil)
		if err != nil {
			b.Fatal(err)
		}
		req.URL.Path = req.URL.Path + query.Get("bucket")
		req.URL.RawQuery = strings.Replace(req.URL.RawQuery, "bucket="+query.Get("bucket"), "", 1)
		req.URL.RawQuery = strings.Trim(strings.ReplaceAll(req.URL.RawQuery, "&&", "&"), "&")
		const empty = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
		req.Header.Set("X-Amz-Content-Sha256", empty)
		if err := signer.SignHTTP(ctx, creds, req, empty, "s3", "us-east-1", time.Now()); err != nil {
			b.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("%s: %s", req.URL, resp.Status)
		}
		data, err := io.ReadAll(resp.Body)
		if err != nil {
			b.Fatal(err)
		}
		return data
	}
	// element returns the text of the first <name> element of page.
	element := func(page []byte, name string) string {
		_, rest, ok := bytes.Cut(page, []byte("<"+name+">"))
		if !ok {
			return ""
		}
		v, _, _ := bytes.Cut(rest, []byte("</"))
		return string(v)
	}
	count := func(bucket string, versions bool) int {
		total := 0
		q := url.Values{"bucket": {bucket}}
		if versions {
			q.Set("versions", "")
			for {
				page := get(q)
				total += bytes.Count(page, []byte("<Key>"))
				if element(page, "IsTruncated") != "true" {
					return total
				}
				q.Set("key-marker", element(page, "NextKeyMarker"))
				q.Set("version-id-marker", element(page, "NextVersionIdMarker"))
			}
		}
		q.Set("list-type", "2")
		for {
			page := get(q)
			total += bytes.Count(page, []byte("<Key>"))
			if element(page, "IsTruncated") != "true" {
				return total
			}
			q.Set("continuation-token", element(page, "NextContinuationToken"))
		}
	}
	for _, tc := range []struct {
		name     string
		bucket   string
		versions bool
		want     int
	}{
		{"ListObjectsV2", "one", false, n},
		{"ListObjectsV2two", "two", false, n},
		{"ListObjectVersions1", "one", true, n},
		{"ListObjectVersions2", "two", true, 2 * n},
	} {
		b.Run(tc.name, func(b *testing.B) {
			cpu0 := cpuTime()
			for b.Loop() {
				if got := count(tc.bucket, tc.versions); got != tc.want {
					b.Fatalf("listed %d, want %d", got, tc.want)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "keys/s")
			// The process's CPU (server, client and whatever the store does
			// meanwhile) per key: at load, wall-clock rates say more of the
			// neighbours than of the listing.
			b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(n*b.N), "cpu-us/key")
		})
	}
}

// cpuTime is the user and system CPU this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
