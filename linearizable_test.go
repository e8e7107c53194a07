//go:build unix

package pgrouted_test

// Jepsen-style checking of the consistency levels: clients in three
// processes (this one and two execs of the test binary), each sequential,
// write unique values to a few keys and read them, under a random schedule
// of faults; every call and return is recorded with a clock all processes
// share, and the history is checked: for linearizability (porcupine, a
// register per key) and for the guarantees of a Session (a checker of its
// own). See docs/testing.md ("Consistency under faults").

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"golang.org/x/sys/unix"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/internal/testhelp"
)

// The workload's shape: linProcs processes, each with linWriters writers
// (each writes one key of its own, and reads), linReaders readers and, in
// the helper processes, linTokenReaders clients that read with the Sessions
// the main process's writers hand them.
const (
	linProcs        = 3
	linWriters      = 2
	linReaders      = 2
	linTokenReaders = 2
	linClients      = linWriters + linReaders + linTokenReaders // client ids per process
	linKeys         = linProcs * linWriters
)

// linHelperEnv, set in the environment of an exec of this test binary,
// makes it a workload process (linHelper) instead of a test run: its value
// is the process's linSpec as JSON. The check is in init, before TestMain
// starts a cluster the helper does not need.
const linHelperEnv = "PGROUTED_TEST_LINEARIZABLE"

func init() {
	if os.Getenv(linHelperEnv) != "" {
		os.Exit(linHelper())
	}
}

// monoNow is the clock every process of the test shares: CLOCK_MONOTONIC,
// which is system-wide on Linux (time.Now's monotonic reading is relative
// to the process's start).
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// linSpec is what a workload process is told.
type linSpec struct {
	DSN  string `json:"dsn"`
	Proc int    `json:"proc"`
	Seed uint64 `json:"seed"`
}

// linOp is one operation of the history: a call and its return.
type linOp struct {
	Client int `json:"c"` // unique among every process's clients
	// Session is the id of the Session the operation ran with (the id
	// of the client that owns it), whose guarantees apply to it.
	Session int `json:"s"`
	// AsOf, for a read with a Session restored from a token, is when the
	// token was taken: the Session's writes acknowledged before it count.
	AsOf   int64 `json:"a,omitempty"`
	Key    int   `json:"k"`
	Write  bool  `json:"w,omitempty"`
	Value  int64 `json:"v"` // written, or read
	Call   int64 `json:"call"`
	Return int64 `json:"ret"`
	// OK is false for a write that failed: its outcome is unknown.
	OK bool `json:"ok,omitempty"`
	// Where a read ran, as OnRoute reported it.
	Routed   bool   `json:"r,omitempty"`
	Replica  bool   `json:"rep,omitempty"`
	Endpoint string `json:"e,omitempty"`
	Reason   string `json:"why,omitempty"` // of a read on the primary
}

// linResult is what a workload process reports when it stops.
type linResult struct {
	Ops           []linOp        `json:"ops"`
	Errors        map[string]int `json:"errors"`
	TokensDropped int64          `json:"tokens_dropped"`
}

// routeKey is the context key of a read's routeSlot.
type routeKey struct{}

// routeSlot is where OnRoute puts where a read ran.
type routeSlot struct {
	mu       sync.Mutex
	seen     bool
	primary  bool
	endpoint string
	reason   pgrouted.Reason
}

// linOnRoute records a read's route in the routeSlot of its context.
func linOnRoute(e pgrouted.RouteEvent) {
	if e.Op != pgrouted.OpRead || e.Context == nil {
		return
	}
	if s, ok := e.Context.Value(routeKey{}).(*routeSlot); ok {
		s.mu.Lock()
		s.seen, s.primary, s.endpoint, s.reason = true, e.Primary, e.Endpoint, e.Reason
		s.mu.Unlock()
	}
}

