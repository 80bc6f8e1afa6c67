package server_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"cairn/internal/await"
	"cairn/server"
)

// TestMain lets the test binary act as a `cairn server` process for the
// crash test: with CAIRN_CRASH_CHILD set it serves until killed.
func TestMain(m *testing.M) {
	if dir := os.Getenv("CAIRN_CRASH_CHILD"); dir != "" {
		runChild(dir)
		return
	}
	os.Exit(m.Run())
}

func runChild(dir string) {
	cfg := server.Defaults()
	cfg.Data = dir
	cfg.HTTP, cfg.Meta, cfg.Chunk, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "off"
	cfg.S3 = "127.0.0.1:0"
	cfg.RootUser, cfg.RootPassword = testUser, testSecret
	cfg.ExtentSize = 64 << 10
	s, err := server.Start(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(1)
	}
	// Publish the address atomically so the parent never reads half of it.
	tmp := filepath.Join(dir, "url.tmp")
	os.WriteFile(tmp, []byte(s.URL()), 0o644)
	os.Rename(tmp, filepath.Join(dir, "url"))
	select {}
}

type child struct {
	cmd *exec.Cmd
	url string
}

func startChild(t *testing.T, dir string) *child {
	t.Helper()
	os.Remove(filepath.Join(dir, "url"))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CAIRN_CRASH_CHILD="+dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() }) // if it never starts
	var url []byte
	await.Until(t, 30*time.Second, "the child server to start", func() bool {
		b, err := os.ReadFile(filepath.Join(dir, "url"))
		url = b
		return err == nil
	})
	return &child{cmd: cmd, url: string(url)}
}

func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
}

// TestKill9DuringWrites kills the server with SIGKILL in the middle of a
// write and append load, restarts it on the same data, and checks, three
// times over: every acknowledged write reads back byte-exact; a write in
// flight at the kill is either absent or complete, never partial; the log
// being appended to holds exactly the acknowledged appends (plus at most
// the one in flight), in order; and an append after the restart lands at
// the end.
func TestKill9DuringWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test is not short")
	}
	dir := t.TempDir()
	acked := map[string][]byte{}    // path -> content, acknowledged
	inflight := map[string][]byte{} // path -> content, sent when killed
	var logAcked []byte             // acknowledged appends, in order
	var logInflight []byte          // the append in flight at the kill
	for round := range 3 {
		c := startChild(t, dir)
		a := &api{t: t, base: c.url, user: testUser, pass: testSecret}
		if round == 0 {
			a.must(201, "PUT", "/crash", nil)
		} else {
			verifyAfterCrash(t, a, acked, inflight, &logAcked, logInflight)
		}
		clear(inflight)
		logInflight = nil

		ctx, cancel := context.WithCancel(context.Background())
		var mu sync.Mutex
		var wg sync.WaitGroup
		hc := &http.Client{}
		put := func(p string, body []byte) error {
			req, _ := http.NewRequestWithContext(ctx, "PUT", c.url+p, bytes.NewReader(body))
			req.SetBasicAuth(testUser, testSecret)
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					p := fmt.Sprintf("/crash/r%d/w%d/f%d", round, w, i)
					// Sizes from 1 byte to several extents of 64 KiB.
					body := randBytes(1+(i*7919+w*104729)%(200<<10), uint64(round*1e6+w*1e4+i))
					mu.Lock()
					inflight[p] = body
					mu.Unlock()
					err := put(p, body)
					mu.Lock()
					if err == nil {
						acked[p] = body
						delete(inflight, p)
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				rec := []byte(fmt.Sprintf("<round %d record %06d %s>\n", round, i, strings.Repeat("x", i%50)))
				mu.Lock()
				logInflight = rec
				mu.Unlock()
				req, _ := http.NewRequestWithContext(ctx, "POST", c.url+"/crash/app.log?append", bytes.NewReader(rec))
				req.SetBasicAuth(testUser, testSecret)
				resp, err := hc.Do(req)
				if err != nil {
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				if resp.StatusCode == 200 {
					logAcked = append(logAcked, rec...)
					logInflight = nil
				}
				mu.Unlock()
				if resp.StatusCode != 200 {
					return
				}
			}
		}()
		// The kill falls at a different point of the load each round:
		// after more writes were acknowledged in this round than in the
		// last (not after a while: a slow machine would ack none).
		mu.Lock()
		ackedBefore := len(acked)
		mu.Unlock()
		await.Until(t, time.Minute, "writes acknowledged before the kill", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(acked) >= ackedBefore+20+15*round
		})
		c.kill()
		cancel()
		wg.Wait()
		t.Logf("round %d: %d files acknowledged so far, %d in flight at the kill, log %d bytes",
			round, len(acked), len(inflight), len(logAcked))
		if len(acked) == 0 {
			t.Fatal("no write was acknowledged before the kill; the test proves nothing")
		}
	}
	c := startChild(t, dir)
	defer c.kill()
	a := &api{t: t, base: c.url, user: testUser, pass: testSecret}
	verifyAfterCrash(t, a, acked, inflight, &logAcked, logInflight)
}

func verifyAfterCrash(t *testing.T, a *api, acked, inflight map[string][]byte, logAcked *[]byte, logInflight []byte) {
	t.Helper()
	for p, want := range acked {
		code, _, got := a.call("GET", p, nil)
		if code != 200 || !bytes.Equal(got, want) {
			t.Fatalf("acknowledged %s: status %d, %d bytes, want %d bytes", p, code, len(got), len(want))
		}
	}
	for p, want := range inflight {
		code, _, got := a.call("GET", p, nil)
		switch {
		case code == 404:
		case code == 200 && bytes.Equal(got, want):
			acked[p] = want // it landed; later rounds must keep it
		default:
			t.Fatalf("in-flight %s is half-visible: status %d, %d bytes of %d", p, code, len(got), len(want))
		}
	}
	code, _, log := a.call("GET", "/crash/app.log", nil)
	if code == 404 && len(*logAcked) == 0 {
		return
	}
	switch {
	case code != 200:
		t.Fatalf("log: status %d", code)
	case bytes.Equal(log, *logAcked):
	case logInflight != nil && bytes.Equal(log, append(append([]byte(nil), *logAcked...), logInflight...)):
		*logAcked = log
	default:
		t.Fatalf("log after crash: %d bytes, acknowledged %d (+%d in flight); contents differ",
			len(log), len(*logAcked), len(logInflight))
	}
	// An append after the restart lands at the end, never over earlier data.
	rec := []byte("<after restart>\n")
	a.must(200, "POST", "/crash/app.log?append", rec)
	*logAcked = append(*logAcked, rec...)
	_, log = a.must(200, "GET", "/crash/app.log", nil)
	if !bytes.Equal(log, *logAcked) {
		t.Fatalf("append after restart: log is %d bytes, want %d", len(log), len(*logAcked))
	}
}
