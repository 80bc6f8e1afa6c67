package meta

import (
	"context"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	"cairn/errors"
	"cairn/proto/metapb"
)

// A client of a meta group dials every member on one gRPC connection
// (Dial with "a,b,c"): the leader balancer sends each call to the member
// last known to lead, and the failover interceptor retries a call a
// member refused as not the leader, on the leader it named. Reads are
// retried on any unavailable member too; a command whose member went away
// mid-call is retried only when it carries a request id (dedup.go): the
// others may have been applied, and the caller decides.
//
// A member may also go silent: stopped, or cut off with its connections
// open, it answers nothing, not even a refusal, and a call to it would
// wait for TCP to give up (keepalive: 40 s). A call unanswered for
// hangCheck is watched: one to the leader is sent again once another
// member leads (watch), and a read any member may answer (StaleOK,
// AnyMember) once the member it went to leaves a probe unanswered too
// (watchRead); that member is then passed by for such reads until it
// answers a probe again (check). A watchdog hands the calls to their
// watches (begin, run).

const leaderBalancer = "cairn_meta_leader"

func init() {
	balancer.Register(base.NewBalancerBuilder(leaderBalancer, leaderPickerBuilder{}, base.Config{HealthCheck: false}))
}

// failoverWait bounds how long a call keeps looking for a leader: longer
// than an election (1-2 s), shorter than a caller's patience.
const failoverWait = 15 * time.Second

// leaderHint is the member a client's calls go to, shared by its
// interceptor (which learns from refusals) and its pickers.
type leaderHint struct {
	mu     sync.Mutex
	leader string // "" unknown: round robin
	rr     int

	// A call that the leader leaves unanswered for hangCheck waits for
	// the leader to change (watch): moved is closed when it does, and
	// while any call waits one loop asks the members who leads (probe).
	moved   chan struct{}
	waiting int
	probing bool

	// Members set aside (watchRead): the picker passes them by for the
	// calls any member may answer until they answer a probe again. nil
	// when none: the picker reads it on every such call.
	aside     atomic.Pointer[map[string]bool]
	checks    map[string]*memberCheck // a probe of each member out
	rechecker bool                    // recheck runs
}

func (h *leaderHint) get() (string, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.leader, h.rr
}

// follow records the leader a refusal named, or ("") moves on to the next
// member.
func (h *leaderHint) follow(leader string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if leader == "" || leader == h.leader {
		h.leader = ""
		h.rr++
		return
	}
	h.leader = leader
	if h.moved != nil {
		close(h.moved)
		h.moved = nil
	}
}

// hangCheck is how long a call goes unanswered before the client looks
// into it. For a call to the leader it asks the members who leads: once
// one names another leader, the call is sent there (a call that is not
// retriable fails as Unavailable: its outcome is unknown). For a read any
// member may answer it probes the member the read went to, allowing it
// hangCheck/2 to answer, and sends the read elsewhere if it does not.
const hangCheck = time.Second

// attempt is one sending of a call, and its context: it tells the picker
// where it may go (pin: that member alone, for a probe; anyMember: any
// member, round robin; else the leader), the picker notes where it sent
// it (addr), and a watch cancels it.
type attempt struct {
	context.Context // the call's, cancelled by cancel
	cancel          context.CancelFunc
	pin             string
	anyMember       bool
	addr            atomic.Pointer[string]
	ms              members

	// Under list.mu: when the attempt started (the watchdog's epoch)
	// and its place among those in flight; done is made when a watch
	// takes the attempt over, and closed when the attempt ends.
	list       *attempts
	epoch      uint64
	prev, next *attempt
	done       chan struct{}
	moved      atomic.Bool // the watch cancelled the attempt: sent elsewhere
}

type attemptKey struct{}

// Value makes the attempt the picker's to find, without a context of its
// own for it.
func (a *attempt) Value(key any) any {
	if _, ok := key.(attemptKey); ok {
		return a
	}
	return a.Context.Value(key)
}

