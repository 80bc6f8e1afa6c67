package console_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"cairn/client"
	"cairn/internal/await"
	"cairn/proto/metapb"
	"cairn/server/servertest"
)

// signedIn opens the console at base+hash in a new browser, signs in as
// root and waits for the page to satisfy ready.
func signedIn(t *testing.T, base, hash, ready string) context.Context {
	t.Helper()
	ctx := chrome(t)
	run(t, ctx, "sign in", chromedp.Navigate(base+"/"+hash), waitJS(`!document.getElementById("signin").hidden`),
		chromedp.SendKeys("#si-key", servertest.Root, chromedp.ByID), chromedp.SendKeys("#si-secret", servertest.RootSecret, chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`), waitJS(ready))
	return ctx
}

// emptyDir is the files page of an empty directory, loaded.
const emptyDir = `!!document.querySelector("#more") && document.querySelector("#more").textContent.includes("0 items")`

// TestBrowserFolderUpload: a folder chosen with "Upload folder" is
// uploaded whole with its tree, and files dropped on the page (many at
// once) are uploaded.
//
// The drop is a DragEvent built in the page around real File objects:
// headless Chromium does not fire drop for drags sent over the DevTools
// protocol (Input.dispatchDragEvent stops at dragover), so the walk of a
// dropped folder's entries is not reached by this test.
func TestBrowserFolderUpload(t *testing.T) {
	s := startServer(t)
	cl := s.Client()
	if _, err := cl.CreateNamespace(t.Context(), "drop", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "album")
	want := map[string]string{"album/a.txt": "first", "album/sub/b.txt": "second, deeper", "album/sub/deep/c.bin": "third"}
	for p, body := range want {
		full := filepath.Join(filepath.Dir(src), p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := signedIn(t, s.ConsoleURL(), "#/files/drop", emptyDir)
	run(t, ctx, "choose folder", chromedp.SetUploadFiles("#dir-input", []string{src}, chromedp.ByID),
		waitJS(`document.querySelectorAll('#upload-list li[data-state="done"]').length === 3`),
		chromedp.WaitVisible(`tr[data-name="album"]`))
	run(t, ctx, "drop files", chromedp.Evaluate(`(() => {
		const dt = new DataTransfer();
		for (let i = 0; i < 5; i++) dt.items.add(new File(["dropped " + i], "dropped-" + i + ".txt", {type: "text/plain"}));
		document.body.dispatchEvent(new DragEvent("dragover", {dataTransfer: dt, bubbles: true, cancelable: true}));
		document.body.dispatchEvent(new DragEvent("drop", {dataTransfer: dt, bubbles: true, cancelable: true}));
		return true; })()`, nil),
		waitJS(`document.querySelectorAll('#upload-list li[data-state="done"]').length === 8`),
		chromedp.WaitVisible(`tr[data-name="dropped-4.txt"]`))
	for i := range 5 {
		want[fmt.Sprintf("dropped-%d.txt", i)] = fmt.Sprintf("dropped %d", i)
	}
	for p, body := range want {
		f, err := cl.Stat(t.Context(), "drop", p)
		if err != nil {
			t.Fatalf("%s after the upload: %v", p, err)
		}
		got, err := cl.ReadAll(t.Context(), f)
		if err != nil || !bytes.Equal(got, []byte(body)) {
			t.Fatalf("%s: %q, %v", p, got, err)
		}
	}
}

// gate is a loopback proxy in front of the console that holds the upload
// parts after the first: their requests wait, unsent, until release. It
// keeps the request lines it passed. An upload can so be caught midway on
// cue, with no timing involved.
type gate struct {
	backend  string
	l        net.Listener
	holding  atomic.Bool
	released chan struct{}
	once     sync.Once

	mu    sync.Mutex
	lines []string
}

var requestLine = regexp.MustCompile(`(GET|HEAD|PUT|POST|DELETE) (\S+) HTTP/1\.1\r\n`)
var partOf = regexp.MustCompile(`[?&]part=(\d+)`)

func newGate(t *testing.T, backend string) *gate {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{backend: backend, l: l, released: make(chan struct{})}
	g.holding.Store(true)
	t.Cleanup(g.release)
	serveConns(t, l, g.serve)
	return g
}

func (g *gate) url() string { return "http://" + g.l.Addr().String() }

// release lets held requests and every later one through.
func (g *gate) release() {
	g.once.Do(func() { g.holding.Store(false); close(g.released) })
}

func (g *gate) saw(re string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range g.lines {
		if ok, _ := regexp.MatchString(re, l); ok {
			return true
		}
	}
	return false
}

func (g *gate) serve(c net.Conn) {
	defer c.Close()
	b, err := net.Dial("tcp", g.backend)
	if err != nil {
		return
	}
	defer b.Close()
	go func() { io.Copy(c, b); c.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			for _, m := range requestLine.FindAllSubmatch(buf[:n], -1) {
				line := string(m[1]) + " " + string(m[2])
				g.mu.Lock()
				g.lines = append(g.lines, line)
				g.mu.Unlock()
				if p := partOf.FindStringSubmatch(line); p != nil && p[1] != "1" && string(m[1]) == "PUT" && g.holding.Load() {
					<-g.released
				}
			}
			if _, err := b.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// bigFile writes n random bytes to a file named name and returns its path
// and digest.
func bigFile(t *testing.T, name string, n int) (string, [32]byte) {
	data := make([]byte, n)
	rand.Read(data)
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p, sha256.Sum256(data)
}

// uploadID is the id of the parted upload the page keeps for file name.
func uploadID(t *testing.T, ctx context.Context, name string) string {
	var id string
	run(t, ctx, "upload id", waitJS(`Object.keys(localStorage).some((k) => k.includes("/`+name+`:"))`),
		chromedp.Evaluate(`localStorage.getItem(Object.keys(localStorage).find((k) => k.includes("/`+name+`:")))`, &id))
	return id
}

// TestBrowserUploadCancelAndResume: a parted upload cancelled midway
// stores nothing and is aborted on the server; one cut short by a page
// reload resumes, when the same file is chosen again, with the parts
// already stored, and completes whole.
func TestBrowserUploadCancelAndResume(t *testing.T) {
	s := startServer(t)
	cl := s.Client()
	if _, err := cl.CreateNamespace(t.Context(), "ups", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	api := newBrowser(t, s.ConsoleURL()) // the test's own look at the uploads
	api.signIn(servertest.Root, servertest.RootSecret)
	const size = 40 << 20 // five parts of 8 MiB

	// Cancel: part 1 goes through, the others are held; cancel then.
	g := newGate(t, strings.TrimPrefix(s.ConsoleURL(), "http://"))
	ctx := signedIn(t, g.url(), "#/files/ups", emptyDir)
	file, _ := bigFile(t, "cancel.bin", size)
	run(t, ctx, "start", chromedp.SetUploadFiles("#file-input", []string{file}, chromedp.ByID))
	id := uploadID(t, ctx, "cancel.bin")
	run(t, ctx, "held", waitJS(`document.querySelector('#upload-list li[data-path="cancel.bin"]').dataset.state === "uploading"`))
	run(t, ctx, "cancel", chromedp.Click(`#upload-list li[data-path="cancel.bin"] button`),
		waitJS(`document.querySelector('#upload-list li[data-path="cancel.bin"]').dataset.state === "cancelled"`),
		waitJS(`!Object.keys(localStorage).some((k) => k.includes("/cancel.bin:"))`))
	g.release()
	await.Until(t, 30*time.Second, "the page's abort of the upload", func() bool { return g.saw(`^DELETE /api/uploads/ups/cancel\.bin\?id=`) })
	// The server forgot the upload, and no file appeared.
	api.json("GET", "/api/uploads/ups/cancel.bin?id="+id, nil, 404)
	if _, err := cl.Stat(t.Context(), "ups", "cancel.bin"); err == nil {
		t.Fatal("a cancelled upload left a file")
	}

	// Resume: part 1 is stored, the rest held; the page reloads (the
	// parts in flight are lost), the gate opens, the same file is chosen.
	g2 := newGate(t, strings.TrimPrefix(s.ConsoleURL(), "http://"))
	ctx2 := signedIn(t, g2.url(), "#/files/ups", `!!document.querySelector("#more")`)
	file2, sum := bigFile(t, "resume.bin", size)
	run(t, ctx2, "start", chromedp.SetUploadFiles("#file-input", []string{file2}, chromedp.ByID))
	id2 := uploadID(t, ctx2, "resume.bin")
	stored := func() int {
		r := api.json("GET", "/api/uploads/ups/resume.bin?id="+id2, nil, 200)
		parts, _ := r["parts"].([]any)
		return len(parts)
	}
	await.Until(t, time.Minute, "part 1 stored", func() bool { return stored() >= 1 })
	run(t, ctx2, "reload", chromedp.Reload(), waitJS(`!!document.querySelector("#more")`))
	g2.release()
	run(t, ctx2, "watch status", chromedp.Evaluate(`window.__stat = [];
		new MutationObserver(() => { for (const s of document.querySelectorAll("#upload-list .ustat")) window.__stat.push(s.textContent); })
		  .observe(document.getElementById("upload-list"), {subtree: true, childList: true, characterData: true}); true`, nil),
		chromedp.SetUploadFiles("#file-input", []string{file2}, chromedp.ByID),
		waitUpload(`(document.querySelector('#upload-list li[data-path="resume.bin"]') || {dataset: {}}).dataset.state === "done"`))
	var stats []string
	run(t, ctx2, "status seen", chromedp.Evaluate(`window.__stat`, &stats))
	resumed := ""
	for _, st := range stats {
		if strings.HasPrefix(st, "resuming: ") {
			resumed = st
		}
	}
	if resumed != "resuming: 1 of 5 parts already stored" {
		t.Fatalf("after the reload the upload did not resume from the stored part: %q", stats)
	}
	f, err := cl.Stat(t.Context(), "ups", "resume.bin")
	if err != nil {
		t.Fatal(err)
	}
	got, err := cl.ReadAll(t.Context(), f)
	if err != nil || sha256.Sum256(got) != sum {
		t.Fatalf("resumed upload differs (%v, %d bytes)", err, len(got))
	}
	t.Logf("resumed: %q; %d bytes whole", resumed, len(got))
}

// wav is a second of a 440 Hz tone, 8 kHz 16-bit mono PCM.
func wav() []byte {
	const rate, n = 8000, 8000
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	w(uint32(36 + 2*n))
	b.WriteString("WAVEfmt ")
	w(uint32(16))
	w(uint16(1))
	w(uint16(1))
	w(uint32(rate))
	w(uint32(2 * rate))
	w(uint16(2))
	w(uint16(16))
	b.WriteString("data")
	w(uint32(2 * n))
	for i := range n {
		w(int16(8000 * math.Sin(2*math.Pi*440*float64(i)/rate)))
	}
	return b.Bytes()
}

// pdf is a one-page PDF with a line of text, its xref table computed.
func pdf() []byte {
	objs := []string{
		"<< /Type /Catalog /Pages 2 0 R >>",
		"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
		"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 144] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
		"<< /Length 44 >>\nstream\nBT /F1 24 Tf 40 60 Td (Hello, Cairn) Tj ET\nendstream",
		"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
	}
	var b bytes.Buffer
	b.WriteString("%PDF-1.4\n")
	offs := make([]int, len(objs))
	for i, o := range objs {
		offs[i] = b.Len()
		fmt.Fprintf(&b, "%d 0 obj\n%s\nendobj\n", i+1, o)
	}
	xref := b.Len()
	fmt.Fprintf(&b, "xref\n0 %d\n0000000000 65535 f \n", len(objs)+1)
	for _, o := range offs {
		fmt.Fprintf(&b, "%010d 00000 n \n", o)
	}
	fmt.Fprintf(&b, "trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n", len(objs)+1, xref)
	return b.Bytes()
}

// TestBrowserPreviews: the details panel previews audio and video in media
// elements that stream with Range requests (206), and a PDF in a frame the
// browser's viewer shows (served inline as application/pdf).
func TestBrowserPreviews(t *testing.T) {
	s := startServer(t)
	cl := s.Client()
	if _, err := cl.CreateNamespace(t.Context(), "media", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	tone := wav()
	for p, f := range map[string]struct {
		body []byte
		ct   string
	}{"tone.wav": {tone, "audio/wav"}, "clip.webm": {tone, "video/webm"}, "doc.pdf": {pdf(), "application/pdf"}} {
		if _, err := cl.Put(t.Context(), "media", p, bytes.NewReader(f.body), client.PutOptions{ContentType: f.ct}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := signedIn(t, s.ConsoleURL(), "#/files/media", `!!document.querySelector('tr[data-name="tone.wav"]')`)
	type seen struct {
		status  int64
		ct, cd  string
		isRange bool
	}
	var mu sync.Mutex
	reqs := map[network.RequestID]string{}
	ranges := map[network.RequestID]bool{}
	got := map[string][]seen{} // path -> responses
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			reqs[e.RequestID] = e.Request.URL
			_, ranges[e.RequestID] = e.Request.Headers["Range"]
		case *network.EventResponseReceived:
			u := e.Response.URL
			if i := strings.Index(u, "/api/fs/media/"); i >= 0 {
				p := strings.TrimPrefix(u[i:], "/api/fs/media/")
				str := func(k string) string { v, _ := e.Response.Headers[k].(string); return v }
				got[p] = append(got[p], seen{status: e.Response.Status, ct: str("Content-Type"), cd: str("Content-Disposition"), isRange: ranges[e.RequestID]})
			}
		}
	})
	run(t, ctx, "network", network.Enable())
	responses := func(p string) []seen { mu.Lock(); defer mu.Unlock(); return append([]seen(nil), got[p]...) }
	open := func(name string) {
		run(t, ctx, "open "+name, chromedp.Click(`tr[data-name="`+name+`"] a.name`), chromedp.WaitVisible("#preview", chromedp.ByID))
	}
	closeP := func() {
		run(t, ctx, "close", chromedp.Click(`#details button[aria-label="Close details"]`), waitJS(`!document.querySelector("#details")`))
	}
	// Audio: metadata and the whole second of sound, streamed by range.
	open("tone.wav")
	var dur float64
	run(t, ctx, "audio", waitJS(`(() => { const a = document.querySelector("#preview audio"); return !!a && a.readyState >= 1; })()`),
		chromedp.Evaluate(`document.querySelector("#preview audio").duration`, &dur))
	if math.Abs(dur-1) > 0.01 {
		t.Fatalf("audio preview: duration %v, want 1 s", dur)
	}
	checkRanged := func(p string) {
		t.Helper()
		for _, r := range responses(p) {
			if r.isRange && r.status == 206 {
				return
			}
		}
		t.Fatalf("%s: no Range request answered 206: %+v", p, responses(p))
	}
	checkRanged("tone.wav")
	closeP()
	// Video: the element asks by range (the bytes are sound, so no frame).
	open("clip.webm")
	run(t, ctx, "video", waitJS(`!!document.querySelector("#preview video")`))
	await.Until(t, 30*time.Second, "the video fetched", func() bool { return len(responses("clip.webm")) > 0 })
	checkRanged("clip.webm")
	closeP()
	// PDF: an inline application/pdf answer in the frame.
	open("doc.pdf")
	run(t, ctx, "pdf", waitJS(`!!document.querySelector("#preview iframe")`))
	await.Until(t, 30*time.Second, "the pdf fetched", func() bool { return len(responses("doc.pdf")) > 0 })
	r := responses("doc.pdf")[0]
	if r.status != 200 || r.ct != "application/pdf" || strings.HasPrefix(r.cd, "attachment") {
		t.Fatalf("pdf preview answered %+v: not an inline PDF", r)
	}
	t.Logf("audio %.2f s by range; video by range; pdf %+v", dur, r)
}

// TestBrowserSortAndKeys: the list sorts by each column both ways (its
// header says which), and the keyboard works it: arrows move between rows,
// "/" goes to the filter, F2 renames, Delete asks before deleting, Escape
// closes.
func TestBrowserSortAndKeys(t *testing.T) {
	s := startServer(t)
	cl := s.Client()
	if _, err := cl.CreateNamespace(t.Context(), "sorted", servertest.Root, metapb.Visibility_PRIVATE); err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name string
		size int
	}{{"a.txt", 300}, {"b.txt", 100}, {"c.txt", 200}} {
		if _, err := cl.Put(t.Context(), "sorted", f.name, strings.NewReader(strings.Repeat("x", f.size)), client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := signedIn(t, s.ConsoleURL(), "#/files/sorted", `document.querySelector("#list") && document.querySelector("#list").dataset.loaded === "3"`)
	order := func() string {
		var names []string
		run(t, ctx, "order", chromedp.Evaluate(`[...document.querySelectorAll("#rows tr")].map((r) => r.dataset.name)`, &names))
		return strings.Join(names, ",")
	}
	sortBy := func(key, wantSort, want string) {
		t.Helper()
		var aria string
		run(t, ctx, "sort "+key, chromedp.Click(`th[data-key="`+key+`"] button`),
			chromedp.AttributeValue(`th[data-key="`+key+`"]`, "aria-sort", &aria, nil))
		if got := order(); got != want || aria != wantSort {
			t.Fatalf("sort by %s: %s (aria-sort %s), want %s (%s)", key, got, aria, want, wantSort)
		}
	}
	sortBy("size", "ascending", "b.txt,c.txt,a.txt")
	sortBy("size", "descending", "a.txt,c.txt,b.txt")
	sortBy("name", "ascending", "a.txt,b.txt,c.txt")
	sortBy("name", "descending", "c.txt,b.txt,a.txt")
	sortBy("name", "ascending", "a.txt,b.txt,c.txt")

	focused := func() string {
		var s string
		run(t, ctx, "focus", chromedp.Evaluate(`(() => { const a = document.activeElement; const tr = a && a.closest("tr"); return a.id || (tr && tr.dataset.name) || a.tagName; })()`, &s))
		return s
	}
	run(t, ctx, "focus first", chromedp.Focus(`tr[data-name="a.txt"] a.name`))
	run(t, ctx, "down", chromedp.KeyEvent(kb.ArrowDown))
	run(t, ctx, "down", chromedp.KeyEvent(kb.ArrowDown))
	if f := focused(); f != "c.txt" {
		t.Fatalf("two arrows down from a.txt: focus on %s", f)
	}
	run(t, ctx, "up", chromedp.KeyEvent(kb.ArrowUp))
	if f := focused(); f != "b.txt" {
		t.Fatalf("arrow up: focus on %s", f)
	}
	run(t, ctx, "F2", chromedp.KeyEvent(kb.F2), waitJS(`document.getElementById("ask").open`))
	var val string
	run(t, ctx, "rename dialog", chromedp.Value("#ask-input", &val, chromedp.ByID))
	if val != "b.txt" {
		t.Fatalf("F2 on b.txt opened a rename of %q", val)
	}
	run(t, ctx, "escape", chromedp.KeyEvent(kb.Escape), waitJS(`!document.getElementById("ask").open`))
	run(t, ctx, "delete key", chromedp.Focus(`tr[data-name="c.txt"] a.name`), chromedp.KeyEvent(kb.Delete),
		waitJS(`document.getElementById("ask").open && document.getElementById("ask-title").textContent === "Delete c.txt?"`),
		chromedp.KeyEvent(kb.Escape), waitJS(`!document.getElementById("ask").open`))
	if _, err := cl.Stat(t.Context(), "sorted", "c.txt"); err != nil {
		t.Fatalf("Escape on the delete dialog deleted: %v", err)
	}
	run(t, ctx, "slash", chromedp.Focus(`tr[data-name="a.txt"] a.name`), chromedp.KeyEvent("/"))
	if f := focused(); f != "search" {
		t.Fatalf(`"/" put the focus on %s, not the filter`, f)
	}
	run(t, ctx, "filter", chromedp.KeyEvent("b"), waitJS(`document.querySelector("#list").dataset.loaded === "1"`))
	if got := order(); got != "b.txt" {
		t.Fatalf("filter b: %s", got)
	}
}