// linOpen opens a *sql.DB through a Connector on dsn with linOnRoute, and
// waits until reads go to replicas.
func linOpen(dsn string) (*sql.DB, error) {
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.OnRoute = linOnRoute
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	deadline := time.Now().Add(45 * time.Second)
	for {
		d, err := conn.Explain(context.Background(), readOfEveryRelation)
		if err == nil && !d.Primary && conn.Topology().Primary != "" {
			return db, nil
		}
		if time.Now().After(deadline) {
			db.Close()
			return nil, fmt.Errorf("reads do not go to a replica after 45s: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// linToken is a Session's token handed from a writer of the main process
// to a helper process.
type linToken struct {
	session, key int
	asOf         int64
	text         string
}

// linProcess is one process's clients and what they recorded.
type linProcess struct {
	db   *sql.DB
	spec linSpec
	// sendToken, in the main process under session consistency, hands a
	// writer's token to a helper process.
	sendToken func(linToken)

	mu     sync.Mutex
	ops    []linOp
	errors map[string]int
}

func (p *linProcess) record(op linOp) {
	p.mu.Lock()
	p.ops = append(p.ops, op)
	p.mu.Unlock()
}

// fail counts an operation's error, by its text without numbers (the
// class of error, not each instance).
func (p *linProcess) fail(what string, err error) {
	msg := what + ": " + err.Error()
	if len(msg) > 160 {
		msg = msg[:160]
	}
	msg = strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, msg)
	p.mu.Lock()
	if p.errors == nil {
		p.errors = map[string]int{}
	}
	p.errors[msg]++
	p.mu.Unlock()
}

// opTimeout bounds one operation: longer than any fault of the schedule.
const opTimeout = 15 * time.Second

// write writes v to key with Session s, as client. The key keeps the
// larger of its value and v (greatest): a write whose outcome is unknown
// (its connection failed under it) may still be running on the server when
// its writer's next write commits, and would otherwise set the key back to
// its older value after that one, a history no checker of this file could
// tell from a stale read. With greatest, a write applied that late changes
// nothing, as one never applied; every acknowledged write is larger than
// the key's value (one writer per key, writing 1, 2, 3, ...).
func (p *linProcess) write(ctx context.Context, s *pgrouted.Session, client, key int, v int64) bool {
	ctx, cancel := context.WithTimeout(pgrouted.WithSession(ctx, s), opTimeout)
	defer cancel()
	op := linOp{Client: client, Session: client, Key: key, Write: true, Value: v}
	op.Call = monoNow()
	res, err := p.db.ExecContext(ctx, "UPDATE linz SET v = greatest(v, $1) WHERE k = $2", v, key)
	op.Return = monoNow()
	if err == nil {
		if n, _ := res.RowsAffected(); n != 1 {
			err = fmt.Errorf("updated %d rows of key %d, want 1", n, key)
		}
	}
	op.OK = err == nil
	if err != nil {
		p.fail("write", err)
	}
	p.record(op) // a failed write is in the history: it may have happened
	return op.OK
}

// read reads key with Session s (restored from a token taken at asOf, when
// not 0), as client, on behalf of session.
func (p *linProcess) read(ctx context.Context, s *pgrouted.Session, client, session, key int, asOf int64) {
	slot := &routeSlot{}
	ctx = context.WithValue(pgrouted.WithSession(ctx, s), routeKey{}, slot)
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	op := linOp{Client: client, Session: session, AsOf: asOf, Key: key}
	op.Call = monoNow()
	err := p.db.QueryRowContext(ctx, "SELECT v FROM linz WHERE k = $1", key).Scan(&op.Value)
	op.Return = monoNow()
	if err != nil {
		p.fail("read", err) // a failed read changed nothing: not in the history
		return
	}
	slot.mu.Lock()
	op.Routed, op.Replica, op.Endpoint = slot.seen, slot.seen && !slot.primary, slot.endpoint
	if slot.seen && slot.primary {
		op.Reason = string(slot.reason)
	}
	slot.mu.Unlock()
	p.record(op)
}

// client runs client c of the process until stop is closed: a writer
// writes its own key (the values 1, 2, 3, ...: unique, and ordered as they
// were written) and reads its key and the others, a reader reads every
// key; each with a Session of its own.
func (p *linProcess) client(ctx context.Context, c int, stop <-chan struct{}) {
	id := p.spec.Proc*linClients + c
	rng := rand.New(rand.NewPCG(p.spec.Seed, uint64(id)))
	s := pgrouted.NewSession()
	writer := c < linWriters
	own := p.spec.Proc*linWriters + c
	var seq int64
	for {
		select {
		case <-stop:
			return
		default:
		}
		switch {
		case writer && rng.IntN(10) < 4:
			seq++
			if p.write(ctx, s, id, own, seq) && p.sendToken != nil && rng.IntN(4) == 0 {
				asOf := monoNow()
				text, err := s.MarshalText()
				if err != nil {
					p.fail("token", err)
					break
				}
				p.sendToken(linToken{session: id, key: own, asOf: asOf, text: string(text)})
			}
		case writer && rng.IntN(3) == 0:
			p.read(ctx, s, id, id, own, 0)
		default:
			p.read(ctx, s, id, id, rng.IntN(linKeys), 0)
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	}
}

// tokenReader is client c of a helper process: for each token it is
// handed, it reads the token's key with a Session restored from it, on
// behalf of the Session that wrote it.
func (p *linProcess) tokenReader(ctx context.Context, c int, tokens <-chan linToken) {
	id := p.spec.Proc*linClients + c
	for tok := range tokens {
		s := pgrouted.NewSession()
		if err := s.UnmarshalText([]byte(tok.text)); err != nil {
			p.fail("token", err)
			continue
		}
		p.read(ctx, s, id, tok.session, tok.key, tok.asOf)
	}
}

// run runs the process's writers and readers until stop is closed, and
// its token readers until tokens is closed (nil: none).
func (p *linProcess) run(ctx context.Context, stop <-chan struct{}, tokens <-chan linToken) *sync.WaitGroup {
	var wg sync.WaitGroup
	for c := range linWriters + linReaders {
		wg.Go(func() { p.client(ctx, c, stop) })
	}
	if tokens != nil {
		for c := linWriters + linReaders; c < linClients; c++ {
			wg.Go(func() { p.tokenReader(ctx, c, tokens) })
		}
	}
	return &wg
}

// linHelper is a workload process: it opens its own pgrouted on the spec's
// DSN, prints "ready", and reads lines on stdin: "go" starts its clients,
// "tok <session> <key> <asOf> <token>" hands a token to its token readers,
// "ops" prints, as a linResult in JSON on one line, the operations
// recorded since the last "ops" (the test counts its evidence while the
// workload runs), "stop" stops the clients; it then prints its linResult
// as JSON, with the operations no "ops" printed.
func linHelper() int {
	var spec linSpec
	if err := json.Unmarshal([]byte(os.Getenv(linHelperEnv)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "linearizable helper:", err)
		return 2
	}
	db, err := linOpen(spec.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "linearizable helper:", err)
		return 2
	}
	defer db.Close()
	fmt.Println("ready")
	p := &linProcess{db: db, spec: spec}
	ctx := context.Background()
	stop := make(chan struct{})
	tokens := make(chan linToken, 256)
	var wg *sync.WaitGroup
	var dropped int64
	printed := 0 // p.ops[:printed] were printed for an "ops"
	unprinted := func() []linOp {
		p.mu.Lock()
		defer p.mu.Unlock()
		ops := p.ops[printed:]
		printed = len(p.ops)
		return ops
	}
	out := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 4096), 1<<20)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 1 && f[0] == "go" && wg == nil:
			wg = p.run(ctx, stop, tokens)
			continue
		case len(f) == 1 && f[0] == "ops":
			if err := out.Encode(linResult{Ops: unprinted()}); err != nil {
				fmt.Fprintln(os.Stderr, "linearizable helper:", err)
				return 2
			}
			continue
		case len(f) == 1 && f[0] == "stop":
		case len(f) == 5 && f[0] == "tok":
			session, err1 := strconv.Atoi(f[1])
			key, err2 := strconv.Atoi(f[2])
			asOf, err3 := strconv.ParseInt(f[3], 10, 64)
			if err := errors.Join(err1, err2, err3); err != nil {
				fmt.Fprintln(os.Stderr, "linearizable helper:", err)
				return 2
			}
			text := f[4]
			if text == "-" {
				text = ""
			}
			select {
			case tokens <- linToken{session: session, key: key, asOf: asOf, text: text}:
			default:
				dropped++ // the token readers are behind: the writers do not wait
			}
			continue
		default:
			fmt.Fprintf(os.Stderr, "linearizable helper: unexpected line %q\n", in.Text())
			return 2
		}
		break
	}
	close(stop)
	close(tokens)
	if wg != nil {
		wg.Wait()
	}
	res := linResult{Ops: unprinted(), Errors: p.errors, TokensDropped: dropped}
	if err := out.Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "linearizable helper:", err)
		return 2
	}
	return 0
}

