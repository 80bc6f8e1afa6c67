package s3_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBoto3 runs testdata/boto3_check.py with Debian's python3-boto3
// (make deps installs it): versioned listing in pages, presigned GETs of
// the current and an older version, signed with SigV4 and with SigV2
// (which also signs each call's Authorization header the V2 way).
func TestBoto3(t *testing.T) {
	// Debian's interpreter is the one python3-boto3 installs into; a
	// python3 earlier in PATH (pyenv, a venv) may not have boto3.
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		py = tool(t, "python3", "python3-boto3")
	} else if testing.Short() {
		t.Skip("an external S3 client: not in the -short tier")
	}
	s, home := smokeServer(t)
	script := must(filepath.Abs("testdata/boto3_check.py"))
	r := runner{t: t, dir: t.TempDir(), env: awsEnv(home)}
	if out := r.run(py, script, s.S3URL(), "boto"); strings.TrimSpace(out) != "OK" {
		t.Fatalf("boto3_check.py: %s", out)
	}
}
