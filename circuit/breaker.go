package circuit

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a [Config] field left at its zero value.
const (
	// DefaultFailures is the number of consecutive failures that open a
	// circuit, the default of pgrouted_circuit_failures.
	DefaultFailures = 2
	// DefaultInterval is the probe interval, the default of
	// pgrouted_probe_interval.
	DefaultInterval = time.Second
	// DefaultMaxBackoff is the longest wait between two probes of an open
	// circuit, the default of pgrouted_circuit_max_backoff.
	DefaultMaxBackoff = 30 * time.Second
)

// Config tunes a [Breaker]. The zero value is usable: every zero field takes
// its default.
type Config struct {
	// Failures is the number of consecutive failures, probes and data path
	// counted together, that open the circuit (pgrouted_circuit_failures).
	// 0 means [DefaultFailures].
	Failures int

	// Interval is the normal probe interval (pgrouted_probe_interval): the
	// wait [Breaker.ProbeBackoff] returns while the circuit is closed, and
	// the first wait after it opens. 0 means [DefaultInterval].
	Interval time.Duration

	// MaxBackoff caps the wait between two probes of an open circuit
	// (pgrouted_circuit_max_backoff). It is a cap even when it is shorter
	// than Interval: an open circuit is then probed every MaxBackoff.
	// 0 means [DefaultMaxBackoff].
	MaxBackoff time.Duration

	// Jitter, between 0 and 1, shortens each wait of an open circuit by a
	// random fraction of up to Jitter of it, so that many clients do not
	// probe a recovering server in step: the wait is
	// backoff·(1 − Jitter·r) with r from Rand. 0 (the default) is no
	// jitter. The wait while closed is never jittered.
	Jitter float64

	// Rand returns a number in [0, 1) for the jitter. It is called with
	// the breaker's mutex held, so it need not be safe for concurrent use.
	// nil means math/rand/v2's Float64. Tests inject a fixed sequence.
	Rand func() float64

	// Now reads the clock, for the times in [Snapshot] and [Change]. nil
	// means time.Now. The breaker never sleeps or schedules anything, so
	// a fake clock is all a test needs.
	Now func() time.Time

	// OnChange, when set, is called once for every state change, with no
	// lock of the breaker held, so it may call any method of the breaker.
	// Changes are delivered one at a time and in order, possibly by the
	// goroutine of a later report than the one that caused the change; a
	// report that causes a change may therefore return before OnChange has
	// seen it. OnChange should be quick (a log line, a counter): the
	// goroutine delivering changes is one of the reporters.
	OnChange func(Change)
}

// Change is a state change of a [Breaker], given to [Config].OnChange.
type Change struct {
	// Name is the breaker's name (its endpoint).
	Name string `json:"name"`
	// From and To are the states before and after.
	From State `json:"from"`
	To   State `json:"to"`
	// At is when it changed, by [Config].Now.
	At time.Time `json:"at"`
	// Source is what caused it: [Data] or [Probe] for an opening, always
	// [Probe] for a closing.
	Source Source `json:"source"`
	// Failures is the number of consecutive failures: on opening, the count
	// that reached [Config].Failures; on closing, the failures that the
	// successful probe ended (those that opened it plus the failed probes
	// since).
	Failures int `json:"failures"`
	// Opened is how many times the breaker has opened, this time included.
	Opened uint64 `json:"opened"`
}

// Breaker is the circuit breaker of one endpoint. Create it with [New]; its
// methods are safe for concurrent use.
//
// [Breaker.Allow], [Breaker.State] and [Breaker.ProbeBackoff] are one
// atomic load each, for the routing hot path and the prober. Reports take a mutex, except [Breaker.ReportSuccess]
// on a closed circuit with no failure counted, which is one atomic load.
type Breaker struct {
	name string
	cfg  Config // normalised: no zero field but Jitter, OnChange

	// Read without a lock; written only with mu held.
	state   atomic.Uint32 // State
	fails   atomic.Int64  // consecutive counted failures
	backoff atomic.Int64  // time.Duration: the next wait between probes
	ignored atomic.Uint64 // data-path reports while open

	mu            sync.Mutex
	base          time.Duration // backoff before jitter, while open
	failedProbes  int           // consecutive failed probes since it opened
	opened        uint64
	lastChange    time.Time
	probeFailures uint64
	dataFailures  uint64
	pending       []Change // changes not yet given to OnChange
	delivering    bool     // a goroutine is delivering pending
}