// linHelperProc is a workload process seen from the test.
type linHelperProc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex // in is written by the token sender and the test
	in     io.WriteCloser
	broken bool // a write to in failed
	out    *bufio.Reader
	// tokens queues the tokens to send, so that a writer never waits on
	// the pipe.
	tokens      chan linToken
	closeTokens func() // closes tokens, once
	dropped     atomic.Int64
	sent        sync.WaitGroup
}

// startLinHelper execs this test binary as a workload process.
func startLinHelper(t *testing.T, spec linSpec) *linHelperProc {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), linHelperEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &linHelperProc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16), tokens: make(chan linToken, 256)}
	h.closeTokens = sync.OnceFunc(func() { close(h.tokens) })
	t.Cleanup(func() {
		h.closeTokens()
		h.sent.Wait()
		h.mu.Lock()
		in.Close()
		h.mu.Unlock()
		done := make(chan error, 1)
		go func() {
			// What it prints after a test that failed before reading it.
			io.Copy(io.Discard, h.out)
			done <- cmd.Wait()
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("workload process %d: %v", spec.Proc, err)
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("workload process %d did not end", spec.Proc)
		}
	})
	line, err := h.out.ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("workload process %d did not start: %q, %v", spec.Proc, line, err)
	}
	h.sent.Go(func() {
		for tok := range h.tokens {
			text := tok.text
			if text == "" {
				text = "-" // a Session without a known write
			}
			h.send(t, fmt.Sprintf("tok %d %d %d %s", tok.session, tok.key, tok.asOf, text))
		}
	})
	return h
}

