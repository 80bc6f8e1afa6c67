// Command soak is the load of scripts/soak.sh: small and large PUTs and
// GETs over the native API, appends, creates and reads through a mount,
// and S3 multipart uploads, for a duration; then it reads back every write
// that was acknowledged and reports what is missing or wrong.
//
// Every acknowledged write is logged with the time it was answered; every
// error with its time, so that the script can tell errors inside its kill
// windows from the others.
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

var (
	endpoint = flag.String("endpoint", "", "native API URL")
	s3URL    = flag.String("s3", "", "S3 API URL")
	mountDir = flag.String("mount", "", "the namespace's directory in a mount (empty: no mount load)")
	ns       = flag.String("ns", "soak", "namespace (and bucket)")
	duration = flag.Duration("duration", time.Minute, "how long to load")
	errLog   = flag.String("errors", "errors.log", "where errors go, one a line: unix-ms op message")
	verifyOn = flag.String("verify-when", "", "a file whose appearance starts the verification (the script's faults are over)")
	user     = os.Getenv("CAIRN_ROOT_USER")
	secret   = os.Getenv("CAIRN_ROOT_PASSWORD")
)

// acked is what the store promised to keep: a path and the hash of its
// content; for appended files, the hashes of the chunks acknowledged, in
// order.
type acked struct {
	mu     sync.Mutex
	whole  map[string][32]byte
	chunks map[string][][]byte
}

type errs struct {
	mu sync.Mutex
	f  *os.File
	n  map[string]int
}

func (e *errs) add(op string, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[op]++
	fmt.Fprintf(e.f, "%d %s %s\n", time.Now().UnixMilli(), op, strings.ReplaceAll(err.Error(), "\n", " "))
}

