package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pgrouted/pgrouted"
)

// schema is the demo's table. Every write names its writer and a sequence
// number, so that the writer can check it reads its own writes.
const schema = `CREATE TABLE IF NOT EXISTS demo_orders (
	id         bigserial PRIMARY KEY,
	writer     int NOT NULL,
	n          int NOT NULL,
	amount     numeric(10, 2) NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS demo_orders_writer_n ON demo_orders (writer, n)`

// window is a stretch of time during which the demo injects a fault that
// can cut a statement off: a killed replica, a stopped primary. to is zero
// while it is open.
type window struct {
	name     string
	from, to time.Time
}

// maxSamples is how many error messages the summary keeps of each kind.
const maxSamples = 10

// workload runs the demo's statements and counts what happens to them.
//
// What counts as an error: any failed statement, except (1) those of the
// workload's own shutdown and (2) a write or a transaction whose statement
// started or failed inside a fault window (a killed replica that ran a
// read-only transaction, a primary stopped under a write): pgrouted retries
// autocommit reads elsewhere, but it cannot replay a write or a transaction
// that a server took down with it, so the application sees those; the demo
// counts them as interrupted. A *pgrouted.RouteError (no primary within
// pgrouted_write_timeout, ...) is always an error, and so is a failed
// autocommit read, inside a window or not.
type workload struct {
	db     *sql.DB
	events *eventLog
	think  time.Duration // pause between two iterations of a worker

	checks atomic.Uint64 // read-your-writes checks made
	stale  atomic.Uint64 // ... that did not see the caller's write

	mu                sync.Mutex
	windows           []window
	errors            uint64
	errorSamples      []string
	interrupted       uint64
	interruptSamples  []string
	interruptedByName map[string]uint64

	// From OnRoute.
	reads        atomic.Uint64 // successful reads (autocommit and in read-only transactions)
	replicaReads atomic.Uint64 // ... that a replica served
	fo           failoverWatch
}

// failoverWatch follows the writes around the failover, from OnRoute.
type failoverWatch struct {
	mu        sync.Mutex
	from, to  string    // old and new primary
	stoppedAt time.Time // when the old primary was stopped
	lastOld   time.Time // last successful write on the old primary
	firstNew  time.Time // first successful write on the new primary
	newWrites uint64    // successful writes on the new primary
	onFirst   func()    // called once, at the first write on the new primary
}

// waitFirst waits until a write ran on the new primary, at most limit,
// or until ctx ends.
func (f *failoverWatch) waitFirst(ctx context.Context, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline) && ctx.Err() == nil; {
		f.mu.Lock()
		done := f.to == "" || !f.firstNew.IsZero()
		f.mu.Unlock()
		if done {
			return
		}
		sleepUntil(ctx, time.Now().Add(20*time.Millisecond))
	}
}

func newWorkload(db *sql.DB, events *eventLog, think time.Duration) *workload {
	return &workload{db: db, events: events, think: think, interruptedByName: map[string]uint64{}}
}

// onRoute is the Connector's Config.OnRoute: it counts where reads ran and
// watches writes around the failover. It runs on every statement: it takes
// one short lock for writes only.
func (w *workload) onRoute(ev pgrouted.RouteEvent) {
	if tr, ok := ev.Context.Value(traceKey{}).(*trace); ok {
		tr.add(ev)
	}
	if ev.Err != nil {
		return
	}
	switch ev.Op {
	case pgrouted.OpRead:
		w.reads.Add(1)
		if !ev.Primary {
			w.replicaReads.Add(1)
		}
	case pgrouted.OpWrite:
		now := time.Now()
		f := &w.fo
		f.mu.Lock()
		var first func()
		switch {
		case ev.Endpoint == f.from:
			f.lastOld = now
		case f.to != "" && ev.Endpoint == f.to:
			if f.firstNew.IsZero() {
				f.firstNew = now
				first = f.onFirst
			}
			f.newWrites++
		}
		f.mu.Unlock()
		if first != nil {
			first()
		}
	}
}

// traceKey is the context key of a trace.
type traceKey struct{}

// trace keeps the route events of one worker's write and its check, so that
// a stale read says where the write and the read ran and why.
type trace struct {
	mu     sync.Mutex
	events []string
}

// withTrace returns ctx with a new trace, and the trace.
func withTrace(ctx context.Context) (context.Context, *trace) {
	tr := &trace{}
	return context.WithValue(ctx, traceKey{}, tr), tr
}

func (t *trace) add(ev pgrouted.RouteEvent) {
	s := fmt.Sprintf("%s on %s (%s", ev.Op, pr(ev.Endpoint), ev.Reason)
	if ev.Retried {
		s += ", retried"
	}
	if ev.Waited > 0 {
		s += ", waited " + ev.Waited.String()
	}
	if ev.WriteLost {
		s += ", write lost"
	}
	if ev.Err != nil {
		s += ", error: " + oneLine(ev.Err.Error())
	}
	s += ")"
	t.mu.Lock()
	t.events = append(t.events, s)
	t.mu.Unlock()
}

// String lists the events in order.
func (t *trace) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.events, "; ")
}