func (h *linHelperProc) send(t *testing.T, line string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.broken {
		return
	}
	if _, err := fmt.Fprintln(h.in, line); err != nil {
		h.broken = true
		t.Errorf("workload process: %v", err)
	}
}

// token queues tok for the process, or drops it when the queue is full.
func (h *linHelperProc) token(tok linToken) {
	select {
	case h.tokens <- tok:
	default:
		h.dropped.Add(1)
	}
}

// ops returns the operations the process recorded since the last call.
func (h *linHelperProc) ops(t *testing.T) []linOp {
	t.Helper()
	h.send(t, "ops")
	// One line: JSON has no raw newline, and the process prints nothing
	// else before the next request.
	line, err := h.out.ReadBytes('\n')
	var res linResult
	if err == nil {
		err = json.Unmarshal(line, &res)
	}
	if err != nil {
		t.Fatalf("the operations of a workload process: %v", err)
	}
	return res.Ops
}

// stop stops the process's clients and returns what they recorded since
// the last ops.
func (h *linHelperProc) stop(t *testing.T) linResult {
	t.Helper()
	h.closeTokens()
	h.sent.Wait()
	h.send(t, "stop")
	var res linResult
	if err := json.NewDecoder(h.out).Decode(&res); err != nil {
		t.Fatalf("the result of a workload process: %v", err)
	}
	res.TokensDropped += h.dropped.Load()
	return res
}

// chaosEvent is a fault of the schedule, for the drawing of a history.
type chaosEvent struct {
	start, end int64
	what       string
}

// chaos runs a random schedule of faults, from seed, until stop is closed,
// healing each before the next; it records each once healed. The faults:
// replication delayed on a replica, a replica's replay paused, a replica
// killed and started again, a replica frozen, the primary's client
// connections reset or cut off (blackholed) for a moment. Every replica's
// replication is delayed by base between faults.
func chaos(t *testing.T, seed uint64, base time.Duration, stop <-chan struct{}, record func(chaosEvent)) {
	rng := rand.New(rand.NewPCG(seed, 0xc4a05))
	replicas := cluster.Replicas()
	began := monoNow()
	sleep := func(lo, hi time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(lo + time.Duration(rng.Int64N(int64(hi-lo)))):
			return true
		}
	}
	// hold waits for lo..hi or until stop: a fault is always healed.
	hold := func(lo, hi time.Duration) time.Duration {
		d := lo + time.Duration(rng.Int64N(int64(hi-lo)))
		select {
		case <-stop:
		case <-time.After(d):
		}
		return d
	}
	for sleep(200*time.Millisecond, 1500*time.Millisecond) {
		// Each fault's own context: a fault begun is healed even when the
		// test's context ends.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		r := replicas[rng.IntN(len(replicas))]
		start := monoNow()
		var what string
		var err error
		switch rng.IntN(6) {
		case 0:
			d := time.Duration(rng.IntN(80)) * time.Millisecond
			if err = r.ReplicationFault().Latency(d); err == nil {
				what = fmt.Sprintf("%s replays %s behind", r.Name(), d)
				hold(time.Second, 4*time.Second)
				err = r.ReplicationFault().Latency(base)
			}
		case 1:
			if err = r.PauseReplay(ctx); err == nil {
				what = fmt.Sprintf("%s's replay paused", r.Name())
				hold(500*time.Millisecond, 3*time.Second)
				err = r.ResumeReplay(ctx)
			}
		case 2:
			if err = r.Kill(ctx); err == nil {
				what = fmt.Sprintf("%s killed", r.Name())
				hold(500*time.Millisecond, 2*time.Second)
				err = r.Start(ctx)
			}
		case 3:
			if err = r.Freeze(ctx); err == nil {
				what = fmt.Sprintf("%s frozen", r.Name())
				hold(300*time.Millisecond, 2*time.Second)
				err = r.Thaw()
			}
		case 4:
			what = "the primary's connections reset"
			err = cluster.Primary().Fault().Reset()
		case 5:
			f := cluster.Primary().Fault()
			if err = f.Blackhole(); err == nil {
				what = "the primary cut off"
				hold(100*time.Millisecond, 500*time.Millisecond)
				err = f.Heal()
			}
		}
		cancel()
		end := monoNow()
		if err != nil {
			t.Errorf("chaos: %s: %v", what, err)
			return
		}
		record(chaosEvent{start: start, end: end, what: what})
		t.Logf("chaos %6.2fs: %s (%s)", float64(start-began)/1e9, what, time.Duration(end-start).Round(time.Millisecond))
	}
}

