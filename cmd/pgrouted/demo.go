//go:build unix

package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/testcluster"
)

// demoOptions are the demo's flags.
type demoOptions struct {
	Duration time.Duration // length of the story, after the cluster is up
	Replicas int
	NoColor  bool
	JSON     bool
	// MaxLag is pgrouted_max_lag, the staleness budget a paused replica
	// passes.
	MaxLag time.Duration
	// Think is each worker's pause between two iterations.
	Think time.Duration
	// Dir is where the cluster's temporary directory goes ("": TMPDIR).
	Dir string
}

// The demo's limits.
const (
	minDemoDuration = 15 * time.Second
	maxDemoReplicas = 5
)

// demoCmd is `pgrouted demo [--duration 20s] [--replicas 2] [--no-color]
// [--json]`.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("demo", "demo [--duration 20s] [--replicas 2] [--no-color] [--json]",
		`Boot a local PostgreSQL primary with streaming replicas (from the PostgreSQL
server binaries on this machine, in a temporary directory, on free loopback
ports), open it through pgrouted, run a mixed workload (writes read back at
once, per-user sessions, plain reads, read-only and read-write transactions)
and walk through a story: normal routing; replay paused on a replica until it
is too stale to serve reads; a replica killed; a failover. A live table shows
each host every second; a summary ends it. Ctrl-C (or SIGTERM) stops it,
removes the cluster and prints the summary so far.

Nothing is installed: without PostgreSQL it fails and prints the command that
installs it (make demo installs it, as make test does).

Exit status: 0 when the summary shows 0 stale reads and 0 errors and writes
resumed on the new primary, or when stopped by Ctrl-C or SIGTERM once the
cluster was up (a normal end) with 0 stale reads and 0 errors so far; 1
otherwise, or when the cluster cannot start; 2 on bad arguments; 130 when
interrupted before the cluster was up.`, stderr)
	opts := demoOptions{MaxLag: 2 * time.Second, Think: 20 * time.Millisecond}
	fs.DurationVar(&opts.Duration, "duration", 20*time.Second, fmt.Sprintf("length of the story, from the first statement (at least %v; a slow step lengthens it)", minDemoDuration))
	fs.IntVar(&opts.Replicas, "replicas", 2, fmt.Sprintf("number of streaming replicas (1 to %d)", maxDemoReplicas))
	fs.BoolVar(&opts.NoColor, "no-color", false, "no colors and no cursor control: print plain snapshots")
	fs.BoolVar(&opts.JSON, "json", false, "print only a JSON summary on stdout at the end (events go to stderr)")
	pos, code, ok := parseFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	if opts.Duration < minDemoDuration {
		return usageError(fs, stderr, "--duration %v is too short for the story: at least %v", opts.Duration, minDemoDuration)
	}
	if opts.Replicas < 1 || opts.Replicas > maxDemoReplicas {
		return usageError(fs, stderr, "--replicas %d: want 1 to %d", opts.Replicas, maxDemoReplicas)
	}
	live := !opts.NoColor && !opts.JSON && isTerminal(stdout)
	sum, err := runDemo(ctx, opts, live, stdout, stderr)
	switch {
	case errors.Is(err, errBootInterrupted):
		fmt.Fprintf(stderr, "pgrouted demo: %v\n", err)
		return exitInterrupted
	case sum == nil && ctx.Err() != nil:
		// Ctrl-C once the cluster was up, before the story began: the
		// demo's normal end, as for the cluster command.
		fmt.Fprintf(stderr, "pgrouted demo: stopped before the story began; the cluster was removed\n")
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "pgrouted demo: %v\n", err)
		if errors.Is(err, testcluster.ErrNoPostgres) {
			fmt.Fprintf(stderr, "(from a checkout of pgrouted, `make demo` installs PostgreSQL when it runs as root, as `make test` does)\n")
		}
		if sum == nil {
			return exitFailure
		}
	}
	if opts.JSON {
		b, _ := json.MarshalIndent(sum, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprint(stdout, "\n"+renderSummary(sum, live))
	}
	return demoExit(sum)
}

// demoExit is the exit status of a demo that ran and ended with sum. A
// story stopped by Ctrl-C or SIGTERM is a normal end, as for the cluster
// command (0), unless what ran up to it found stale reads or errors (1):
// the interruption does not hide them.
func demoExit(sum *Summary) int {
	if sum.OK || sum.stopped() {
		return exitOK
	}
	return exitFailure
}

// errBootInterrupted is runDemo's error when Ctrl-C or SIGTERM came before
// the cluster was up.
var errBootInterrupted = errors.New("interrupted before the cluster was up")