// New returns the closed breaker of the endpoint called name, with cfg's
// zero fields set to their defaults. It fails when a field is out of range.
func New(name string, cfg Config) (*Breaker, error) {
	switch {
	case cfg.Failures < 0:
		return nil, fmt.Errorf("circuit: Failures (%d) must be at least 1, or 0 for the default %d", cfg.Failures, DefaultFailures)
	case cfg.Interval < 0:
		return nil, fmt.Errorf("circuit: Interval (%v) must be positive, or 0 for the default %v", cfg.Interval, DefaultInterval)
	case cfg.MaxBackoff < 0:
		return nil, fmt.Errorf("circuit: MaxBackoff (%v) must be positive, or 0 for the default %v", cfg.MaxBackoff, DefaultMaxBackoff)
	case !(cfg.Jitter >= 0 && cfg.Jitter <= 1): // also rejects NaN
		return nil, fmt.Errorf("circuit: Jitter (%v) must be between 0 and 1", cfg.Jitter)
	}
	if cfg.Failures == 0 {
		cfg.Failures = DefaultFailures
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxBackoff == 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	b := &Breaker{name: name, cfg: cfg}
	b.backoff.Store(int64(cfg.Interval))
	return b, nil
}

// Name returns the name given to [New].
func (b *Breaker) Name() string { return b.name }

// Allow reports whether the endpoint may take data-path traffic: whether
// the circuit is closed. It is one atomic load, without lock or allocation.
func (b *Breaker) Allow() bool { return State(b.state.Load()) == Closed }

// State returns the current state, with one atomic load.
func (b *Breaker) State() State { return State(b.state.Load()) }

// ProbeBackoff returns how long the prober should wait before the next
// probe of the endpoint: [Config].Interval while the circuit is closed;
// while it is open, Interval after the opening, doubled by every failed
// probe since, capped at [Config].MaxBackoff, less the jitter drawn when
// that wait was computed. It is one atomic load.
//
// It reflects the results reported so far: a prober that asks before its
// latest result has been reported gets the wait computed from the previous
// one.
func (b *Breaker) ProbeBackoff() time.Duration { return time.Duration(b.backoff.Load()) }

// ReportProbe reports the result of a probe of the endpoint: err == nil is
// a success (topology.Host.OnProbe can pass its err on as is).
//
// A success closes an open circuit, and on a closed one resets the count
// of consecutive failures. A failure counts towards opening a closed
// circuit and, on an open one, doubles the wait before the next probe (up
// to [Config].MaxBackoff).
//
// Results are taken in the order they are reported: a successful probe
// sent just before data-path failures opened the circuit, and reported
// after, closes it again.
func (b *Breaker) ReportProbe(err error) {
	b.mu.Lock()
	var deliver bool
	if err == nil {
		if State(b.state.Load()) == Open {
			c := b.changeLocked(Open, Closed, Probe)
			b.state.Store(uint32(Closed))
			b.fails.Store(0)
			b.failedProbes = 0
			b.base = 0
			b.backoff.Store(int64(b.cfg.Interval))
			deliver = b.emitLocked(c)
		} else if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
	} else {
		b.probeFailures++
		n := b.fails.Add(1)
		if State(b.state.Load()) == Open {
			b.failedProbes++
			b.base = doubled(b.base, b.cfg.MaxBackoff)
			b.backoff.Store(int64(b.jittered(b.base)))
		} else if n >= int64(b.cfg.Failures) {
			deliver = b.openLocked(Probe)
		}
	}
	b.mu.Unlock()
	if deliver {
		b.deliver()
	}
}

// ReportFailure reports a data-path failure: a connection to the endpoint
// could not be established, was refused or broke. It counts towards opening
// a closed circuit; on an open one it changes nothing (the request was
// routed before the circuit opened) but is counted in
// [Snapshot].IgnoredWhileOpen.
//
// Only failures that say the endpoint is unusable count. Do not report an
// error the server sent about the statement (a syntax error, a unique
// violation, a statement timeout), a standby's recovery-conflict
// cancellation (SQLSTATE 40001, "conflict with recovery": retry the read
// elsewhere, the endpoint is fine), nor anything caused by the caller
// giving up (its context canceled or past its deadline). [Classify] sorts
// the errors it can tell apart with the standard library alone; the caller
// decides the rest (for example with pgconn).
func (b *Breaker) ReportFailure() {
	b.mu.Lock()
	b.dataFailures++
	if State(b.state.Load()) == Open {
		b.ignored.Add(1)
		b.mu.Unlock()
		return
	}
	var deliver bool
	if n := b.fails.Add(1); n >= int64(b.cfg.Failures) {
		deliver = b.openLocked(Data)
	}
	b.mu.Unlock()
	if deliver {
		b.deliver()
	}
}

// ReportSuccess reports a data-path success: a query on the endpoint got
// its answer. On a closed circuit it resets the count of consecutive
// failures; with none counted it is one atomic load. On an open circuit it
// changes nothing (only a probe closes it) but is counted in
// [Snapshot].IgnoredWhileOpen.
func (b *Breaker) ReportSuccess() {
	if b.fails.Load() == 0 {
		return
	}
	if State(b.state.Load()) == Open {
		b.ignored.Add(1)
		return
	}
	b.mu.Lock()
	if State(b.state.Load()) == Open {
		b.ignored.Add(1)
	} else {
		b.fails.Store(0)
	}
	b.mu.Unlock()
}

// openLocked opens the closed circuit. It reports whether the caller must
// call deliver after unlocking.
func (b *Breaker) openLocked(src Source) bool {
	c := b.changeLocked(Closed, Open, src)
	b.opened++
	c.Opened = b.opened
	b.state.Store(uint32(Open))
	b.failedProbes = 0
	b.base = min(b.cfg.Interval, b.cfg.MaxBackoff)
	b.backoff.Store(int64(b.jittered(b.base)))
	return b.emitLocked(c)
}

func (b *Breaker) changeLocked(from, to State, src Source) Change {
	now := b.cfg.Now()
	b.lastChange = now
	return Change{
		Name:     b.name,
		From:     from,
		To:       to,
		At:       now,
		Source:   src,
		Failures: int(b.fails.Load()),
		Opened:   b.opened,
	}
}

// doubled returns 2d capped at limit, without overflow.
func doubled(d, limit time.Duration) time.Duration {
	if d >= limit/2 {
		return limit
	}
	return 2 * d
}

// jittered returns d less the jitter.
func (b *Breaker) jittered(d time.Duration) time.Duration {
	if b.cfg.Jitter == 0 {
		return d
	}
	r := b.cfg.Rand()
	if !(r >= 0 && r < 1) {
		r = 0
	}
	return d - time.Duration(float64(d)*b.cfg.Jitter*r)
}

// emitLocked queues c for OnChange and reports whether the caller must
// deliver the queue once it has unlocked: whether no other goroutine is
// delivering.
func (b *Breaker) emitLocked(c Change) bool {
	if b.cfg.OnChange == nil {
		return false
	}
	b.pending = append(b.pending, c)
	if b.delivering {
		return false
	}
	b.delivering = true
	return true
}

// deliver gives the queued changes to OnChange, in order, without holding
// the lock while OnChange runs, until the queue is empty.
func (b *Breaker) deliver() {
	done := false
	defer func() {
		if !done { // OnChange panicked: let the next change deliver.
			b.mu.Lock()
			b.delivering = false
			b.mu.Unlock()
		}
	}()
	for {
		b.mu.Lock()
		if len(b.pending) == 0 {
			b.pending = nil
			b.delivering = false
			b.mu.Unlock()
			done = true
			return
		}
		c := b.pending[0]
		b.pending[0] = Change{}
		b.pending = b.pending[1:]
		b.mu.Unlock()
		b.cfg.OnChange(c)
	}
}