// randomFaults is the schedule chaos runs from seed.
func randomFaults(t *testing.T, seed uint64, base time.Duration) faultSchedule {
	return func(stop <-chan struct{}, record func(chaosEvent)) { chaos(t, seed, base, stop, record) }
}

// pausedReplica is a schedule of one fault: the first replica's replay
// paused for pause in every period, the replicas replaying behind by
// behind (one duration each) throughout.
func pausedReplica(t *testing.T, behind []time.Duration, pause, period time.Duration) faultSchedule {
	return func(stop <-chan struct{}, record func(chaosEvent)) {
		replicas := cluster.Replicas()
		for i, r := range replicas {
			if err := r.ReplicationFault().Latency(behind[i%len(behind)]); err != nil {
				t.Errorf("replication of %s: %v", r.Name(), err)
				return
			}
		}
		r := replicas[0]
		for {
			select {
			case <-stop:
				return
			case <-time.After(period - pause):
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			start := monoNow()
			err := r.PauseReplay(ctx)
			if err == nil {
				select {
				case <-stop:
				case <-time.After(pause):
				}
				err = r.ResumeReplay(ctx)
			}
			cancel()
			if err != nil {
				t.Errorf("pausing %s's replay: %v", r.Name(), err)
				return
			}
			record(chaosEvent{start: start, end: monoNow(), what: r.Name() + "'s replay paused"})
		}
	}
}

// chaosSeed is the schedule's seed: $CHAOS_SEED, else a random one.
func chaosSeed(t *testing.T) uint64 {
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		return seed
	}
	return rand.Uint64() >> 1
}

// linEvidence counts what a history holds that its checks need to prove
// anything: a workload runs until its history holds enough of each (see
// linGoal), not for a time, which a slower machine fills with less.
type linEvidence struct {
	writes int // acknowledged
	reads  int
	// ryw counts the reads by the Session that writes the key, tokenReads
	// those of them in another process, with the Session's token
	// (checkSessions).
	ryw, tokenReads int
	stale           int // reads older than a write acknowledged before them (staleReads)
	faults          int // of the schedule, healed
}

func (e linEvidence) String() string {
	return fmt.Sprintf("%d writes acknowledged, %d reads (%d of a Session's own writes, %d of them with its token; %d stale), %d faults",
		e.writes, e.reads, e.ryw, e.tokenReads, e.stale, e.faults)
}

// of says the figures of e that want asks for.
func (e linEvidence) of(want linEvidence) string {
	s := fmt.Sprintf("%d writes acknowledged, %d reads", e.writes, e.reads)
	for _, f := range []struct {
		got, want int
		what      string
	}{
		{e.ryw, want.ryw, "of a Session's own writes"},
		{e.tokenReads, want.tokenReads, "of them with its token"},
		{e.stale, want.stale, "stale"},
		{e.faults, want.faults, "faults"},
	} {
		if f.want > 0 {
			s += fmt.Sprintf(", %d %s", f.got, f.what)
		}
	}
	return s
}

// covers reports whether e holds at least as much of each as want.
func (e linEvidence) covers(want linEvidence) bool {
	return e.writes >= want.writes && e.reads >= want.reads && e.ryw >= want.ryw &&
		e.tokenReads >= want.tokenReads && e.stale >= want.stale && e.faults >= want.faults
}

// evidence counts what ops and faults hold.
func evidence(ops []linOp, faults int) linEvidence {
	e := linEvidence{faults: faults, stale: staleReads(ops)}
	for _, op := range ops {
		switch {
		case op.Write && op.OK:
			e.writes++
		case !op.Write:
			e.reads++
		}
	}
	r := checkSessions(ops)
	e.ryw, e.tokenReads = r.ryw, r.tokenReads
	return e
}

// The evidence the checks need. Every run: enough writes and reads
// (summary checks them), and under the random schedule as many faults as
// 20 s of it has healed on a fast machine. The session check also needs
// reads of a Session's own writes, some with its token in another
// process; the control, a stale read (porcupine then must find the
// history not linearizable).
var (
	linEnough     = linEvidence{writes: 100, reads: 300}
	chaosEnough   = linEvidence{writes: linEnough.writes, reads: linEnough.reads, faults: 8}
	sessionEnough = linEvidence{writes: linEnough.writes, reads: linEnough.reads, faults: chaosEnough.faults, ryw: 200, tokenReads: 20}
	controlEnough = linEvidence{writes: linEnough.writes, reads: linEnough.reads, faults: chaosEnough.faults, stale: 1}
)

