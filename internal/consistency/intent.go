package consistency

import "time"

// Level is what a read on a replica must see.
type Level uint8

// The levels (pgrouted_consistency, WithConsistency).
const (
	// Session: a read sees the writes of its Session, or else of its
	// Connector, made before it.
	Session Level = iota
	// Eventual: a read may run on any replica inside the staleness budget.
	Eventual
	// Global: a read sees every transaction committed on the primary
	// before it began, by any client; a Session's writes are a floor.
	Global
	// Causal: Session's read-your-writes, and monotonic reads and
	// writes-follow-reads within the same scope: each read records an
	// upper bound of what it saw (Scopes.Saw), which the scope's next
	// reads need as they need its writes.
	Causal
)

// Marks reports whether a read at level l needs the marks of its scope
// (its own writes, and under Causal what its reads saw): Session and
// Causal. Global needs them too, as a floor under the primary's position.
func (l Level) Marks() bool { return l == Session || l == Causal }

// Intent is what a statement's context asks of read-your-writes, resolved
// once per statement (or transaction) from the context's options and the
// Connector's configuration, and carried by its plan: no later step walks
// the context again.
type Intent struct {
	// Level is the statement's consistency.
	Level Level
	// Scopes is the read-your-writes state its reads need and its writes
	// raise: the Session's (Session set), else the Connector's.
	Scopes  *Scopes
	Session bool
	// Tracks: its writes move the marks (unless the Connector's and the
	// context's consistency are both eventual: a Session is a floor under
	// global consistency, and a request may select session in a process
	// whose default is eventual).
	Tracks bool
	// Wait is how long a read may wait on a replica for its replay to
	// reach the position (0: no wait).
	Wait time.Duration
	// MaxLag is the context's staleness budget, when HasMaxLag.
	MaxLag    time.Duration
	HasMaxLag bool
	// DryRun: the statement is only planned, never run (Explain): its
	// plan takes nothing that a read would give back (a replica's wait
	// slot).
	DryRun bool
}

// Defers reports whether a write leaves its position to be read when a
// read needs it: without a Session (a Session's writes read it at once,
// so that its token can carry it across processes).
func (in *Intent) Defers() bool { return !in.Session }

// Positioned reports whether a write reads the position after its commit
// at once (pipelined with it where pgx allows).
func (in *Intent) Positioned() bool { return in.Tracks && in.Session }
