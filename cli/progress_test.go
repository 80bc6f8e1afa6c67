package cli

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"
)

func TestProgressLine(t *testing.T) {
	p := &progress{label: "ns1/big", total: 100 << 20}
	got := p.line(25<<20, 2*time.Second, 100)
	for _, want := range []string{"ns1/big", " 25%", "25MiB/100MiB", "12.5MiB/s", "[============"} {
		if !strings.Contains(got, want) {
			t.Errorf("line %q lacks %q", got, want)
		}
	}
	if len(got) != 99 {
		t.Errorf("line is %d columns, want 99 (width-1, padded to erase)", len(got))
	}
	p = &progress{label: "stdin", total: -1}
	if got := p.line(10<<20, time.Second, 40); !strings.Contains(got, "10MiB 10MiB/s") || strings.Contains(got, "%") {
		t.Errorf("unknown-size line %q", got)
	}
}

func TestProgressOffWithoutTerminal(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, "x", 100<<20)
	io.Copy(io.Discard, p.reader(strings.NewReader("hello")))
	p.Done()
	if buf.Len() != 0 || p.n.Load() != 5 {
		t.Fatalf("progress wrote %q to a non-terminal; counted %d", buf.String(), p.n.Load())
	}
}