// linGoal is how long a workload runs: for at least min, and on until
// its history holds want. A workload that has not gathered want
// linDeadline after min stops there and fails the test with what it got.
type linGoal struct {
	min  time.Duration
	want linEvidence
}

// linDeadline bounds a workload past its goal's min: generous, as the
// evidence takes about 20 s on a fast machine and 25 s on a slow one
// loaded by the other lanes of make test.
const linDeadline = 3 * time.Minute

// chaosMin is how long the global and the session checks' workloads run
// at least: nothing more than their evidence by default, and with
// $CHAOS_DURATION (make chaos) half of it each (the control's runs to its
// evidence only).
func chaosMin(t *testing.T) time.Duration {
	s := os.Getenv("CHAOS_DURATION")
	if s == "" {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 2*time.Second {
		t.Fatalf("CHAOS_DURATION=%q: want a duration of at least 2s (%v)", s, err)
	}
	return d / 2
}

// linRun is one run of the workload and what it recorded.
type linRun struct {
	ops    []linOp
	events []chaosEvent
	errors map[string]int
	drops  int64
}

// faultSchedule runs faults until stop is closed, healing each, and
// records each once healed (chaos, pausedReplica).
type faultSchedule func(stop <-chan struct{}, record func(chaosEvent))

// runLinearizable runs the workload in three processes until goal is
// met, with pgrouted_consistency=mode (tokens: the main process's writers
// hand their Sessions' tokens to the helper processes; seed their keys'
// choices), under the fault schedule faults, replicas replaying base
// behind but for what faults does.
func runLinearizable(t *testing.T, ctx context.Context, mode string, tokens bool, seed uint64, goal linGoal, base time.Duration, faults faultSchedule) linRun {
	mustExec(t, ctx, cluster.Primary(), fmt.Sprintf(
		"DROP TABLE IF EXISTS linz; CREATE TABLE linz (k int PRIMARY KEY, v bigint NOT NULL); INSERT INTO linz SELECT k, 0 FROM generate_series(0, %d) k", linKeys-1))
	replicated(t, ctx)
	for _, r := range cluster.Replicas() {
		if err := r.ReplicationFault().Latency(base); err != nil {
			t.Fatal(err)
		}
	}
	dsn := cluster.DSN() + "&pgrouted_probe_interval=100ms&pgrouted_lease=5s&pgrouted_write_timeout=20s&pgrouted_replica_wait=100ms&pgrouted_names=" +
		names() + "&pgrouted_consistency=" + mode
	helpers := make([]*linHelperProc, linProcs-1)
	for i := range helpers {
		helpers[i] = startLinHelper(t, linSpec{DSN: dsn, Proc: i + 1, Seed: seed})
	}
	db, err := linOpen(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mainProc := &linProcess{db: db, spec: linSpec{Proc: 0, Seed: seed}}
	if tokens {
		var next atomic.Uint64
		mainProc.sendToken = func(tok linToken) { helpers[next.Add(1)%uint64(len(helpers))].token(tok) }
	}

	stop := make(chan struct{})
	halt := sync.OnceFunc(func() { close(stop) })
	defer halt() // the clients and the faults end when the test fails
	for _, h := range helpers {
		h.send(t, "go")
	}
	wg := mainProc.run(ctx, stop, nil)
	var mu sync.Mutex
	var events []chaosEvent
	done := make(chan struct{})
	go func() {
		defer close(done)
		faults(stop, func(e chaosEvent) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		})
	}()

	// The evidence is counted once a second once min has passed, on the
	// operations of every process so far (the helpers' polled).
	began := time.Now()
	deadline := began.Add(goal.min + linDeadline)
	var helperOps []linOp
	select {
	case <-time.After(goal.min):
	case <-ctx.Done():
	}
	for ctx.Err() == nil {
		if t.Failed() {
			break // a fault failed (the schedule ended), or a helper
		}
		for _, h := range helpers {
			helperOps = append(helperOps, h.ops(t)...)
		}
		mainProc.mu.Lock()
		ops := append(mainProc.ops[:len(mainProc.ops):len(mainProc.ops)], helperOps...)
		mainProc.mu.Unlock()
		mu.Lock()
		healed := len(events)
		mu.Unlock()
		got := evidence(ops, healed)
		if got.covers(goal.want) {
			t.Logf("after %s of workload: %s", time.Since(began).Round(time.Second), got)
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("the workload ran %s (at least %s, then until its evidence, %s more at most) and gathered %s; want %s",
				time.Since(began).Round(time.Second), goal.min, linDeadline, got.of(goal.want), goal.want.of(goal.want))
			break
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
		}
	}
	halt()
	wg.Wait()
	<-done

	run := linRun{ops: append(mainProc.ops, helperOps...), events: events, errors: map[string]int{}}
	for k, n := range mainProc.errors {
		run.errors[k] += n
	}
	for _, h := range helpers {
		res := h.stop(t)
		run.ops = append(run.ops, res.Ops...)
		for k, n := range res.Errors {
			run.errors[k] += n
		}
		run.drops += res.TokensDropped
	}
	if ctx.Err() != nil {
		t.Fatalf("the test's context ended during the workload: %v", ctx.Err())
	}
	return run
}

// summary logs what a run did, and returns its reads and the share of them
// replicas served.
func (run linRun) summary(t *testing.T) (reads int, replicaShare float64) {
	t.Helper()
	var writes, unknown, onReplica, unrouted int
	why := map[string]int{}
	for _, op := range run.ops {
		switch {
		case op.Write && op.OK:
			writes++
		case op.Write:
			unknown++
		default:
			reads++
			if op.Replica {
				onReplica++
			}
			if !op.Routed {
				unrouted++
			}
			if op.Reason != "" {
				why[op.Reason]++
			}
		}
	}
	if reads > 0 {
		replicaShare = float64(onReplica) / float64(reads)
	}
	t.Logf("%d writes acknowledged, %d of unknown outcome; %d reads, %d (%.0f%%) on replicas, %d not reported by OnRoute; %d faults; %d tokens dropped",
		writes, unknown, reads, onReplica, 100*replicaShare, unrouted, len(run.events), run.drops)
	if len(why) > 0 {
		t.Logf("  reads on the primary, by reason: %v", why)
	}
	keys := make([]string, 0, len(run.errors))
	for k := range run.errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("  %d× %s", run.errors[k], k)
	}
	if writes < linEnough.writes || reads < linEnough.reads {
		t.Errorf("too little happened to prove anything: %d writes acknowledged, %d reads", writes, reads)
	}
	if unrouted > 0 {
		t.Errorf("%d reads were not reported by OnRoute: the replica share is not known", unrouted)
	}
	return reads, replicaShare
}

