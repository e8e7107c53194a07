package topology

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// probeSQL is one simple-protocol round trip of up to four statements. The
// first reads the role and positions and is the probe; then, once per
// connection, which grants the role has (privileges.go); then the timeline
// and, until known, the system identifier. A statement refused for want of
// a privilege leaves what it reads unknown, and the ones after it unread
// (the server skips the rest of the string); the refusal is reported in
// HostState.Missing.
//
// The probe also reads the server process it talks to (pg_backend_pid())
// and when the server started (pg_postmaster_start_time()): behind a
// connection pooler the first is not the process the connection announced,
// may change from one probe to the next, and the probe connection outlives
// a restart of the server, which the second tells.
//
// Last, it reads the transaction snapshot: a primary's xmax (every
// transaction completed before the probe was sent has an ID below it), a
// standby's xmin (every transaction below it has completed there). See
// lagmeter.History.Lag for the staleness bound they prove while the
// primary holds WAL it has not flushed.
const (
	probeRoleSQL = `SELECT r,
	CASE WHEN NOT r THEN pg_current_wal_insert_lsn() END,
	CASE WHEN r THEN pg_last_wal_replay_lsn() END,
	CASE WHEN r THEN pg_last_wal_receive_lsn() END,
	CASE WHEN NOT r THEN (SELECT string_agg(application_name || '=' || sync_state, ',' ORDER BY application_name)
		FROM pg_stat_replication WHERE application_name <> '' AND sync_state IS NOT NULL) END,
	pg_backend_pid(),
	pg_postmaster_start_time()::text,
	CASE WHEN r THEN pg_snapshot_xmin(pg_current_snapshot()) ELSE pg_snapshot_xmax(pg_current_snapshot()) END
FROM pg_is_in_recovery() AS r`
	probeTimelineSQL = `SELECT CASE WHEN pg_is_in_recovery()
	THEN coalesce((SELECT received_tli FROM pg_stat_wal_receiver WHERE received_tli > 0),
	              (SELECT timeline_id FROM pg_control_checkpoint()))
	ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`
	probeSystemSQL = `SELECT s.system_identifier, i.wal_block_size, i.bytes_per_wal_segment, i.max_data_alignment
FROM pg_control_system() s, pg_control_init() i`
)

// result is one probe's outcome, sent from a prober to the tracker.
type result struct {
	i      int
	sentAt time.Time
	rtt    time.Duration // of the probe query alone; 0 when it failed
	err    error

	inRecovery bool
	insert     lagmeter.LSN
	replay     lagmeter.LSN
	receive    lagmeter.LSN
	xid        uint64 // a primary's snapshot xmax, a standby's xmin; 0: unknown
	timeline   uint32 // 0: unknown
	systemID   uint64 // 0: unknown
	layout     lagmeter.WALLayout
	conn       uint64 // the probe connection's incarnation
	sync       []SyncStandby
	switches   []lagmeter.TimelineSwitch // the history of timeline, when read
	missing    []string                  // the grants the role lacks (see HostState.Missing)

	backendPID uint32 // pg_backend_pid() of the probe
	started    string // pg_postmaster_start_time() of the probe
	pooler     bool   // backendPID is not the pid the connection announced
	switched   bool   // the probe connection met two backends
}

// prober owns one host's probe connection; it runs in its own goroutine,
// so a slow host delays no other host's probes.
type prober struct {
	t        *Topology
	i        int
	host     Host          // its probe configuration
	kick     chan struct{} // probe now
	stop     chan struct{} // closed when the host is removed
	conn     *pgconn.PgConn
	incarn   uint64 // counts probe connections: a new one may see a restarted server
	systemID uint64
	layout   lagmeter.WALLayout
	failures int

	// connectBudget is how long the next connection may take to open,
	// queryBudget how long the next probe query may take to answer (see
	// Options.Timeout and budget).
	connectBudget budget
	queryBudget   budget

	// historyOf is the timeline whose history file the prober tried to
	// read last (once per timeline: a role without the privilege is not
	// asked again), and switches what it read.
	historyOf uint32
	switches  []lagmeter.TimelineSwitch

	// privChecked is set once the probe connection read which grants the
	// role has; missing is what it lacks (privileges.go).
	privChecked bool
	missing     []string

	// started is the server start time the probe connection saw last,
	// backend the backend pid, and switched whether it met two backends
	// (see result).
	started  string
	backend  uint32
	switched bool
}

func (p *prober) run() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.t.done:
			cancel()
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	defer p.closeConn()
	for {
		start := time.Now()
		res := p.probe(ctx)
		select {
		case p.t.results <- res:
		case <-p.t.done:
			return
		case <-p.stop:
			return
		}
		wait := p.t.opts.Interval - time.Since(start)
		if res.err != nil {
			p.failures++
			if p.host.Backoff != nil {
				wait = p.host.Backoff(p.failures) - time.Since(start)
			}
		} else {
			p.failures = 0
		}
		timer := time.NewTimer(max(wait, 0))
		select {
		case <-timer.C:
		case <-p.kick:
			timer.Stop()
		case <-p.t.done:
			timer.Stop()
			return
		case <-p.stop:
			timer.Stop()
			return
		}
	}
}

