package meta

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/attributes"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/base"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"

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

// hangCheck is how long a call to the leader goes unanswered before the
// client asks the other members who leads. A leader that stopped, or was
// cut off with its connections open, answers nothing, and a call to it
// would wait for TCP to give up (keepalive: 40 s) while another member
// leads. Once one names another leader, the call is sent there (a call
// that is not retriable fails as Unavailable: its outcome is unknown).
const hangCheck = time.Second

// picked is where the picker notes the member it sent a call's attempt
// to (a context value), for watch.
type picked struct{ addr atomic.Pointer[string] }

type pickedKey struct{}

// watch cancels an attempt once the client learns that a member other
// than the one the attempt went to leads; stop ends the watch and reports
// whether it cancelled the attempt.
func (h *leaderHint) watch(to *picked, cancel context.CancelFunc, ask func(context.Context) (string, error), hang time.Duration) (stop func() bool) {
	var moved atomic.Bool
	done := make(chan struct{})
	t := time.AfterFunc(hang, func() {
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
			if a := to.addr.Load(); a != nil && h.leader != "" && h.leader != *a {
				h.mu.Unlock()
				moved.Store(true)
				cancel()
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
				go h.probe(ask)
			}
			select {
			case <-ch:
			case <-done:
				return
			}
		}
	})
	return func() bool {
		t.Stop()
		close(done)
		return moved.Load()
	}
}

// probe asks the members in turn who leads, every half hangCheck, while
// a call waits for the leader to change; one probe runs per client.
func (h *leaderHint) probe(ask func(context.Context) (string, error)) {
	for {
		h.mu.Lock()
		if h.waiting == 0 {
			h.probing = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), hangCheck/2)
		leader, err := ask(ctx)
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
	if isStale(info.Ctx) || isAnyMember(info.Ctx) { // any member may answer (raft.go StaleOK, raftread.go AnyMember)
		return balancer.PickResult{SubConn: p.scs[int(p.stale.Add(1))%len(p.scs)]}, nil
	}
	leader, rr := "", 0
	if p.hint != nil {
		leader, rr = p.hint.get()
	}
	i := rr % len(p.scs)
	for j, a := range p.addrs {
		if a == leader {
			i = j
			break
		}
	}
	if to, ok := info.Ctx.Value(pickedKey{}).(*picked); ok {
		to.addr.Store(&p.addrs[i])
	}
	return balancer.PickResult{SubConn: p.scs[i]}, nil
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
}

func (c *groupClient) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, inv grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	hint := c.hint
	start, delay := time.Now(), 10*time.Millisecond
	name := opName(method)
	if dedupMethods[name] { // one id for every attempt (dedup.go)
		ctx = metadata.AppendToOutgoingContext(ctx, RequestIDHeader, newRequestID())
	}
	// Who leads, as any member sees it, for watch: sent round robin
	// (AnyMember), past this interceptor.
	ask := func(ctx context.Context) (string, error) {
		r := &metapb.MetaMembersResponse{}
		err := inv(AnyMember(ctx), metapb.Meta_MetaMembers_FullMethodName, &metapb.Empty{}, r, cc)
		return r.Leader, err
	}
	for {
		to := &picked{}
		actx, cancel := context.WithCancel(context.WithValue(ctx, pickedKey{}, to))
		stop := func() bool { return false }
		if c.hangCheck > 0 && !isStale(ctx) && !isAnyMember(ctx) {
			stop = hint.watch(to, cancel, ask, c.hangCheck)
		}
		err := fromStatus(inv(actx, method, req, reply, cc, opts...))
		moved := stop()
		cancel()
		if err == nil {
			return nil
		}
		if moved && ctx.Err() == nil {
			err = errors.E(errors.Op("meta"), errors.Unavailable, "a meta member did not answer and another leads: "+err.Error())
		}
		leader, refused := LeaderOf(err)
		retry := refused || (errors.Is(errors.Unavailable, err) && retriable(name))
		if ctx.Err() != nil && errors.Is(errors.Unavailable, err) {
			// The caller's deadline passed on a member that never
			// answered (cut off, not down): the next call tries
			// another rather than wait on it again.
			hint.follow("")
		}
		if !retry || ctx.Err() != nil || time.Since(start) > failoverWait {
			return err
		}
		if moved {
			delay = 0 // the hint names the member that leads now
		} else {
			hint.follow(leader)
		}
		if refused && (isStale(ctx) || isAnyMember(ctx)) {
			// A follower too far behind or without a leader (or
			// the leader): the leader answers the next attempt at
			// once.
			ctx, delay = notStale(ctx), 0
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
