package meta

import (
	"bytes"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestRaftStore: the log keeps what it was given, knows its ends, drops
// either end on DeleteRange, and survives a reopen; the stable store
// answers "not found" the way raft expects.
func TestRaftStore(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := openRaftStore(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := s.FirstIndex(); f != 0 {
		t.Fatalf("empty log: first %d", f)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 100; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: i / 10, Type: raft.LogCommand, Data: []byte{byte(i)}, Extensions: []byte("x"), AppendedAt: time.Unix(0, int64(i))})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 10); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetUint64([]byte("term")); err == nil || err.Error() != "not found" {
		t.Fatalf("missing stable key: %v", err)
	}
	if err := s.SetUint64([]byte("term"), 7); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = openRaftStore(dir, log); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, _ := s.FirstIndex()
	last, _ := s.LastIndex()
	if first != 11 || last != 90 {
		t.Fatalf("ends %d..%d, want 11..90", first, last)
	}
	var l raft.Log
	if err := s.GetLog(5, &l); err != raft.ErrLogNotFound {
		t.Fatalf("deleted entry: %v", err)
	}
	if err := s.GetLog(42, &l); err != nil {
		t.Fatal(err)
	}
	if l.Index != 42 || l.Term != 4 || !bytes.Equal(l.Data, []byte{42}) || string(l.Extensions) != "x" || l.AppendedAt.UnixNano() != 42 {
		t.Fatalf("entry 42 came back as %+v", l)
	}
	if v, err := s.GetUint64([]byte("term")); err != nil || v != 7 {
		t.Fatalf("term: %d %v", v, err)
	}
}

func FuzzDecodeLog(f *testing.F) {
	f.Add(encodeLog(&raft.Log{Index: 1, Term: 2, Data: []byte("abc"), Extensions: []byte("e")}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		var l raft.Log
		if err := decodeLog(9, b, &l); err == nil {
			if again := encodeLog(&l); !bytes.Equal(again, b) && len(l.Data)+len(l.Extensions) > 0 {
				var l2 raft.Log
				if err := decodeLog(9, again, &l2); err != nil || !bytes.Equal(l2.Data, l.Data) {
					t.Fatalf("re-encoded entry does not decode the same")
				}
			}
		}
	})
}