func (p *prober) closeConn() {
	if p.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		p.conn.Close(ctx)
		cancel()
		p.conn = nil
	}
}

func (p *prober) probe(parent context.Context) (res result) {
	res.i = p.i
	res.sentAt = time.Now()
	defer func() {
		if res.err != nil {
			p.closeConn()
			res.err = p.redact(res.err)
		}
	}()
	if p.conn == nil || p.conn.IsClosed() {
		if err := p.connect(parent); err != nil {
			res.err = err
			return res
		}
		// The probe is sent now: a lease counts from here.
		res.sentAt = time.Now()
	}
	timeout, limit := p.t.opts.Timeout, p.limit()
	allowed := p.queryBudget.get(timeout, limit)
	ctx, cancel := context.WithTimeout(parent, allowed)
	defer cancel()
	sql, privIdx, tlIdx, sysIdx := probeRoleSQL, -1, 1, -1
	if !p.privChecked {
		sql += ";\n" + probePrivilegesSQL
		privIdx, tlIdx = 1, 2
	}
	sql += ";\n" + probeTimelineSQL
	if p.systemID == 0 {
		sql += ";\n" + probeSystemSQL
		sysIdx = tlIdx + 1
	}
	start := time.Now()
	results, err := p.conn.Exec(ctx, sql).ReadAll()
	elapsed := time.Since(start)
	// A statement the server refused leaves the others' answers good (a
	// role without EXECUTE on pg_walfile_name: the timeline stays
	// unknown). A connection that ended under the probe does not: a server
	// shutting down answers the role and then FATAL (57P01), and the
	// timeline it did not answer would make this host's claim to be
	// primary one of unknown timeline, a conflict with any other primary
	// for as long as the lease (a failover's new primary refused for 10 s).
	var pgErr *pgconn.PgError
	if err != nil && (!errors.As(err, &pgErr) || p.conn.IsClosed()) {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			p.queryBudget.ranOut(allowed, limit)
		}
		res.err = err
		return res
	}
	p.queryBudget.took(elapsed, timeout, limit)
	if len(results) == 0 || results[0].Err != nil || len(results[0].Rows) != 1 {
		if len(results) > 0 && results[0].Err != nil {
			err = results[0].Err
		}
		res.err = fmt.Errorf("probe query: %w", err)
		return res
	}
	if err := parseRole(results[0].Rows[0], &res); err != nil {
		res.err = err
		return res
	}
	if p.started != "" && res.started != p.started {
		// The server restarted under a connection that survived it: a
		// connection pooler's. What was learned of it no longer holds.
		p.newServer()
	}
	p.started = res.started
	if p.backend != 0 && res.backendPID != p.backend {
		p.switched = true
	}
	p.backend = res.backendPID
	res.conn = p.incarn
	res.pooler = res.backendPID != p.conn.PID()
	res.switched = p.switched
	res.rtt = elapsed
	if privIdx > 0 && len(results) > privIdx && results[privIdx].Err == nil && len(results[privIdx].Rows) == 1 {
		p.missing, p.privChecked = parsePrivileges(results[privIdx].Rows[0]), true
	}
	for _, k := range []int{tlIdx, sysIdx} {
		if k > 0 && len(results) > k && results[k].Err != nil {
			p.missing = addMissing(p.missing, refused(results[k].Err))
		}
	}
	if len(results) > tlIdx && results[tlIdx].Err == nil && len(results[tlIdx].Rows) == 1 {
		if v := results[tlIdx].Rows[0][0]; v != nil {
			if tli, err := strconv.ParseUint(string(v), 10, 32); err == nil {
				res.timeline = uint32(tli)
			}
		}
	}
	if sysIdx > 0 && len(results) > sysIdx && results[sysIdx].Err == nil && len(results[sysIdx].Rows) == 1 {
		if row := results[sysIdx].Rows[0]; len(row) == 4 && row[0] != nil {
			p.systemID, _ = strconv.ParseUint(string(row[0]), 10, 64)
			var n [3]uint64
			for k := range n {
				if row[1+k] != nil {
					n[k], _ = strconv.ParseUint(string(row[1+k]), 10, 32)
				}
			}
			l := lagmeter.WALLayout{BlockSize: uint32(n[0]), SegmentSize: uint32(n[1]), MaxAlign: uint32(n[2])}
			if l.Validate() == nil {
				p.layout = l
			}
		}
	}
	res.systemID = p.systemID
	res.layout = p.layout
	if !res.inRecovery && res.timeline > 1 {
		if res.timeline != p.historyOf {
			p.historyOf, p.switches = res.timeline, p.readHistory(ctx, res.timeline)
		}
		res.switches = p.switches
	}
	res.missing = p.missing
	return res
}

