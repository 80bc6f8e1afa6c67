package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"

	"cairn/bench"
)

// progressMin is the smallest transfer that gets a progress bar: smaller
// ones finish before a bar would be read.
const progressMin = 4 << 20

// progress draws a one-line bar on a terminal: bytes, percent, rate. It
// redraws at most 10 times a second from its own goroutine, so counting a
// transfer costs one atomic add per read.
type progress struct {
	w     io.Writer // nil: disabled
	label string
	total int64 // -1 unknown
	n     atomic.Int64
	start time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
	drawn bool
}

// newProgress starts a bar on w if w is a terminal; otherwise counting is
// all it does. total -1 means unknown.
func newProgress(w io.Writer, label string, total int64) *progress {
	p := &progress{label: label, total: total, start: time.Now(), stop: make(chan struct{})}
	if !isTerminal(w) || total >= 0 && total <= progressMin {
		return p
	}
	p.w = w
	p.wg.Go(p.loop)
	return p
}

func (p *progress) loop() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.draw()
		}
	}
}

// Done stops the bar, leaving its last state on screen.
func (p *progress) Done() {
	if p.w == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	p.draw()
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}

func (p *progress) add(n int) { p.n.Add(int64(n)) }

func (p *progress) draw() {
	n := p.n.Load()
	if p.total < 0 && n <= progressMin {
		return // an unknown size gets a bar once it is big enough to matter
	}
	p.drawn = true
	fmt.Fprint(p.w, "\r"+p.line(n, time.Since(p.start), termWidth(p.w)))
}

// line renders the bar for n bytes after elapsed, fitting width columns.
func (p *progress) line(n int64, elapsed time.Duration, width int) string {
	rate := ""
	if s := elapsed.Seconds(); s > 0 {
		rate = bench.FormatSize(int64(float64(n)/s)) + "/s"
	}
	var stats string
	if p.total > 0 {
		stats = fmt.Sprintf(" %3d%% %s/%s %s", n*100/p.total, bench.FormatSize(n), bench.FormatSize(p.total), rate)
	} else {
		stats = fmt.Sprintf(" %s %s", bench.FormatSize(n), rate)
	}
	label := p.label
	barWidth := width - len(stats) - len(label) - 4
	if barWidth > 50 {
		barWidth = 50
	}
	bar := ""
	if p.total > 0 && barWidth >= 10 {
		fill := int(int64(barWidth) * min(n, p.total) / p.total)
		bar = " [" + strings.Repeat("=", fill) + strings.Repeat(" ", barWidth-fill) + "]"
	}
	s := label + bar + stats
	if len(s) > width-1 {
		s = s[:max(width-1, 0)]
	}
	return s + strings.Repeat(" ", max(width-1-len(s), 0)) // erase a longer previous line
}

func termWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 20 {
			return cols
		}
	}
	return 80
}

// reader counts what is read through it.
func (p *progress) reader(r io.Reader) io.Reader { return &countingReader{r, p} }

// writer counts what is written through it.
func (p *progress) writer(w io.Writer) io.Writer { return &countingWriter{w, p} }

type countingReader struct {
	r io.Reader
	p *progress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.p.add(n)
	return n, err
}

type countingWriter struct {
	w io.Writer
	p *progress
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.p.add(n)
	return n, err
}