// watch cancels an attempt to the leader once the client learns that a
// member other than the one the attempt went to leads.
func (h *leaderHint) watch(a *attempt) {
	h.mu.Lock()
	h.waiting++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.waiting--
		h.mu.Unlock()
	}()
	for {
		h.mu.Lock()
		if to := a.addr.Load(); to != nil && h.leader != "" && h.leader != *to {
			h.mu.Unlock()
			a.moved.Store(true)
			a.cancel()
			return
		}
		if h.moved == nil {
			h.moved = make(chan struct{})
		}
		ch := h.moved
		start := !h.probing
		h.probing = true
		h.mu.Unlock()
		if start {
			go h.probe(a.ms)
		}
		select {
		case <-ch:
		case <-a.done:
			return
		}
	}
}

// probe asks the members in turn who leads, every half hangCheck, while
// a call waits for the leader to change; one probe runs per client.
func (h *leaderHint) probe(ms members) {
	for {
		h.mu.Lock()
		if h.waiting == 0 {
			h.probing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), hangCheck/2)
		leader, err := ms.leader(ctx)
		hung := ctx.Err() == context.DeadlineExceeded
		cancel()
		h.mu.Lock()
		cur := h.leader
		h.mu.Unlock()
		if err == nil && leader != "" && leader != cur {
			h.follow(leader)
		}
		if !hung { // answered, or refused (the member that hangs cost the timeout)
			t := time.NewTimer(hangCheck / 2)
			<-t.C
		}
	}
}

// watchRead is watch for an attempt any member may answer: the member
// it went to is probed (check). One that answers is slow, not gone, and
// is probed again after hang; one that does not is set aside and the
// attempt cancelled, to be sent to another member.
func (h *leaderHint) watchRead(a *attempt, hang time.Duration) {
	for {
		to := a.addr.Load()
		if to == nil {
			return // not sent yet: no member to blame
		}
		gone, ok := h.check(*to, a.ms, hang/2, a.done)
		if !ok {
			return
		}
		if gone {
			a.moved.Store(true)
			a.cancel()
			return
		}
		t := time.NewTimer(hang)
		select {
		case <-t.C:
		case <-a.done:
			t.Stop()
			return
		}
	}
}

// watchdog hands the attempts unanswered for about hangCheck to a watch.
// One ticker per client, while calls are made, serves every attempt: an
// attempt costs two short critical sections, on one of several lists
// (callers on different CPUs seldom meet), not a timer of its own
// (BenchmarkGroupClientCall).
type watchdog struct {
	lists   [watchdogLists]attempts
	epoch   atomic.Uint64 // ticks so far
	running atomic.Bool   // run's loop is on
}

const watchdogLists = 8

// attempts are attempts in flight, oldest first.
type attempts struct {
	mu         sync.Mutex
	head, tail *attempt
	_          [40]byte // a cache line each
}

// watchdogTicks is the ticks (of hangCheck/4) an attempt waits before
// it is watched: between hangCheck and 1.25 hangCheck.
const watchdogTicks = 5

// begin puts a in flight, starting the watchdog's loop if it is off.
func (c *groupClient) begin(a *attempt) {
	w := &c.wd
	a.list = &w.lists[rand.Uint32()%watchdogLists]
	l := a.list
	l.mu.Lock()
	a.epoch = w.epoch.Load()
	a.prev = l.tail
	if l.tail != nil {
		l.tail.next = a
	} else {
		l.head = a
	}
	l.tail = a
	l.mu.Unlock()
	if !w.running.Load() && w.running.CompareAndSwap(false, true) {
		go c.run()
	}
}

// end takes a out of flight and reports whether a watch cancelled it.
func (c *groupClient) end(a *attempt) bool {
	l := a.list
	l.mu.Lock()
	if a.done == nil {
		l.unlinkLocked(a)
	} else {
		close(a.done) // its watch ends
	}
	l.mu.Unlock()
	return a.moved.Load()
}

func (l *attempts) unlinkLocked(a *attempt) {
	if a.prev != nil {
		a.prev.next = a.next
	} else {
		l.head = a.next
	}
	if a.next != nil {
		a.next.prev = a.prev
	} else {
		l.tail = a.prev
	}
	a.prev, a.next = nil, nil
}

