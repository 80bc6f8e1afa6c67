package meta

import (
	"sync"

	"github.com/hashicorp/raft"
)

// Entry levels. A member of a version older than write sets (writeset.go)
// cannot read them: it takes a write set for a corrupt command. So a
// leader proposes write sets only while every other member of the latest
// configuration has said it reads them, and entries of commands, which
// every version reads, otherwise: a group can be upgraded one member at a
// time, and moves to write sets once the last member runs this version.
//
// A member says what it reads in the Raft transport's TLS handshake,
// which the leader makes anyway: both ends name raftProtos in ALPN, and a
// connection the leader dials to a member of this version negotiates
// protoWriteSets. An older member names no protocol, and the connection
// negotiates none (Go's TLS accepts a handshake in which only one side
// names protocols; raftProtoBase, which every later version names too,
// keeps two later versions from finding nothing in common). The leader
// notes, per Raft address, what the last connection it dialled there
// negotiated; a member not dialled yet (just added, or down since this
// member leads) counts as one that reads commands only. A member that
// restarts on another version is dialled again, its connections broken,
// and noted anew. What this does not cover is a downgrade: a member
// restarted on an older version while the group used write sets may find
// some in the log it catches up on (proposed before the leader dialled it
// again), as may an older member added to a group that used them.
const (
	protoWriteSets = "cairn-raft/write-sets"
	raftProtoBase  = "cairn-raft"
)

// raftProtos are the ALPN names of the Raft transport, the newest first
// (a Go server picks the first of its own list the client names).
var raftProtos = []string{protoWriteSets, raftProtoBase}

// peerLevels is what the last connection dialled to each Raft address
// negotiated: whether that member reads write sets.
type peerLevels struct {
	mu        sync.Mutex
	writeSets map[raft.ServerAddress]bool
}

func (p *peerLevels) note(addr raft.ServerAddress, writeSets bool) {
	p.mu.Lock()
	if p.writeSets == nil {
		p.writeSets = map[raft.ServerAddress]bool{}
	}
	p.writeSets[addr] = writeSets
	p.mu.Unlock()
}

// writeSetsAgreed reports whether every other member of the latest
// configuration reads write sets, as the last connection this member
// dialled to each says, and there is another member. A member alone (the
// first of a group, before the others join it) logs commands: the members
// that join catch up on what it logged meanwhile (the cluster id, the
// root user, the secrets, join tokens), whatever their version. With a
// pre-write-set binary joining a leader of this version, its 8 entries of
// set-up were write sets the joiners could not read (bench-metagroup.sh
// with the joiners on 9b71b15).
func (g *group) writeSetsAgreed() bool {
	servers := g.r.GetConfiguration().Configuration().Servers
	self := raft.ServerID(g.cfg.ID)
	g.levels.mu.Lock()
	defer g.levels.mu.Unlock()
	for _, m := range servers {
		if m.ID != self && !g.levels.writeSets[m.Address] {
			return false
		}
	}
	return len(servers) > 1
}
