package s3_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/server"
	"cairn/server/servertest"
)

// Smoke tests with the S3 clients users already have, run as real
// binaries (.ci/run installs them from apt). A missing binary fails the
// test: a skipped test would hide that CI lost its coverage.

func tool(t *testing.T, name, pkg string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("an external S3 client: not in the -short tier")
	}
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("%s not found in PATH: install the %s package (.ci/run does)", name, pkg)
	}
	return p
}

type runner struct {
	t   *testing.T
	env []string
	dir string
}

func (r runner) run(bin string, args ...string) string {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(toolEnv(), r.env...)
	cmd.Dir = r.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	defer func() {
		r.t.Logf("%s %s: %v", filepath.Base(bin), strings.Join(args[:min(3, len(args))], " "), time.Since(t0).Round(time.Millisecond))
	}()
	if err := cmd.Run(); err != nil {
		r.t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// toolEnv is the environment without settings that point the tools at
// other endpoints or certificates (the tests speak plain HTTP on loopback).
func toolEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k == "AWS_CA_BUNDLE" || strings.HasPrefix(k, "AWS_PROFILE") || strings.HasPrefix(k, "RCLONE_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func writeTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Fatalf("%s and %s differ (%d and %d bytes)", a, b, len(x), len(y))
	}
}

func smokeServer(t *testing.T) (*server.Server, string) {
	s := start(t)
	home := t.TempDir()
	return s, home
}

// awsEnv points awscli (and boto3) at root's key and at no config file.
func awsEnv(home string) []string {
	return []string{
		"HOME=" + home, "AWS_ACCESS_KEY_ID=" + servertest.Root, "AWS_SECRET_ACCESS_KEY=" + servertest.RootSecret,
		"AWS_DEFAULT_REGION=us-east-1", "AWS_CONFIG_FILE=" + filepath.Join(home, "none"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "none"),
	}
}

func TestAWSCLI(t *testing.T) {
	aws := tool(t, "aws", "awscli")
	s, home := smokeServer(t)
	dir := t.TempDir()
	r := runner{t: t, dir: dir, env: awsEnv(home)}
	ep := "--endpoint-url=" + s.S3URL()
	big := make([]byte, 20<<20+3) // over aws s3 cp's 8 MiB multipart threshold
	rand.Read(big)
	writeTree(t, dir, map[string][]byte{
		"src/a.txt": []byte("alpha"), "src/sub/b.txt": []byte("bravo"), "src/sub/deep/c.bin": big[:100000], "big.bin": big,
	})
	r.run(aws, ep, "s3", "mb", "s3://smoke")
	r.run(aws, ep, "s3", "cp", "big.bin", "s3://smoke/big.bin")
	r.run(aws, ep, "s3", "cp", "s3://smoke/big.bin", "big.back")
	sameFile(t, filepath.Join(dir, "big.bin"), filepath.Join(dir, "big.back"))
	// The object uploaded in parts is one file to the native API.
	if f, err := s.Client().StatFresh(context.Background(), "smoke", "big.bin"); err != nil || f.Size() != int64(len(big)) ||
		!strings.Contains(f.Inode.Etag, "-") {
		t.Fatalf("multipart upload by aws s3 cp: %v %v", f, err)
	}
	r.run(aws, ep, "s3", "sync", "src", "s3://smoke/tree")
	ls := r.run(aws, ep, "s3", "ls", "--recursive", "s3://smoke/tree/")
	for _, k := range []string{"tree/a.txt", "tree/sub/b.txt", "tree/sub/deep/c.bin"} {
		if !strings.Contains(ls, k) {
			t.Fatalf("aws s3 ls lacks %s:\n%s", k, ls)
		}
	}
	if out := r.run(aws, ep, "s3", "sync", "src", "s3://smoke/tree"); strings.TrimSpace(out) != "" {
		t.Fatalf("a second sync copied again:\n%s", out)
	}
	r.run(aws, ep, "s3", "sync", "s3://smoke/tree", "back")
	for _, f := range []string{"a.txt", "sub/b.txt", "sub/deep/c.bin"} {
		sameFile(t, filepath.Join(dir, "src", f), filepath.Join(dir, "back", f))
	}
	r.run(aws, ep, "s3", "rm", "--recursive", "s3://smoke/tree")
	if out := r.run(aws, ep, "s3", "ls", "s3://smoke/"); strings.Contains(out, "tree") {
		t.Fatalf("aws s3 rm --recursive left:\n%s", out)
	}

	// s3api multipart, step by step.
	var up struct{ UploadId string }
	if err := json.Unmarshal([]byte(r.run(aws, ep, "s3api", "create-multipart-upload", "--bucket", "smoke", "--key", "mp/obj")), &up); err != nil {
		t.Fatal(err)
	}
	writeTree(t, dir, map[string][]byte{"p1": big[:5<<20], "p2": big[5<<20 : 6<<20]})
	var etags []string
	for i, p := range []string{"p1", "p2"} {
		var out struct{ ETag string }
		json.Unmarshal([]byte(r.run(aws, ep, "s3api", "upload-part", "--bucket", "smoke", "--key", "mp/obj", "--upload-id", up.UploadId,
			"--part-number", string(rune('1'+i)), "--body", p)), &out)
		etags = append(etags, out.ETag)
	}
	parts := `{"Parts":[{"PartNumber":1,"ETag":` + jsonString(etags[0]) + `},{"PartNumber":2,"ETag":` + jsonString(etags[1]) + `}]}`
	if out := r.run(aws, ep, "s3api", "list-parts", "--bucket", "smoke", "--key", "mp/obj", "--upload-id", up.UploadId); !strings.Contains(out, `"PartNumber": 2`) {
		t.Fatalf("list-parts:\n%s", out)
	}
	r.run(aws, ep, "s3api", "complete-multipart-upload", "--bucket", "smoke", "--key", "mp/obj", "--upload-id", up.UploadId, "--multipart-upload", parts)
	r.run(aws, ep, "s3api", "get-object", "--bucket", "smoke", "--key", "mp/obj", "mp.back")
	if got, _ := os.ReadFile(filepath.Join(dir, "mp.back")); !bytes.Equal(got, big[:6<<20]) {
		t.Fatal("s3api multipart object differs")
	}
	if out := r.run(aws, ep, "s3api", "head-object", "--bucket", "smoke", "--key", "mp/obj"); !strings.Contains(out, `-2\"`) {
		t.Fatalf("head-object of a 2-part object:\n%s", out)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestRclone(t *testing.T) {
	rclone := tool(t, "rclone", "rclone")
	s, home := smokeServer(t)
	dir := t.TempDir()
	r := runner{t: t, dir: dir, env: []string{
		"HOME=" + home, "RCLONE_CONFIG=" + filepath.Join(home, "rclone.conf"),
		"RCLONE_CONFIG_CAIRN_TYPE=s3", "RCLONE_CONFIG_CAIRN_PROVIDER=Other",
		"RCLONE_CONFIG_CAIRN_ACCESS_KEY_ID=" + servertest.Root, "RCLONE_CONFIG_CAIRN_SECRET_ACCESS_KEY=" + servertest.RootSecret,
		"RCLONE_CONFIG_CAIRN_ENDPOINT=" + s.S3URL(), "RCLONE_CONFIG_CAIRN_REGION=us-east-1",
	}}
	data := make([]byte, 12<<20)
	rand.Read(data)
	writeTree(t, dir, map[string][]byte{
		"src/one.txt": []byte("one"), "src/d/two.txt": []byte("two"), "src/d/e/big.bin": data, "src/empty.txt": nil,
	})
	r.run(rclone, "mkdir", "cairn:rclone-smoke")
	r.run(rclone, "copy", "src", "cairn:rclone-smoke/copy", "--s3-upload-cutoff", "5M", "--s3-chunk-size", "5M")
	r.run(rclone, "check", "src", "cairn:rclone-smoke/copy")
	// Change the source: sync uploads the new, deletes the gone.
	os.Remove(filepath.Join(dir, "src/one.txt"))
	writeTree(t, dir, map[string][]byte{"src/three.txt": []byte("three"), "src/d/two.txt": []byte("two, changed")})
	r.run(rclone, "sync", "src", "cairn:rclone-smoke/copy")
	r.run(rclone, "check", "src", "cairn:rclone-smoke/copy")
	if out := r.run(rclone, "lsf", "-R", "cairn:rclone-smoke/copy"); strings.Contains(out, "one.txt") || !strings.Contains(out, "three.txt") {
		t.Fatalf("after sync:\n%s", out)
	}
	r.run(rclone, "copy", "cairn:rclone-smoke/copy", "back")
	sameFile(t, filepath.Join(dir, "src/d/e/big.bin"), filepath.Join(dir, "back/d/e/big.bin"))
	r.run(rclone, "purge", "cairn:rclone-smoke/copy")
}

func TestS3FS(t *testing.T) {
	s3fs := tool(t, "s3fs", "s3fs")
	fusermount := tool(t, "fusermount", "fuse3")
	s, home := smokeServer(t)
	c := root(t, s)
	ctx := context.Background()
	must(c.CreateBucket(ctx, bucketInput("fsmount")))
	must(c.PutObject(ctx, putInput("fsmount", "pre/existing.txt", "from s3")))

	pw := filepath.Join(home, "passwd")
	os.WriteFile(pw, []byte(servertest.Root+":"+servertest.RootSecret+"\n"), 0o600)
	mnt := t.TempDir()
	cmd := exec.Command(s3fs, "fsmount", mnt, "-f", "-o", "url="+s.S3URL(), "-o", "use_path_request_style",
		"-o", "passwd_file="+pw, "-o", "endpoint=us-east-1", "-o", "sigv4", "-o", "stat_cache_expire=1", "-o", "dbglevel=warn")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	// Runs after s3fs has exited (cleanups run last first), so errb is
	// still.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("s3fs said:\n%s", errb.String())
		}
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		exec.Command(fusermount, "-u", mnt).Run()
		cmd.Process.Kill() // the s3fs this test started, by its pid
		cmd.Wait()
	})
	var pre []byte
	await.Until(t, 20*time.Second, "the s3fs mount to answer", func() bool {
		var err error
		pre, err = os.ReadFile(filepath.Join(mnt, "pre/existing.txt"))
		return err == nil
	})
	if string(pre) != "from s3" {
		t.Fatalf("read through s3fs: %q", pre)
	}
	data := make([]byte, 3<<20)
	rand.Read(data)
	if err := os.MkdirAll(filepath.Join(mnt, "made/by"), 0o755); err != nil {
		t.Fatalf("mkdir through s3fs: %v", err)
	}
	// chmod and touch of a directory: s3fs copies its marker onto itself
	// with new metadata (as cp -a and rsync -a make it do).
	if err := os.Chmod(filepath.Join(mnt, "made/by"), 0o750); err != nil {
		t.Fatalf("chmod of a directory through s3fs: %v", err)
	}
	if err := os.Chtimes(filepath.Join(mnt, "made"), time.Now(), time.Now().Add(-time.Hour)); err != nil {
		t.Fatalf("touch of a directory through s3fs: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "made/by/s3fs.bin"), data, 0o644); err != nil {
		t.Fatalf("write through s3fs: %v", err)
	}
	if got := getBody(t, c, "fsmount", "made/by/s3fs.bin"); !bytes.Equal(got, data) {
		t.Fatalf("object written through s3fs: %d bytes", len(got))
	}
	// And the native API sees the same file.
	if f, err := s.Client().StatFresh(ctx, "fsmount", "made/by/s3fs.bin"); err != nil || f.Size() != int64(len(data)) {
		t.Fatalf("native view of the s3fs file: %v %v", f, err)
	}
	ents, err := os.ReadDir(filepath.Join(mnt, "made/by"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "s3fs.bin" {
		t.Fatalf("readdir through s3fs: %v %v", ents, err)
	}
	if err := os.Remove(filepath.Join(mnt, "pre/existing.txt")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().StatFresh(ctx, "fsmount", "pre/existing.txt"); err == nil {
		t.Fatal("a file removed through s3fs still exists")
	}
}