// run ticks every hangCheck/4, handing each attempt that has waited
// watchdogTicks to its watch; it stops after a few ticks with nothing
// in flight.
func (c *groupClient) run() {
	w := &c.wd
	t := time.NewTicker(c.hangCheck / 4)
	defer t.Stop()
	idle := 0
	for range t.C {
		epoch := w.epoch.Add(1)
		var due []*attempt
		empty := true
		for i := range w.lists {
			l := &w.lists[i]
			l.mu.Lock()
			for a := l.head; a != nil && epoch-a.epoch >= watchdogTicks; a = l.head {
				l.unlinkLocked(a)
				a.done = make(chan struct{})
				due = append(due, a)
			}
			empty = empty && l.head == nil
			l.mu.Unlock()
		}
		for _, a := range due {
			if a.anyMember {
				go c.hint.watchRead(a, c.hangCheck)
			} else {
				go c.hint.watch(a)
			}
		}
		if !empty {
			idle = 0
			continue
		}
		if idle++; idle < 2*watchdogTicks {
			continue
		}
		// Off, unless an attempt came in as it went off (its begin saw
		// the loop on).
		w.running.Store(false)
		if w.empty() || !w.running.CompareAndSwap(false, true) {
			return
		}
		idle = 0
	}
}

// empty reports whether no attempt is in flight.
func (w *watchdog) empty() bool {
	for i := range w.lists {
		l := &w.lists[i]
		l.mu.Lock()
		e := l.head == nil
		l.mu.Unlock()
		if !e {
			return false
		}
	}
	return true
}

// memberCheck is a probe of one member: gone reports that it did not
// answer, once done is closed.
type memberCheck struct {
	done chan struct{}
	gone bool
}

// check probes the member at addr (MetaMembers, pinned to it) and
// reports whether it left the probe unanswered for wait: calls that ask
// while a probe of it is out share that one. A member that does not
// answer is set aside, one that does is taken back. ok is false when
// cancel closed first.
func (h *leaderHint) check(addr string, ms members, wait time.Duration, cancel <-chan struct{}) (gone, ok bool) {
	h.mu.Lock()
	c := h.checks[addr]
	if c == nil {
		c = &memberCheck{done: make(chan struct{})}
		if h.checks == nil {
			h.checks = map[string]*memberCheck{}
		}
		h.checks[addr] = c
		go func() {
			ctx, stop := context.WithTimeout(context.Background(), wait)
			err := ms.alive(ctx, addr)
			c.gone = err != nil && ctx.Err() != nil
			stop()
			h.mu.Lock()
			delete(h.checks, addr)
			h.setAsideLocked(addr, c.gone, ms, wait)
			h.mu.Unlock()
			close(c.done)
		}()
	}
	h.mu.Unlock()
	select {
	case <-c.done:
		return c.gone, true
	case <-cancel:
		return false, false
	}
}

// setAsideLocked sets the member at addr aside (gone) or takes it back,
// and starts recheck when it is the first set aside. Called with h.mu
// held.
func (h *leaderHint) setAsideLocked(addr string, gone bool, ms members, wait time.Duration) {
	old := h.aside.Load()
	if old == nil && !gone || old != nil && (*old)[addr] == gone {
		return
	}
	m := map[string]bool{}
	if old != nil {
		for a := range *old {
			m[a] = true
		}
	}
	if gone {
		m[addr] = true
	} else {
		delete(m, addr)
	}
	if len(m) == 0 {
		h.aside.Store(nil)
		return
	}
	h.aside.Store(&m)
	if !h.rechecker {
		h.rechecker = true
		go h.recheck(ms, wait)
	}
}