// TestConsistencyUnderFaults checks pgrouted's consistency levels the way
// databases are checked (Jepsen): three processes (this one and two execs
// of the test binary, each its own pgrouted), each with sequential clients
// writing unique values to keys of their own (UPDATE, one row per key)
// and reading every key, under a random schedule of faults (replication
// delayed, replay paused, a replica killed and started again, a replica
// frozen, the primary's connections reset or cut off), replicas replaying
// 20 ms behind between faults. Every call and return is timed on a clock
// the processes share. Then:
//
//   - global: the history is linearizable (porcupine, a register per key),
//     and replicas served at least 60% of the reads;
//   - session: each Session's guarantees hold (read-your-writes, in its
//     own process and in another one that restored its token; monotonic
//     reads of its own keys);
//   - control: the same workload under session consistency, without
//     tokens, is not linearizable (reads of other processes' keys are
//     stale): the checker can fail.
//
// The schedule is random from a seed the test logs ($CHAOS_SEED sets it);
// a history that fails is drawn to an HTML file whose path is logged.
func TestConsistencyUnderFaults(t *testing.T) {
	seed := chaosSeed(t)
	checks := chaosMin(t)
	t.Logf("seed %d (CHAOS_SEED=%d repeats the fault schedule); workload per check: at least %s, then until it holds %s (the session check's: %s; the control's: %s)",
		seed, seed, checks, chaosEnough.of(chaosEnough), sessionEnough.of(sessionEnough), controlEnough.of(controlEnough))
	const base = 20 * time.Millisecond

	t.Run("global", func(t *testing.T) {
		ctx := testhelp.Context(t, checks+linDeadline+5*time.Minute)
		restore(t)
		run := runLinearizable(t, ctx, "global", false, seed, linGoal{checks, chaosEnough}, base, randomFaults(t, seed, base))
		_, share := run.summary(t)
		t.Logf("stale reads: %d", staleReads(run.ops))
		began := time.Now()
		history := porcupineHistory(run.ops)
		res := porcupine.CheckOperationsTimeout(linModel, history, checkTimeout)
		t.Logf("porcupine: %s, in %s", res, time.Since(began).Round(time.Millisecond))
		if res != porcupine.Ok {
			_, info := porcupine.CheckOperationsVerbose(linModel, history, checkTimeout)
			path := draw(t, "global", info, run, nil)
			t.Errorf("global: the history is not linearizable (porcupine: %s); drawn in %s", res, path)
		}
		if r := checkSessions(run.ops); len(r.violations) > 0 {
			t.Errorf("global: %d reads broke a Session's guarantees, first: %s", len(r.violations), r.violations[0])
		}
		if share < 0.6 {
			t.Errorf("global: replicas served %.0f%% of the reads, want at least 60%%", 100*share)
		}
	})

	t.Run("session", func(t *testing.T) {
		ctx := testhelp.Context(t, checks+linDeadline+5*time.Minute)
		restore(t)
		run := runLinearizable(t, ctx, "session", true, seed+1, linGoal{checks, sessionEnough}, base, randomFaults(t, seed+1, base))
		run.summary(t)
		r := checkSessions(run.ops)
		t.Logf("%d reads by the Session that writes the key (%d of them in another process, with its token); %d stale reads of other Sessions' keys; %d reads of a key another Session writes older than the same client's read before (not promised)",
			r.ryw, r.tokenReads, staleReads(run.ops), r.otherMonotonic)
		if len(r.violations) > 0 {
			for _, v := range r.violations[:min(len(r.violations), 10)] {
				t.Log(v)
			}
			_, info := porcupine.CheckOperationsVerbose(linModel, porcupineHistory(run.ops), checkTimeout)
			path := draw(t, "session", info, run, r.violations)
			t.Errorf("session: %d reads broke a Session's guarantees; drawn in %s", len(r.violations), path)
		}
		if r.tokenReads < sessionEnough.tokenReads || r.ryw < sessionEnough.ryw {
			t.Errorf("session: too few reads of a Session's own writes to prove anything: %d (%d with a token)", r.ryw, r.tokenReads)
		}
	})

	t.Run("control", func(t *testing.T) {
		ctx := testhelp.Context(t, linDeadline+5*time.Minute)
		restore(t)
		run := runLinearizable(t, ctx, "session", false, seed+2, linGoal{0, controlEnough}, base, randomFaults(t, seed+2, base))
		run.summary(t)
		stale := staleReads(run.ops)
		began := time.Now()
		res, info := porcupine.CheckOperationsVerbose(linModel, porcupineHistory(run.ops), checkTimeout)
		t.Logf("control: porcupine says %s (in %s); %d stale reads", res, time.Since(began).Round(time.Millisecond), stale)
		if res != porcupine.Illegal {
			t.Errorf("control: session consistency without tokens, replicas %s behind, gave a history porcupine calls %s, want Illegal: the checker cannot tell stale reads", base, res)
		} else if os.Getenv("PGROUTED_HISTORY_DIR") != "" {
			t.Logf("control: drawn in %s", draw(t, "control", info, run, nil))
		}
		if r := checkSessions(run.ops); len(r.violations) > 0 {
			t.Errorf("control: %d reads broke a Session's guarantees, first: %s", len(r.violations), r.violations[0])
		}
	})
}