// openWindow starts a fault window and returns its index.
func (w *workload) openWindow(name string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.windows = append(w.windows, window{name: name, from: time.Now()})
	return len(w.windows) - 1
}

// closeWindow ends window i grace from now: a statement cut by the fault
// may report it a little later.
func (w *workload) closeWindow(i int, grace time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.windows[i].to.IsZero() {
		w.windows[i].to = time.Now().Add(grace)
	}
}

// windowAt returns the name of the latest fault window holding t, or "".
func (w *workload) windowAt(t time.Time) string {
	for i := len(w.windows) - 1; i >= 0; i-- {
		win := w.windows[i]
		if !t.Before(win.from) && (win.to.IsZero() || !t.After(win.to)) {
			return win.name
		}
	}
	return ""
}

// fail records a failed statement of kind ("read", "write", "tx")
// started at started; see workload for what counts.
func (w *workload) fail(ctx context.Context, kind string, started time.Time, err error) {
	if ctx.Err() != nil {
		return // the workload is stopping
	}
	now := time.Now()
	msg := fmt.Sprintf("%s: %s", kind, oneLine(err.Error()))
	var re *pgrouted.RouteError
	w.mu.Lock()
	name := ""
	if kind != "read" && !errors.As(err, &re) {
		if name = w.windowAt(started); name == "" {
			name = w.windowAt(now)
		}
	}
	if name != "" {
		w.interrupted++
		w.interruptedByName[name]++
		if len(w.interruptSamples) < maxSamples {
			w.interruptSamples = append(w.interruptSamples, name+": "+msg)
		}
		w.mu.Unlock()
		return
	}
	w.errors++
	if len(w.errorSamples) < maxSamples {
		w.errorSamples = append(w.errorSamples, msg)
	}
	w.mu.Unlock()
	w.events.add(Event{Source: "demo", Level: "ERROR", Message: msg}, now)
}

// staleRead records a read-your-writes check that missed its write.
func (w *workload) staleRead(what string) {
	w.stale.Add(1)
	w.events.note("demo", "STALE READ: %s", what)
}

// counts returns the error counters.
func (w *workload) counts() (errs, interrupted uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errors, w.interrupted
}