// recheck probes the members set aside, every hangCheck, until each
// answered (and was taken back); one runs per client. On a closed
// connection the probes fail at once, which takes every member back.
func (h *leaderHint) recheck(ms members, wait time.Duration) {
	for {
		t := time.NewTimer(2 * wait)
		<-t.C
		h.mu.Lock()
		m := h.aside.Load()
		if m == nil {
			h.rechecker = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		for a := range *m {
			h.check(a, ms, wait, nil)
		}
	}
}

// members asks the members of a group's connection, past the failover
// interceptor: who leads (any member), and whether one answers at all.
type members struct {
	inv grpc.UnaryInvoker
	cc  *grpc.ClientConn
}

// leader asks one member, round robin, who leads.
func (ms members) leader(ctx context.Context) (string, error) {
	r := &metapb.MetaMembersResponse{}
	err := ms.inv(AnyMember(ctx), metapb.Meta_MetaMembers_FullMethodName, &metapb.Empty{}, r, ms.cc)
	return r.Leader, err
}

// alive asks the member at addr the same, for an answer of any kind.
func (ms members) alive(ctx context.Context, addr string) error {
	a := &attempt{Context: ctx, pin: addr}
	return ms.inv(a, metapb.Meta_MetaMembers_FullMethodName, &metapb.Empty{}, &metapb.MetaMembersResponse{}, ms.cc)
}

type hintKey struct{}

type leaderPickerBuilder struct{}

func (leaderPickerBuilder) Build(info base.PickerBuildInfo) balancer.Picker {
	p := &leaderPicker{}
	for sc, sci := range info.ReadySCs {
		p.scs = append(p.scs, sc)
		p.addrs = append(p.addrs, sci.Address.Addr)
		if h, ok := sci.Address.BalancerAttributes.Value(hintKey{}).(*leaderHint); ok {
			p.hint = h
		}
	}
	if len(p.scs) == 0 {
		return base.NewErrPicker(balancer.ErrNoSubConnAvailable)
	}
	return p
}

type leaderPicker struct {
	scs   []balancer.SubConn
	addrs []string
	hint  *leaderHint
	stale atomic.Uint32 // round robin of stale-tolerant reads
}

func (p *leaderPicker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	to, _ := info.Ctx.Value(attemptKey{}).(*attempt)
	var i int
	switch {
	case to != nil && to.pin != "":
		if i = slices.Index(p.addrs, to.pin); i < 0 {
			return balancer.PickResult{}, status.Error(codes.Unavailable, "meta member "+to.pin+" is not connected")
		}
	case to != nil && to.anyMember || to == nil && (isStale(info.Ctx) || isAnyMember(info.Ctx)):
		// Any member may answer (raft.go StaleOK, raftread.go AnyMember).
		i = p.anyMember()
	default:
		i = p.leader()
	}
	if to != nil {
		to.addr.Store(&p.addrs[i])
	}
	return balancer.PickResult{SubConn: p.scs[i]}, nil
}

// leader is the member the hint names, or the next round robin.
func (p *leaderPicker) leader() int {
	leader, rr := "", 0
	if p.hint != nil {
		leader, rr = p.hint.get()
	}
	if i := slices.Index(p.addrs, leader); leader != "" && i >= 0 {
		return i
	}
	return rr % len(p.scs)
}

// anyMember is the next member round robin not set aside (any, when
// every member is).
func (p *leaderPicker) anyMember() int {
	n := len(p.scs)
	i := int(p.stale.Add(1) % uint32(n))
	if p.hint == nil {
		return i
	}
	aside := p.hint.aside.Load()
	if aside == nil {
		return i
	}
	for k := range n {
		if j := (i + k) % n; !(*aside)[p.addrs[j]] {
			return j
		}
	}
	return i
}

// groupDialOptions are the options that make one connection reach
// every member of addrs (comma separated) and follow the leader, its calls
// watched after hang unanswered (hangCheck; 0: not watched).
func groupDialOptions(addrs string, hang time.Duration) (target string, opts []grpc.DialOption, err error) {
	c := &groupClient{hint: &leaderHint{}, hangCheck: hang}
	r := manual.NewBuilderWithScheme("cairnmeta")
	var st resolver.State
	for _, a := range strings.Split(addrs, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		host, _, err := net.SplitHostPort(a)
		if err != nil {
			return "", nil, errors.E(errors.Op("meta.Dial"), errors.Invalid, errors.Path(a), err)
		}
		st.Addresses = append(st.Addresses, resolver.Address{
			Addr: a, ServerName: host,
			BalancerAttributes: attributes.New(hintKey{}, c.hint),
		})
	}
	if len(st.Addresses) == 0 {
		return "", nil, errors.E(errors.Op("meta.Dial"), errors.Invalid, "no meta address")
	}
	r.InitialState(st)
	return "cairnmeta:///group", []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"` + leaderBalancer + `":{}}]}`),
		grpc.WithChainUnaryInterceptor(c.unary),
	}, nil
}

// groupClient is the client side of a group's connection: the hint its
// picker follows and the interceptor that sends a call again where it
// can be answered.
type groupClient struct {
	hint      *leaderHint
	hangCheck time.Duration // see hangCheck; 0: calls are not watched
	wd        watchdog
}

func (c *groupClient) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	hint := c.hint
	start, delay := time.Now(), 10*time.Millisecond
	name := opName(method)
	if dedupMethods[name] { // one id for every attempt (dedup.go)
		ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, newRequestID())
	}
	anyMember := isStale(ctx) || isAnyMember(ctx)
	if anyMember && !staleReads[name] {
		// Only those reads may be answered by any member (memberGate):
		// the others go to the leader, and are watched as its calls.
		ctx, anyMember = notStale(ctx), false
	}
	ms := members{inv, cc}
	for {
		a := &attempt{anyMember: anyMember, ms: ms}
		a.Context, a.cancel = context.WithCancel(ctx)
		if c.hangCheck > 0 {
			c.begin(a)
		}
		err := fromStatus(inv(a, method, req, reply, cc, opts...))
		moved := c.hangCheck > 0 && c.end(a) // a watch cancelled the attempt: sent elsewhere
		a.cancel()
		if err == nil {
			return nil
		}
		if moved && ctx.Err() == nil {
			why := "a meta member did not answer and another leads: "
			if anyMember {
				why = "a meta member answered neither the call nor a probe: "
			}
			err = errors.E(errors.Op("meta"), errors.Unavailable, why+err.Error())
		}
		leader, refused := LeaderOf(err)
		retry := refused || (errors.Is(errors.Unavailable, err) && retriable(name))
		if ctx.Err() != nil && errors.Is(errors.Unavailable, err) && !anyMember {
			// The caller's deadline passed on a member that never
			// answered (cut off, not down): the next call tries
			// another rather than wait on it again.
			hint.follow("")
		}
		if !retry || ctx.Err() != nil || time.Since(start) > failoverWait {
			return err
		}
		switch {
		case moved:
			delay = 0 // the hint names the member that leads now, or the member is set aside
		case refused || !anyMember:
			hint.follow(leader)
		}
		if refused && anyMember {
			// A follower too far behind or without a leader (or
			// the leader): the leader answers the next attempt at
			// once.
			ctx, anyMember, delay = notStale(ctx), false, 0
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(max(2*delay, 10*time.Millisecond), 500*time.Millisecond)
	}
}

// isStale reports whether an outgoing call is marked StaleOK.
func isStale(ctx context.Context) bool {
	md, _ := metadata.FromOutgoingContext(ctx)
	v := md.Get(StaleOKHeader)
	return len(v) > 0 && v[0] == "1"
}

// notStale is ctx without the StaleOK and AnyMember marks: the call goes
// to the leader.
func notStale(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	md = md.Copy()
	md.Delete(StaleOKHeader)
	md.Delete(AnyMemberHeader)
	return metadata.NewOutgoingContext(ctx, md)
}

// retriable reports whether a call may be sent again after a member went
// away mid-call: reads, the heartbeat (soft state, sent every second
// anyway), and the commands that carry a request id (applied once however
// often they are sent).
func retriable(method string) bool {
	return readMethods[method] || moreReads[method] || dedupMethods[method]
}

var moreReads = map[string]bool{
	"ListNamespaces": true, "Info": true, "Volumes": true, "Heartbeat": true, "Authenticate": true,
	"ClusterStatus": true, "S3ListUsers": true, "S3ListKeys": true, "S3GetSecret": true, "MetaMembers": true,
	"TierGetPolicy": true, "TierStatus": true,
}