// TestGlobalWithAPausedReplica: global consistency keeps reads on the
// replicas when one of them stops replaying for a while. The workload of
// TestConsistencyUnderFaults (three processes, pgrouted_replica_wait=100ms)
// under global consistency, the replicas replaying 15 and 40 ms behind,
// the first one's replay paused for 1.5 s in every 8 s: a read whose
// replica cannot reach the primary's position in time goes to the other
// one before the primary. The history is linearizable, and replicas serve
// at least 90% of the reads: one run, no retry (the pause costs the reads
// it catches a wait at most, and the share left for waits that miss and
// the primary's fallbacks under a loaded machine, -race included, is what
// the 10% allows).
func TestGlobalWithAPausedReplica(t *testing.T) {
	const period = 8 * time.Second
	const pauses = 2
	ctx := testhelp.Context(t, linDeadline+5*time.Minute)
	restore(t)
	run := runLinearizable(t, ctx, "global", false, 1, linGoal{want: linEvidence{writes: linEnough.writes, reads: linEnough.reads, faults: pauses}}, 20*time.Millisecond,
		pausedReplica(t, []time.Duration{15 * time.Millisecond, 40 * time.Millisecond}, 1500*time.Millisecond, period))
	_, share := run.summary(t)
	if len(run.events) < pauses {
		t.Fatalf("the replay was paused %d times, want %d", len(run.events), pauses)
	}
	res := porcupine.CheckOperationsTimeout(linModel, porcupineHistory(run.ops), checkTimeout)
	t.Logf("porcupine: %s; %d stale reads", res, staleReads(run.ops))
	if res != porcupine.Ok {
		_, info := porcupine.CheckOperationsVerbose(linModel, porcupineHistory(run.ops), checkTimeout)
		t.Errorf("the history is not linearizable (porcupine: %s); drawn in %s", res, draw(t, "global-paused", info, run, nil))
	}
	if share < 0.9 {
		t.Errorf("replicas served %.1f%% of the reads, want at least 90%%", 100*share)
	}
}