// start runs the workers until ctx ends; wait for them with wg.
func (w *workload) start(ctx context.Context, wg *sync.WaitGroup) {
	run := func(f func(context.Context)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	// Writers that read their own writes back at once, with the
	// Connector's own read-your-writes watermark.
	for i := 1; i <= 2; i++ {
		run(func(ctx context.Context) { w.writer(ctx, i) })
	}
	// Users with a pgrouted.Session each, their token carried from one
	// "request" to the next as a cookie would.
	run(w.sessionUsers)
	// Plain reads.
	for i := 0; i < 2; i++ {
		run(w.reader)
	}
	// Read-only transactions (on a replica) that check a write made just
	// before them, and read-write transactions (on the primary).
	run(w.readOnlyTx)
	run(w.readWriteTx)
}

// pause waits the think time, or less when ctx ends.
func (w *workload) pause(ctx context.Context) {
	t := time.NewTimer(w.think)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// writeSeq is one writer's sequence: n counts attempts, acked the writes
// that returned without an error (a failed one may have committed too).
type writeSeq struct {
	writer     int
	n, acked   int
	lastAckedN int
}

// insert writes row n+1 of s with ctx; it returns whether it was
// acknowledged.
func (w *workload) insert(ctx, stmtCtx context.Context, s *writeSeq) bool {
	s.n++
	started := time.Now()
	_, err := w.db.ExecContext(stmtCtx, "INSERT INTO demo_orders (writer, n, amount) VALUES ($1, $2, $3)",
		s.writer, s.n, float64(rand.IntN(100000))/100)
	if err != nil {
		w.fail(ctx, "write", started, err)
		return false
	}
	s.acked++
	s.lastAckedN = s.n
	return true
}

// check reads s's last acknowledged write back, and counts its writes,
// with stmtCtx; a miss is a stale read.
func (w *workload) check(ctx, stmtCtx context.Context, s *writeSeq, who string) {
	var got int
	started := time.Now()
	err := w.db.QueryRowContext(stmtCtx, "SELECT count(*) FROM demo_orders WHERE writer = $1 AND n = $2", s.writer, s.lastAckedN).Scan(&got)
	if err != nil {
		w.fail(ctx, "read", started, err)
		return
	}
	w.checks.Add(1)
	if got != 1 {
		w.staleRead(fmt.Sprintf("%s did not see its write #%d%s", who, s.lastAckedN, traced(stmtCtx)))
	}
	started = time.Now()
	err = w.db.QueryRowContext(stmtCtx, "SELECT count(*) FROM demo_orders WHERE writer = $1", s.writer).Scan(&got)
	if err != nil {
		w.fail(ctx, "read", started, err)
		return
	}
	w.checks.Add(1)
	if got < s.acked {
		w.staleRead(fmt.Sprintf("%s saw %d of its %d writes%s", who, got, s.acked, traced(stmtCtx)))
	}
}

// traced returns ": " and the route events of ctx's trace, or "".
func traced(ctx context.Context) string {
	if tr, ok := ctx.Value(traceKey{}).(*trace); ok {
		return ": " + tr.String()
	}
	return ""
}

// writer inserts a row and reads it back at once, in autocommit mode.
func (w *workload) writer(ctx context.Context, id int) {
	s := &writeSeq{writer: id}
	for ctx.Err() == nil {
		stmtCtx, _ := withTrace(ctx)
		if w.insert(ctx, stmtCtx, s) {
			w.check(ctx, stmtCtx, s, fmt.Sprintf("writer %d", id))
		}
		w.pause(ctx)
	}
}

// sessionUsers plays 8 users, each with a pgrouted.Session: a user writes,
// and the next "request" restores the Session from its text token (a
// cookie) and must see the write.
func (w *workload) sessionUsers(ctx context.Context) {
	const users = 8
	tokens := make([][]byte, users)
	seqs := make([]*writeSeq, users)
	for u := range seqs {
		seqs[u] = &writeSeq{writer: 100 + u}
	}
	for i := 0; ctx.Err() == nil; i++ {
		u := i % users
		// Request 1: the user writes.
		s := pgrouted.NewSession()
		if err := s.UnmarshalText(tokens[u]); err != nil {
			w.fail(ctx, "read", time.Now(), fmt.Errorf("session token: %w", err))
		}
		tctx, _ := withTrace(ctx)
		ok := w.insert(ctx, pgrouted.WithSession(tctx, s), seqs[u])
		tok, err := s.MarshalText()
		if err != nil {
			w.fail(ctx, "read", time.Now(), fmt.Errorf("session token: %w", err))
		}
		tokens[u] = tok
		// Request 2: another Session, from the token, reads.
		if ok {
			next := pgrouted.NewSession()
			if err := next.UnmarshalText(tok); err != nil {
				w.fail(ctx, "read", time.Now(), fmt.Errorf("session token: %w", err))
			}
			w.check(ctx, pgrouted.WithSession(tctx, next), seqs[u], fmt.Sprintf("user %d", u))
		}
		w.pause(ctx)
	}
}

// reader runs plain reads.
func (w *workload) reader(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		started := time.Now()
		var err error
		if i%2 == 0 {
			var n, maxID int64
			err = w.db.QueryRowContext(ctx, "SELECT count(*), coalesce(max(id), 0) FROM demo_orders").Scan(&n, &maxID)
		} else {
			var rows *sql.Rows
			rows, err = w.db.QueryContext(ctx, "SELECT id, amount FROM demo_orders ORDER BY id DESC LIMIT 20")
			if err == nil {
				for rows.Next() {
				}
				err = errors.Join(rows.Err(), rows.Close())
			}
		}
		if err != nil {
			w.fail(ctx, "read", started, err)
		}
		w.pause(ctx)
	}
}

// readOnlyTx writes a row, then opens a read-only transaction (which runs
// on a replica holding that write) and reads it back there.
func (w *workload) readOnlyTx(ctx context.Context) {
	s := &writeSeq{writer: 200}
	for ctx.Err() == nil {
		if w.insert(ctx, ctx, s) {
			started := time.Now()
			if err := w.readOnlyCheck(ctx, s); err != nil {
				w.fail(ctx, "tx", started, err)
			}
		}
		w.pause(ctx)
	}
}

func (w *workload) readOnlyCheck(ctx context.Context, s *writeSeq) error {
	tx, err := w.db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var got, total int
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM demo_orders WHERE writer = $1 AND n = $2", s.writer, s.lastAckedN).Scan(&got); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM demo_orders").Scan(&total); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	w.checks.Add(1)
	if got != 1 {
		w.staleRead(fmt.Sprintf("read-only transaction did not see write #%d", s.lastAckedN))
	}
	return nil
}

// readWriteTx runs transactions on the primary: insert, lock, update,
// commit; then checks the commit in autocommit mode.
func (w *workload) readWriteTx(ctx context.Context) {
	s := &writeSeq{writer: 300}
	for ctx.Err() == nil {
		s.n++
		started := time.Now()
		if err := w.transfer(ctx, s.writer, s.n); err != nil {
			w.fail(ctx, "tx", started, err)
		} else {
			s.acked++
			s.lastAckedN = s.n
			w.check(ctx, ctx, s, "transaction writer")
		}
		w.pause(ctx)
	}
}

func (w *workload) transfer(ctx context.Context, writer, n int) error {
	tx, err := w.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var id int64
	if err := tx.QueryRowContext(ctx, "INSERT INTO demo_orders (writer, n, amount) VALUES ($1, $2, 0) RETURNING id", writer, n).Scan(&id); err != nil {
		return err
	}
	var amount float64
	if err := tx.QueryRowContext(ctx, "SELECT amount FROM demo_orders WHERE id = $1 FOR UPDATE", id).Scan(&amount); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE demo_orders SET amount = amount + 1 WHERE id = $1", id); err != nil {
		return err
	}
	return tx.Commit()
}

// sleepUntil waits until t, or until ctx is done (its error).
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