func main() {
	flag.Parse()
	ef, err := os.Create(*errLog)
	if err != nil {
		fatal(err)
	}
	defer ef.Close()
	e := &errs{f: ef, n: map[string]int{}}
	a := &acked{whole: map[string][32]byte{}, chunks: map[string][][]byte{}}
	hc := &http.Client{Timeout: 2 * time.Minute}
	sc := s3.New(s3.Options{
		BaseEndpoint: aws.String(*s3URL), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(user, secret, ""),
	})
	ctx := context.Background()
	stop := time.Now().Add(*duration)
	ops := map[string]int{}
	var opsMu sync.Mutex
	count := func(op string) { opsMu.Lock(); ops[op]++; opsMu.Unlock() }

	worker := func(w int, op string, do func(r *rand.Rand, i int) error) {
		r := rand.New(rand.NewPCG(uint64(w), uint64(len(op))))
		for i := 0; time.Now().Before(stop); i++ {
			if err := do(r, i); err != nil {
				e.add(op, err)
			} else {
				count(op)
			}
		}
	}
	put := func(path string, body []byte) error {
		req, _ := http.NewRequest(http.MethodPut, *endpoint+"/"+*ns+"/"+path, bytes.NewReader(body))
		req.SetBasicAuth(user, secret)
		return do(hc, req, nil)
	}
	// retire verifies an acknowledged object and deletes it, so that the
	// large ones do not fill the disk over a long soak.
	var retired struct {
		sync.Mutex
		lost, wrong int
	}
	retire := func(p string) error {
		a.mu.Lock()
		sum, ok := a.whole[p]
		a.mu.Unlock()
		if !ok {
			return nil // its PUT failed: nothing was acknowledged, nothing to retire
		}
		body, err := get(hc, p)
		if err != nil {
			return err // still in the model: verified at the end
		}
		if sha256.Sum256(body) != sum {
			retired.Lock()
			retired.wrong++
			retired.Unlock()
			fmt.Fprintf(os.Stderr, "WRONG %s: %d bytes\n", p, len(body))
		}
		req, _ := http.NewRequest(http.MethodDelete, *endpoint+"/"+*ns+"/"+p, nil)
		req.SetBasicAuth(user, secret)
		if err := do(hc, req, nil); err != nil {
			return err
		}
		a.mu.Lock()
		delete(a.whole, p)
		a.mu.Unlock()
		return nil
	}
	var wg sync.WaitGroup
	run := func(w int, op string, f func(r *rand.Rand, i int) error) {
		wg.Add(1)
		go func() { defer wg.Done(); worker(w, op, f) }()
	}
	for w := range 4 { // small PUTs, then a GET of one acknowledged earlier
		run(w, "small", func(r *rand.Rand, i int) error {
			p := fmt.Sprintf("small/%d/%d", w, i)
			body := data(r, 1+r.IntN(64<<10))
			if err := put(p, body); err != nil {
				return err
			}
			a.mu.Lock()
			a.whole[p] = sha256.Sum256(body)
			a.mu.Unlock()
			if i > 0 {
				return check(hc, a, fmt.Sprintf("small/%d/%d", w, r.IntN(i)))
			}
			return nil
		})
	}
	run(10, "large", func(r *rand.Rand, i int) error {
		p := fmt.Sprintf("large/%d", i)
		body := data(r, 4<<20+r.IntN(12<<20))
		if err := put(p, body); err != nil {
			return err
		}
		a.mu.Lock()
		a.whole[p] = sha256.Sum256(body)
		a.mu.Unlock()
		if err := check(hc, a, p); err != nil {
			return err
		}
		if i >= 5 {
			return retire(fmt.Sprintf("large/%d", i-5))
		}
		return nil
	})
	for w := range 2 {
		run(20+w, "append", func(r *rand.Rand, i int) error {
			p := fmt.Sprintf("append/%d/%d", w, i/50) // a new file every 50 appends
			chunk := data(r, 1+r.IntN(32<<10))
			req, _ := http.NewRequest(http.MethodPost, *endpoint+"/"+*ns+"/"+p+"?append", bytes.NewReader(chunk))
			req.SetBasicAuth(user, secret)
			if err := do(hc, req, nil); err != nil {
				return err
			}
			a.mu.Lock()
			a.chunks[p] = append(a.chunks[p], chunk)
			a.mu.Unlock()
			return nil
		})
	}
	if *mountDir != "" {
		os.MkdirAll(filepath.Join(*mountDir, "mount"), 0o755)
		for w := range 2 {
			run(30+w, "mount", func(r *rand.Rand, i int) error {
				p := fmt.Sprintf("mount/%d-%d", w, i)
				body := data(r, 1+r.IntN(256<<10))
				f, err := os.Create(filepath.Join(*mountDir, p))
				if err != nil {
					return err
				}
				if _, err := f.Write(body); err != nil {
					f.Close()
					return err
				}
				if err := f.Sync(); err != nil { // the acknowledgement
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				a.mu.Lock()
				a.whole[p] = sha256.Sum256(body)
				a.mu.Unlock()
				got, err := os.ReadFile(filepath.Join(*mountDir, p))
				if err != nil {
					return err
				}
				if !bytes.Equal(got, body) {
					return fmt.Errorf("%s read back through the mount differs", p)
				}
				return nil
			})
		}
	}
	run(40, "multipart", func(r *rand.Rand, i int) error {
		key := fmt.Sprintf("s3/%d", i)
		up, err := sc.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: ns, Key: &key})
		if err != nil {
			return err
		}
		var whole []byte
		var parts []types.CompletedPart
		for n := int32(1); n <= 3; n++ {
			body := data(r, 5<<20+r.IntN(1<<20))
			if n == 3 {
				body = body[:1+r.IntN(1<<20)]
			}
			out, err := sc.UploadPart(ctx, &s3.UploadPartInput{Bucket: ns, Key: &key, UploadId: up.UploadId,
				PartNumber: aws.Int32(n), Body: bytes.NewReader(body)})
			if err != nil {
				return err
			}
			whole = append(whole, body...)
			parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(n)})
		}
		if _, err := sc.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: ns, Key: &key,
			UploadId: up.UploadId, MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}}); err != nil {
			return err
		}
		a.mu.Lock()
		a.whole[key] = sha256.Sum256(whole)
		a.mu.Unlock()
		if i >= 5 {
			return retire(fmt.Sprintf("s3/%d", i-5))
		}
		return nil
	})
	wg.Wait()
	for *verifyOn != "" {
		if _, err := os.Stat(*verifyOn); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}

	// Verification: every acknowledged write, read back through the API.
	lost, wrong := retired.lost, retired.wrong
	for p, sum := range a.whole {
		body, err := get(hc, p)
		switch {
		case err != nil:
			lost++
			fmt.Fprintf(os.Stderr, "LOST %s: %v\n", p, err)
		case sha256.Sum256(body) != sum:
			wrong++
			fmt.Fprintf(os.Stderr, "WRONG %s: %d bytes\n", p, len(body))
		}
	}
	for p, chunks := range a.chunks {
		body, err := get(hc, p)
		if err != nil {
			lost++
			fmt.Fprintf(os.Stderr, "LOST %s: %v\n", p, err)
			continue
		}
		// Each acknowledged chunk, in order; an append that failed may
		// have applied, so other bytes may lie between them.
		rest := body
		for i, c := range chunks {
			j := bytes.Index(rest, c)
			if j < 0 {
				wrong++
				fmt.Fprintf(os.Stderr, "WRONG %s: acknowledged append %d of %d missing\n", p, i+1, len(chunks))
				break
			}
			rest = rest[j+len(c):]
		}
	}
	appends := 0
	for _, c := range a.chunks {
		appends += len(c)
	}
	out, _ := json.Marshal(map[string]any{
		"ops": ops, "errors": e.n, "acked_files": len(a.whole), "appended_files": len(a.chunks),
		"acked_appends": appends, "lost": lost, "wrong": wrong,
	})
	fmt.Println(string(out))
	if lost+wrong > 0 {
		os.Exit(1)
	}
}

// data is n bytes from r.
func data(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func do(hc *http.Client, req *http.Request, into *[]byte) error {
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", req.Method, req.URL.Path, resp.StatusCode, bytes.TrimSpace(body))
	}
	if into != nil {
		*into = body
	}
	return nil
}

func get(hc *http.Client, p string) ([]byte, error) {
	req, _ := http.NewRequest(http.MethodGet, *endpoint+"/"+*ns+"/"+p, nil)
	req.SetBasicAuth(user, secret)
	var body []byte
	err := do(hc, req, &body)
	return body, err
}

// check reads p back and compares it with what was acknowledged.
func check(hc *http.Client, a *acked, p string) error {
	a.mu.Lock()
	sum, ok := a.whole[p]
	a.mu.Unlock()
	if !ok {
		return nil
	}
	body, err := get(hc, p)
	if err != nil {
		return err
	}
	if sha256.Sum256(body) != sum {
		return fmt.Errorf("GET %s: content differs from what was acknowledged", p)
	}
	return nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "soak:", err)
	os.Exit(2)
}
