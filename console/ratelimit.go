package console

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// limits bounds sign-in attempts, so that guessing a secret through the
// console costs time: each client address may try perIP times per window,
// and each access key may fail perKey times per window (whatever the
// addresses, so spreading a guess over many does not help). Past either,
// sign-in answers 429 with Retry-After until the window ends. Windows are
// fixed, counted in memory; a restart forgets them.
type limits struct {
	perIP, perKey int
	window        time.Duration

	mu   sync.Mutex
	ips  map[string]*count
	keys map[string]*count
}

type count struct {
	n     int
	start time.Time
}

func newLimits(perIP, perKey int, window time.Duration) *limits {
	return &limits{perIP: perIP, perKey: perKey, window: window, ips: map[string]*count{}, keys: map[string]*count{}}
}

// hit counts one event against m[k] and returns the count in the window
// and when the window ends. Called with mu held.
func (l *limits) hit(m map[string]*count, k string, now time.Time, add int) (int, time.Time) {
	c := m[k]
	if c == nil || !now.Before(c.start.Add(l.window)) {
		c = &count{start: now}
		m[k] = c
	}
	c.n += add
	return c.n, c.start.Add(l.window)
}

// allow counts an attempt from ip for key and returns how long to wait
// before trying again, or 0 if the attempt may go ahead.
func (l *limits) allow(ip, key string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Every attempt counts against its address, refused ones included.
	if n, end := l.hit(l.ips, ip, now, 1); n > l.perIP {
		return end.Sub(now)
	}
	if n, end := l.hit(l.keys, key, now, 0); n >= l.perKey {
		return end.Sub(now)
	}
	return 0
}

// failed counts a failed sign-in for key.
func (l *limits) failed(key string, now time.Time) {
	l.mu.Lock()
	l.hit(l.keys, key, now, 1)
	l.mu.Unlock()
}

// sweep forgets ended windows.
func (l *limits) sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range []map[string]*count{l.ips, l.keys} {
		for k, c := range m {
			if !now.Before(c.start.Add(l.window)) {
				delete(m, k)
			}
		}
	}
}

// clientIP is the address a request came from (the peer: a proxy in front
// is one client to the console).
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// tooMany answers 429 with Retry-After in whole seconds (at least 1).
func tooMany(w http.ResponseWriter, wait time.Duration) {
	secs := max(int((wait+time.Second-1)/time.Second), 1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeBody(w, http.StatusTooManyRequests, "TooManyRequests", "too many sign-in attempts; try again in "+strconv.Itoa(secs)+"s")
}