// budget is how long the next of a prober's steps of one kind (opening its
// connection, or its query) may take, given how the last went: twice what
// the last took, at least the probe's timeout, so that a host quick to
// answer that stops answering is seen as soon as ever; twice the last
// budget when the last ran out of it, so that a host only slow to answer
// (SCRAM authentication, a query on starved CPUs) is given the time it
// needs and comes back instead of failing every probe for as long as it
// stays slow; never more than the prober's limit, which is also where a
// prober starts (nothing to detect before a host's first answer).
type budget struct {
	next time.Duration // 0: the limit
}

// get returns the budget of the next step.
func (b *budget) get(timeout, limit time.Duration) time.Duration {
	if b.next == 0 {
		return limit
	}
	return min(max(b.next, timeout), limit)
}

// took records a step that ended in d.
func (b *budget) took(d, timeout, limit time.Duration) { b.next = min(max(2*d, timeout), limit) }

// ranOut records a step that ran out of its budget, allowed.
func (b *budget) ranOut(allowed, limit time.Duration) { b.next = min(2*allowed, limit) }

// limit is the longest a probe's connection, or its query, may take: the
// host's connect timeout (probeHost), at least the probe's timeout.
func (p *prober) limit() time.Duration {
	return max(p.host.Config.ConnectTimeout, p.t.opts.Timeout)
}

// connect opens the probe connection within the connect budget.
func (p *prober) connect(parent context.Context) error {
	timeout, limit := p.t.opts.Timeout, p.limit()
	allowed := p.connectBudget.get(timeout, limit)
	ctx, cancel := context.WithTimeout(parent, allowed)
	defer cancel()
	start := time.Now()
	conn, err := pgconn.ConnectConfig(ctx, p.host.Config)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			p.connectBudget.ranOut(allowed, limit)
		}
		return err
	}
	p.connectBudget.took(time.Since(start), timeout, limit)
	p.conn = conn
	p.newServer()
	p.started, p.backend, p.switched = "", 0, false
	return nil
}

// newServer forgets what the prober knew of the server: another one may
// answer now (a new connection), or the same one after a restart.
func (p *prober) newServer() {
	p.incarn++
	p.systemID = 0
	p.historyOf, p.switches = 0, nil
	p.privChecked, p.missing = false, nil
}

// readHistory reads the timeline history file of a primary's timeline: the
// switch points that tell which writes of older timelines survived the
// promotions. It needs EXECUTE on pg_read_file(text) (a superuser has it;
// membership in pg_read_server_files does not give it); without it the
// answer is nil, the refusal is reported (GrantReadFile), and the driver
// knows only a lower bound of the switch point (see HostState.SwitchFloor).
func (p *prober) readHistory(ctx context.Context, tli uint32) []lagmeter.TimelineSwitch {
	sql := fmt.Sprintf("SELECT pg_read_file('pg_wal/%08X.history')", tli)
	results, err := p.conn.Exec(ctx, sql).ReadAll()
	if refused(err) != "" {
		p.missing = addMissing(p.missing, GrantReadFile)
	}
	if err != nil || len(results) != 1 || len(results[0].Rows) != 1 || results[0].Rows[0][0] == nil {
		return nil
	}
	h, err := lagmeter.ParseTimelineHistory(string(results[0].Rows[0][0]))
	if err != nil {
		return nil
	}
	return h
}

func parseRole(row [][]byte, res *result) error {
	if len(row) != 8 || row[0] == nil {
		return errors.New("probe query: unexpected row")
	}
	if v := row[5]; v != nil {
		pid, err := strconv.ParseUint(string(v), 10, 32)
		if err != nil {
			return fmt.Errorf("probe query: backend pid: %w", err)
		}
		res.backendPID = uint32(pid)
	}
	if v := row[6]; v != nil {
		res.started = string(v)
	}
	if v := row[7]; v != nil {
		xid, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("probe query: snapshot: %w", err)
		}
		res.xid = xid
	}
	res.inRecovery = string(row[0]) == "t"
	for k, dst := range []*lagmeter.LSN{&res.insert, &res.replay, &res.receive} {
		if v := row[1+k]; v != nil {
			lsn, err := lagmeter.ParseLSN(string(v))
			if err != nil {
				return fmt.Errorf("probe query: %w", err)
			}
			*dst = lsn
		}
	}
	if v := row[4]; v != nil {
		for _, kv := range strings.Split(string(v), ",") {
			name, state, ok := strings.Cut(kv, "=")
			if ok {
				res.sync = append(res.sync, SyncStandby{ApplicationName: name, SyncState: state})
			}
		}
	}
	return nil
}

// redact removes the host's password from an error's text, should a
// library ever echo it.
func (p *prober) redact(err error) error {
	pw := p.host.Config.Password
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), pw, "xxxxx"))
}