// demo is one run of the demo.
type demo struct {
	opts    demoOptions
	live    bool // ANSI cursor control and colors on stdout
	stdout  io.Writer
	events  *eventLog
	cluster *testcluster.Cluster
	conn    *pgrouted.Connector
	db      *sql.DB
	work    *workload
	story   *story
	start   time.Time
}

// runDemo boots the cluster, runs the workload and the story, shows the
// live view on stdout (unless opts.JSON) and returns the summary. The
// cluster is closed before it returns, whatever happens. The summary is nil
// when the demo could not start (no PostgreSQL, ...) or was interrupted
// before the story began (errBootInterrupted before the cluster was up);
// an error with a summary means a step of the story failed. A summary of
// a story stopped by Ctrl-C says so, with no error.
func runDemo(ctx context.Context, opts demoOptions, live bool, stdout, stderr io.Writer) (*Summary, error) {
	d := &demo{opts: opts, live: live, stdout: stdout}
	var boot io.Writer = stdout
	if opts.JSON {
		boot = stderr
	}
	// Until the live view starts, events are printed as they come.
	d.events = newEventLog(boot)
	if !opts.JSON {
		fmt.Fprintf(stdout, "Starting a local PostgreSQL primary and %d streaming replica(s)...\n", opts.Replicas)
	}
	c, err := testcluster.Start(ctx, testcluster.Options{
		Replicas: opts.Replicas,
		Dir:      opts.Dir,
		Logf: func(format string, a ...any) {
			d.events.note("cluster", "%s", strings.TrimPrefix(fmt.Sprintf(format, a...), "testcluster: "))
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, errBootInterrupted
		}
		return nil, fmt.Errorf("cannot start the local cluster: %w", err)
	}
	d.cluster = c
	defer c.Close()

	if err := d.open(ctx); err != nil {
		return nil, err
	}
	defer d.db.Close() // before c.Close (deferred first)

	if !opts.JSON {
		// From now on the live view shows the recent events, and plain
		// snapshots the events since the last one. With --json they go
		// on to stderr.
		d.events.setTee(nil)
	}
	return d.play(ctx)
}

// open opens the Connector with OnRoute and Logger hooks, creates the
// demo's table and waits until reads go to a replica.
func (d *demo) open(ctx context.Context) error {
	names := []string{d.cluster.Primary().Name()}
	for _, r := range d.cluster.Replicas() {
		names = append(names, r.Name())
	}
	dsn := d.cluster.DSN() + fmt.Sprintf("&pgrouted_max_lag=%dms&pgrouted_probe_interval=500ms&pgrouted_lease=5s&pgrouted_replica_max_conns=8&pgrouted_names=%s",
		d.opts.MaxLag.Milliseconds(), strings.Join(names, ","))
	cfg, err := pgrouted.ParseConfig(dsn)
	if err != nil {
		return err
	}
	d.work = newWorkload(nil, d.events, d.opts.Think)
	cfg.OnRoute = d.work.onRoute
	cfg.Logger = d.events.logger()
	conn, err := pgrouted.NewConnector(cfg)
	if err != nil {
		return err
	}
	d.conn = conn
	d.db = sql.OpenDB(conn)
	d.db.SetMaxIdleConns(16)
	d.work.db = d.db
	d.work.fo.from = d.cluster.Primary().Name()
	if _, err := d.db.ExecContext(ctx, schema); err != nil {
		d.db.Close()
		return fmt.Errorf("create the demo's table: %w", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		dec, err := conn.Explain(ctx, "SELECT 1")
		if err == nil && !dec.Primary && dec.Endpoint != "" {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			d.db.Close()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("reads still do not go to a replica after 30s: %+v, %v", dec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// play runs the workload and the story, refreshing the view, and returns
// the summary.
func (d *demo) play(ctx context.Context) (*Summary, error) {
	d.story = newStory(d, castOf(d.cluster), d.opts.MaxLag)
	d.start = time.Now()
	d.events.started(d.start)

	wctx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	d.work.start(wctx, &wg)
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopWork()
			wg.Wait()
		}
	}
	defer stop()

	changed := make(chan struct{}, 1)
	storyDone := make(chan error, 1)
	go func() {
		storyDone <- d.story.run(ctx, d.start, d.opts.Duration, d.events, func() {
			select {
			case changed <- struct{}{}:
			default:
			}
		})
	}()

	// The events before the start were printed as they came.
	_, seen := d.events.since(0)
	v := &view{d: d, seen: seen}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var storyErr error
loop:
	for {
		select {
		case storyErr = <-storyDone:
			break loop
		case <-changed:
			v.show(true)
		case <-tick.C:
			v.show(false)
		}
	}
	stop()
	v.show(true)

	s := d.summary()
	if storyErr != nil {
		s.Completed = false
		if ctx.Err() != nil {
			s.Failure = failureInterrupted
		} else {
			s.Failure = storyErr.Error()
		}
	}
	s.judge()
	if storyErr != nil && ctx.Err() == nil {
		return s, storyErr
	}
	return s, nil
}

// view refreshes the live table (ANSI), or prints plain snapshots every 5
// seconds and at each phase (no terminal, --no-color); nothing with --json.
type view struct {
	d         *demo
	lines     int       // lines of the last live frame
	lastPlain time.Time // last plain snapshot
	seen      int       // events printed in plain snapshots so far
}

func (v *view) show(phaseChanged bool) {
	d := v.d
	if d.opts.JSON {
		return
	}
	f := d.frame()
	if d.live {
		f.EventsTitle = "recent events"
		f.Events = d.events.last(8)
		out := renderFrame(f, true)
		fmt.Fprint(d.stdout, redraw(v.lines)+out)
		v.lines = strings.Count(out, "\n")
		return
	}
	if !phaseChanged && time.Since(v.lastPlain) < 5*time.Second {
		return
	}
	v.lastPlain = time.Now()
	f.Events, v.seen = d.events.since(v.seen)
	if len(f.Events) > 0 {
		f.EventsTitle = "events since the last snapshot"
	}
	fmt.Fprint(d.stdout, "\n"+renderFrame(f, false))
}

// frame gathers what the view shows now.
func (d *demo) frame() *frame {
	n, p, notes := d.story.current()
	errs, interrupted := d.work.counts()
	el := time.Since(d.start)
	return &frame{
		Elapsed: min(el, d.opts.Duration), Duration: d.opts.Duration,
		Phase: n, Phases: len(d.story.phases), Title: p.title, What: p.what,
		Top: d.conn.Topology(), Stats: d.conn.Stats(), Notes: notes, MaxLag: d.opts.MaxLag,
		Reads: d.work.reads.Load(), ReplicaReads: d.work.replicaReads.Load(),
		Checks: d.work.checks.Load(), Stale: d.work.stale.Load(),
		Errors: errs, Interrupted: interrupted,
	}
}

// summary gathers the counters once the workload stopped.
func (d *demo) summary() *Summary {
	st := d.conn.Stats()
	w := d.work
	s := &Summary{
		Completed:       true,
		DurationMs:      ms(time.Since(d.start)),
		Replicas:        d.opts.Replicas,
		PostgresVersion: strings.Replace(d.cluster.Version(), "postgres (PostgreSQL)", "PostgreSQL", 1),
		ByOp:            map[string]uint64{},
		Endpoints:       st.Statements,
		Reads:           w.reads.Load(),
		ReplicaReads:    w.replicaReads.Load(),
		Fallbacks:       reasonCounts(st.Fallbacks),
		RouteErrors:     reasonCounts(st.RouteErrors),
		ReplicaRetries:  st.ReplicaRetries,
		Checks:          w.checks.Load(),
		StaleReads:      w.stale.Load(),
		Failovers:       st.Failovers,
		Phases:          d.story.summaries(),
		Events:          d.events.all(),
	}
	for _, ops := range st.Statements {
		for op, n := range ops {
			s.ByOp[op] += n
			s.Statements += n
		}
	}
	if s.Reads > 0 {
		s.ReplicaShare = float64(s.ReplicaReads) / float64(s.Reads)
	}
	w.mu.Lock()
	s.Errors, s.ErrorSamples = w.errors, w.errorSamples
	s.Interrupted, s.InterruptedSamples = w.interrupted, w.interruptSamples
	if len(w.interruptedByName) > 0 {
		s.InterruptedWindows = w.interruptedByName
	}
	w.mu.Unlock()
	f := &w.fo
	f.mu.Lock()
	if f.to != "" {
		fs := &FailoverSummary{From: f.from, To: f.to, UnavailableMs: -1, WritesOnNewPrimary: f.newWrites}
		if !f.firstNew.IsZero() && !f.lastOld.IsZero() {
			fs.UnavailableMs = ms(f.firstNew.Sub(f.lastOld))
		}
		s.Failover = fs
	}
	f.mu.Unlock()
	for _, e := range s.Events {
		if e.Source == "pgrouted" {
			s.LoggedLines++
		}
	}
	return s
}
