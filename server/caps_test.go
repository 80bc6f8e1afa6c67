package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"cairn/capability"
	"cairn/internal/await"
	"cairn/meta"
	"cairn/pki"
	"cairn/server/servertest"
)

// TestCapKeyRotation: capability keys rotate at meta and reach the data
// server in its heartbeat answers. A capability of the old key is
// accepted while that key is still handed out (the overlap that lets every
// capability live its TTL) and refused once rotations have dropped it.
func TestCapKeyRotation(t *testing.T) {
	s := servertest.Start(t, nil)
	metaDir := filepath.Join(s.DataDir(), "meta")
	ca, err := pki.LoadCA(metaDir)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientConfig(ca.Pool(), nil)}}
	// admin lists the data server's volumes with a capability of key k
	// (a user's client: no certificate, so the capability is what counts).
	admin := func(k capability.Key) (int, string) {
		tok, err := capability.NewKeyring(k).Mint(capability.Admin, capability.AnyVolume, 0, capability.AllKeys, "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequest("GET", "https://"+s.Addr("chunk")+"/admin/volumes", nil)
		req.Header.Set(capability.Header, tok)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(b)
	}
	keys := func() []capability.Key {
		b, err := os.ReadFile(filepath.Join(metaDir, meta.CapKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		var f struct {
			Keys []struct {
				ID     uint32 `json:"id"`
				Secret []byte `json:"secret"`
			} `json:"keys"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatal(err)
		}
		var out []capability.Key
		for _, k := range f.Keys {
			out = append(out, capability.Key{ID: k.ID, Secret: k.Secret})
		}
		return out
	}
	first := keys()
	if len(first) != 1 {
		t.Fatalf("a new store has %d keys", len(first))
	}
	old := first[0]
	if status, body := admin(old); status != 200 {
		t.Fatalf("the first key: %d %s", status, body)
	}
	rogue := capability.NewKey(old.ID) // same id, another secret
	if status, _ := admin(rogue); status != 403 {
		t.Fatalf("a key meta never made: %d", status)
	}

	// One rotation: the new key reaches the data server with the next
	// heartbeat answer; the old one still works (overlap).
	if err := s.Meta().RotateCapKeys(); err != nil {
		t.Fatal(err)
	}
	next := keys()[0]
	await.Until(t, 10*time.Second, "the data server accepts the new key", func() bool {
		status, _ := admin(next)
		return status == 200
	})
	if status, body := admin(old); status != 200 {
		t.Fatalf("the previous key during the overlap: %d %s", status, body)
	}

	// Two more: the old key is no longer handed out, and the data server
	// refuses what it signed once the next answer arrives.
	for range 2 {
		if err := s.Meta().RotateCapKeys(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys() {
		if k.ID == old.ID {
			t.Fatalf("key %d still handed out after three rotations", old.ID)
		}
	}
	await.Until(t, 10*time.Second, "the data server refuses the dropped key", func() bool {
		status, body := admin(old)
		return status == 403 && strings.Contains(body, "Permission")
	})
	if status, body := admin(next); status != 200 {
		t.Fatalf("a key still handed out: %d %s", status, body)
	}
	if _, err := s.Meta().CapKeyring().Check(mintWith(t, old)); err == nil {
		t.Fatal("meta still accepts the dropped key")
	}
}

func mintWith(t *testing.T, k capability.Key) string {
	tok, err := capability.NewKeyring(k).Mint(capability.Read, 1, 1, 1, "ns", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
