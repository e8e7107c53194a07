package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted"
)

// The server cost workload: what a statement costs the servers, in CPU
// time, through pgrouted and through pgx straight to one server, measured
// side by side on the same cluster (see cpu.go for how a server's CPU time
// is read).

const (
	// costRounds is how many rounds each stack runs each statement in:
	// the stacks take turns inside a round, and the tables give the
	// medians of the rounds. The ratios are paired: a stack's figure over
	// its baseline's in the same round (the two ran seconds apart), then
	// the median of those ratios, so that the machine's speed drifting
	// between rounds (other tenants of a shared host) cancels out. Many
	// short rounds rather than a few long ones, for the same reason.
	costRounds = 21
	// costSlices is how many slices a stack's statements of a round are
	// cut into: the stacks take turns slice by slice, tens of
	// milliseconds each, so that what slows the machine for a while (a
	// neighbour on a shared host, the other core busy) falls on every
	// stack of the round alike rather than on the one whose turn it was.
	costSlices = 20
	// costN is how many writes (and write and read-back pairs) each stack
	// runs per round: enough that the servers' background work is small
	// against the total.
	costN = 1000
	// costTxN is how many 3-write transactions each stack runs per round.
	costTxN = 350
	// costReadN is how many replica reads each stack runs per round: they
	// cost the servers about a fifth of a write. 2000 keeps the reads'
	// share of a round what it was with 3000 reads and six stacks (now
	// nine), and still puts about 90 ms of the servers' CPU in each
	// stack's batch, against a background of a few ms per second.
	costReadN = 2000
	// costIdle is the idle window at the start of each round, in which
	// the servers' background CPU rate is measured.
	costIdle = 500 * time.Millisecond
)

// costDB is what the server cost workload runs statements through: a
// *sql.DB (pgx's driver, pgrouted's) or a pgx pool (pgxpool,
// pgrouted.Pool).
type costDB interface {
	exec(ctx context.Context, q string, args ...any) error
	queryRow(ctx context.Context, q string, args []any, dest ...any) error
	// tx runs q with args n times in one read-write transaction.
	tx(ctx context.Context, n int, q string, args ...any) error
}

type costSQL struct{ db *sql.DB }

func (d costSQL) exec(ctx context.Context, q string, args ...any) error {
	_, err := d.db.ExecContext(ctx, q, args...)
	return err
}

func (d costSQL) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return d.db.QueryRowContext(ctx, q, args...).Scan(dest...)
}

func (d costSQL) tx(ctx context.Context, n int, q string, args ...any) error {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	for range n {
		if _, err := tx.ExecContext(ctx, q, args...); err != nil {
			tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// pgxPool is what pgxpool.Pool and pgrouted.Pool share that the workload
// uses.
type pgxPool interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Begin(ctx context.Context) (pgx.Tx, error)
}

type costPool struct{ p pgxPool }

func (d costPool) exec(ctx context.Context, q string, args ...any) error {
	_, err := d.p.Exec(ctx, q, args...)
	return err
}

func (d costPool) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return d.p.QueryRow(ctx, q, args...).Scan(dest...)
}

func (d costPool) tx(ctx context.Context, n int, q string, args ...any) error {
	tx, err := d.p.Begin(ctx)
	if err != nil {
		return err
	}
	for range n {
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			tx.Rollback(ctx)
			return err
		}
	}
	return tx.Commit(ctx)
}

// costAlt runs each statement on the next of its databases in turn, as
// pgrouted spreads reads over the replicas.
type costAlt struct {
	dbs []costDB
	i   *int
}

func (d costAlt) next() costDB {
	*d.i++
	return d.dbs[*d.i%len(d.dbs)]
}

func (d costAlt) exec(ctx context.Context, q string, args ...any) error {
	return d.next().exec(ctx, q, args...)
}

func (d costAlt) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	return d.next().queryRow(ctx, q, args, dest...)
}

func (d costAlt) tx(ctx context.Context, n int, q string, args ...any) error {
	return d.next().tx(ctx, n, q, args...)
}

// costSplit runs the SELECTs on a replica, without any check, and
// everything else on the primary: what a replica read right after a write
// costs the replica when nothing makes sure it sees the write. A read that
// misses the row (the replica had not replayed it yet) is no error here.
type costSplit struct {
	primary, replica costDB
}

func (d costSplit) exec(ctx context.Context, q string, args ...any) error {
	return d.primary.exec(ctx, q, args...)
}

func (d costSplit) queryRow(ctx context.Context, q string, args []any, dest ...any) error {
	if !strings.HasPrefix(q, "SELECT") {
		return d.primary.queryRow(ctx, q, args, dest...)
	}
	err := d.replica.queryRow(ctx, q, args, dest...)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	return err
}

func (d costSplit) tx(ctx context.Context, n int, q string, args ...any) error {
	return d.primary.tx(ctx, n, q, args...)
}

// costStack is one way to the servers.
type costStack struct {
	name string
	db   costDB
	// stats, for pgrouted: its connector's counters (where its reads
	// went).
	stats func() pgrouted.Stats
}

// costWork is one statement the workload measures.
type costWork struct {
	key   string // in Facts: servercost/<key>/<stack>/...
	title string
	unit  string // "statement" or "transaction"
	n     int
	// stacks run it, in this order (rotated each round).
	stacks []*costStack
	// bases is each stack's baseline, the one its ratio is over; a stack
	// without one is a baseline (or, for the read, the reference).
	bases map[*costStack]*costStack
	// column is what the ratio compares: "primary" or "cluster".
	column string
	op     func(ctx context.Context, db costDB, i int) error
}

// costResult is one stack's measurements of one statement: per round, the
// servers' CPU time (less the idle rate), in all and in the client
// backends, and the wall time, per unit.
type costResult struct {
	primary, replicas, primaryBE, replicaBE, wall []time.Duration
}

func (r *costResult) add(d cpuDelta, idle cpuRate, n int) {
	b := idle.during(d.wall)
	per := func(x, bg time.Duration) time.Duration { return (x - bg) / time.Duration(n) }
	r.primary = append(r.primary, per(d.primary, b.primary))
	r.replicas = append(r.replicas, per(d.replicas, b.replicas))
	r.primaryBE = append(r.primaryBE, per(d.primaryBE, b.primaryBE))
	r.replicaBE = append(r.replicaBE, per(d.replicaBE, b.replicaBE))
	r.wall = append(r.wall, d.wall/time.Duration(n))
}

// minus is r less o, round by round.
func (r *costResult) minus(o *costResult) *costResult {
	sub := func(a, b []time.Duration) []time.Duration {
		out := make([]time.Duration, len(a))
		for i := range a {
			out[i] = a[i] - b[i]
		}
		return out
	}
	return &costResult{primary: sub(r.primary, o.primary), replicas: sub(r.replicas, o.replicas),
		primaryBE: sub(r.primaryBE, o.primaryBE), replicaBE: sub(r.replicaBE, o.replicaBE), wall: sub(r.wall, o.wall)}
}

// backends is the client backends' CPU time per unit on all servers, per
// round.
func (r *costResult) backends() []time.Duration {
	out := make([]time.Duration, len(r.primaryBE))
	for i := range out {
		out[i] = r.primaryBE[i] + r.replicaBE[i]
	}
	return out
}

// cluster is the primary's and the replicas' CPU time per unit, per round.
func (r *costResult) cluster() []time.Duration {
	out := make([]time.Duration, len(r.primary))
	for i := range out {
		out[i] = r.primary[i] + r.replicas[i]
	}
	return out
}

// cpuRate is the servers' CPU time (ns) per second of wall time, as in
// cpuDelta.
type cpuRate struct{ primary, replicas, primaryBE, replicaBE float64 }

func rateOf(d cpuDelta) cpuRate {
	s := d.wall.Seconds()
	return cpuRate{primary: float64(d.primary) / s, replicas: float64(d.replicas) / s,
		primaryBE: float64(d.primaryBE) / s, replicaBE: float64(d.replicaBE) / s}
}

// during is the CPU time the rate accounts for in wall.
func (r cpuRate) during(wall time.Duration) cpuDelta {
	s := wall.Seconds()
	return cpuDelta{wall: wall, primary: time.Duration(r.primary * s), replicas: time.Duration(r.replicas * s),
		primaryBE: time.Duration(r.primaryBE * s), replicaBE: time.Duration(r.replicaBE * s)}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sortDurations(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// pairedRatio is the median over the rounds of a[i]/b[i], with its
// interquartile range (lo, hi): a and b are two stacks' figures per round.
func pairedRatio(a, b []time.Duration) (med, lo, hi float64) {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if b[i] > 0 {
			rs = append(rs, float64(a[i])/float64(b[i]))
		}
	}
	if len(rs) == 0 {
		return 0, 0, 0
	}
	sort.Float64s(rs)
	n := len(rs)
	return rs[n/2], rs[n/4], rs[n-1-n/4]
}

// ratioText formats pairedRatio's answer: "1.08× (IQR 0.97–1.15)".
func ratioText(med, lo, hi float64) string {
	return fmt.Sprintf("%.2f× (IQR %.2f–%.2f)", med, lo, hi)
}

// us formats a CPU time per statement in microseconds.
func us(d time.Duration) string { return fmt.Sprintf("%.1f µs", float64(d)/1e3) }

// ServerCost measures what a statement costs the servers in CPU time:
// autocommit INSERT, INSERT … RETURNING, a transaction of 3 INSERTs, a read
// of a replica with no recent write, and a read-back of a row right after
// its INSERT, through pgx's database/sql driver and pgxpool straight to
// one server, through pgrouted's driver and through pgrouted.Pool, the
// stacks taking turns in each round. The replica read is also run through
// pgrouted opened on the primary and replica 0 only, the like-for-like
// match of pgx straight to replica 0, and through pgx alternating over
// both replicas, the match of pgrouted's round-robin over them.
func ServerCost(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	p := e.Cluster.Primary()
	if err := p.Exec(ctx, `
		DROP TABLE IF EXISTS sc_kv, sc_ins;
		CREATE TABLE sc_kv (id int PRIMARY KEY, v text NOT NULL) WITH (autovacuum_enabled = false);
		INSERT INTO sc_kv SELECT g, md5(g::text) FROM generate_series(1, 1000) g;
		CREATE TABLE sc_ins (id bigserial PRIMARY KEY, v text NOT NULL) WITH (autovacuum_enabled = false);
		ANALYZE sc_kv`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	meter, err := newCPUMeter(e.Cluster)
	if err != nil {
		return nil, err
	}
	// The servers' background rate with nothing of ours connected: the
	// reference for what an idle pgrouted connector costs them.
	idleClosed, err := idleRate(ctx, meter, 3*time.Second)
	if err != nil {
		return nil, err
	}

	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	openSQL := func(dsn string) (*sql.DB, error) {
		db, err := sql.Open("pgx", dsn)
		if err == nil {
			closers = append(closers, func() { db.Close() })
		}
		return db, err
	}
	openPool := func(dsn string) (*pgxpool.Pool, error) {
		pl, err := pgxpool.New(ctx, dsn)
		if err == nil {
			closers = append(closers, pl.Close)
		}
		return pl, err
	}
	// pgrouted with its defaults (probe interval 1 s): one connector for
	// the writes and read-backs, another that never writes for the
	// replica reads (a connector's watermark is its sessions' own: the
	// writer's reads right after its writes would be checked).
	openRouted := func(dsn string) (*sql.DB, *pgrouted.Connector, error) {
		db, c, err := e.openRouted(ctx, dsn, "")
		if err == nil {
			closers = append(closers, func() { db.Close() })
		}
		return db, c, err
	}
	openRoutedPool := func(dsn string) (*pgrouted.Pool, error) {
		pl, err := pgrouted.NewPool(ctx, dsn)
		if err != nil {
			return nil, err
		}
		closers = append(closers, pl.Close)
		return pl, waitReplicaReads(ctx, pl.Connector())
	}
	// The like-for-like replica reads: pgrouted on the primary and the
	// replica the pgx baselines read from, so that both read one server.
	// Every stack reaches the servers directly, not through their fault
	// points (Env.DirectDSNOf): their copying would load the machine's
	// CPUs the servers share.
	rs := e.Cluster.Replicas()
	dsnAll, errAll := e.DirectDSN()
	dsnOne, errOne := e.DirectDSNOf(p, rs[0])
	dsnP, dsnR, dsnR2 := p.DirectDSN(), rs[0].DirectDSN(), rs[1].DirectDSN()
	if err := errors.Join(errAll, errOne); err != nil {
		return nil, err
	}
	pgxP, err := openSQL(dsnP)
	if err != nil {
		return nil, err
	}
	pgxR, err := openSQL(dsnR)
	if err != nil {
		return nil, err
	}
	pgxR2, err := openSQL(dsnR2)
	if err != nil {
		return nil, err
	}
	poolP, err := openPool(dsnP)
	if err != nil {
		return nil, err
	}
	poolR, err := openPool(dsnR)
	if err != nil {
		return nil, err
	}
	poolR2, err := openPool(dsnR2)
	if err != nil {
		return nil, err
	}
	routedW, cw, err := openRouted(dsnAll)
	if err != nil {
		return nil, err
	}
	routedR, cr, err := openRouted(dsnAll)
	if err != nil {
		return nil, err
	}
	routedR1, cr1, err := openRouted(dsnOne)
	if err != nil {
		return nil, err
	}
	rpoolW, err := openRoutedPool(dsnAll)
	if err != nil {
		return nil, err
	}
	rpoolR, err := openRoutedPool(dsnAll)
	if err != nil {
		return nil, err
	}
	rpoolR1, err := openRoutedPool(dsnOne)
	if err != nil {
		return nil, err
	}
	// The pgrouted connectors open: four on the whole cluster (each
	// probing the primary and both replicas), two on the primary and
	// replica 0.
	const (
		connectors    = 6
		replicaProbes = 4*2 + 2*1 // replicas probed, over the connectors
	)

	var (
		sPgx      = &costStack{name: "pgx", db: costSQL{pgxP}}
		sPgxR     = &costStack{name: "pgx → replica", db: costSQL{pgxR}}
		sRouted   = &costStack{name: "pgrouted", db: costSQL{routedW}, stats: cw.Stats}
		sRoutedR  = &costStack{name: "pgrouted, 2 replicas", db: costSQL{routedR}, stats: cr.Stats}
		sRoutedR1 = &costStack{name: "pgrouted, 1 replica", db: costSQL{routedR1}, stats: cr1.Stats}
		sPgxAlt   = &costStack{name: "pgx → 2 replicas, alternating", db: costAlt{dbs: []costDB{costSQL{pgxR}, costSQL{pgxR2}}, i: new(int)}}
		sPgxSplit = &costStack{name: "pgx, read-back on a replica (unchecked)", db: costSplit{primary: costSQL{pgxP}, replica: costSQL{pgxR}}}
		sPool     = &costStack{name: "pgxpool", db: costPool{poolP}}
		sPoolR    = &costStack{name: "pgxpool → replica", db: costPool{poolR}}
		sRPool    = &costStack{name: "pgrouted.Pool", db: costPool{rpoolW}, stats: rpoolW.Stats}
		sPoolAlt  = &costStack{name: "pgxpool → 2 replicas, alternating", db: costAlt{dbs: []costDB{costPool{poolR}, costPool{poolR2}}, i: new(int)}}
		sRPoolR   = &costStack{name: "pgrouted.Pool, 2 replicas", db: costPool{rpoolR}, stats: rpoolR.Stats}
		sRPoolR1  = &costStack{name: "pgrouted.Pool, 1 replica", db: costPool{rpoolR1}, stats: rpoolR1.Stats}
		writers   = []*costStack{sPgx, sRouted, sPool, sRPool}
		writeBase = map[*costStack]*costStack{sRouted: sPgx, sRPool: sPool}
		// The replica reads, like for like: pgrouted on the primary and
		// replica 0 against pgx straight to replica 0; pgrouted on the
		// whole cluster (round-robin over both replicas) against pgx
		// alternating over the same two; pgx alternating against pgx on
		// one (what spreading the reads costs by itself).
		readers  = []*costStack{sPgxR, sRoutedR1, sPgx, sPgxAlt, sRoutedR, sPoolR, sRPoolR1, sPoolAlt, sRPoolR}
		readBase = map[*costStack]*costStack{sRoutedR1: sPgxR, sPgxAlt: sPgxR, sRoutedR: sPgxAlt,
			sRPoolR1: sPoolR, sPoolAlt: sPoolR, sRPoolR: sPoolAlt}
		backers   = []*costStack{sPgx, sRouted, sPgxSplit, sPool, sRPool}
		backBase  = map[*costStack]*costStack{sRouted: sPgx, sPgxSplit: sPgx, sRPool: sPool}
		insertSQL = "INSERT INTO sc_ins (v) VALUES ($1)"
		retSQL    = "INSERT INTO sc_ins (v) VALUES ($1) RETURNING id"
		readSQL   = "SELECT v FROM sc_kv WHERE id = $1"
		backSQL   = "SELECT v FROM sc_ins WHERE id = $1"
	)
	works := []*costWork{
		{key: "insert", title: "autocommit `INSERT`", unit: "statement", n: costN, stacks: writers, bases: writeBase, column: "primary",
			op: func(ctx context.Context, db costDB, i int) error { return db.exec(ctx, insertSQL, "x") }},
		{key: "returning", title: "`INSERT … RETURNING id`", unit: "statement", n: costN, stacks: writers, bases: writeBase, column: "primary",
			op: func(ctx context.Context, db costDB, i int) error {
				var id int64
				return db.queryRow(ctx, retSQL, []any{"x"}, &id)
			}},
		{key: "tx3", title: "transaction of 3 `INSERT`s", unit: "transaction", n: costTxN, stacks: writers, bases: writeBase, column: "primary",
			op: func(ctx context.Context, db costDB, i int) error { return db.tx(ctx, 3, insertSQL, "x") }},
		{key: "read", title: "replica read, no recent write (`SELECT` by primary key)", unit: "statement", n: costReadN, stacks: readers, bases: readBase, column: "cluster",
			op: func(ctx context.Context, db costDB, i int) error {
				var v string
				return db.queryRow(ctx, readSQL, []any{i%1000 + 1}, &v)
			}},
		{key: "readback", title: "`INSERT … RETURNING id`, then the row read back by id", unit: "pair", n: costN, stacks: backers, bases: backBase, column: "cluster",
			op: func(ctx context.Context, db costDB, i int) error {
				var id int64
				if err := db.queryRow(ctx, retSQL, []any{"x"}, &id); err != nil {
					return err
				}
				var v string
				if err := db.queryRow(ctx, backSQL, []any{id}, &v); err != nil {
					if errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows) {
						return fmt.Errorf("read-back of row %d: stale read", id)
					}
					return err
				}
				return nil
			}},
	}

	// Warm-up: connections opened, statements prepared and described.
	for _, w := range works {
		for _, s := range w.stacks {
			for i := range 50 {
				if err := w.op(ctx, s.db, i); err != nil {
					return nil, fmt.Errorf("server cost: %s, %s: %w", w.key, s.name, err)
				}
			}
		}
	}
	idleOpen, err := idleRate(ctx, meter, 3*time.Second)
	if err != nil {
		return nil, err
	}

	res := map[*costWork]map[*costStack]*costResult{}
	backReads := map[*costStack]readBacks{}
	for _, w := range works {
		res[w] = map[*costStack]*costResult{}
		for _, s := range w.stacks {
			res[w][s] = &costResult{}
		}
	}
	var idles []cpuRate
	for round := range costRounds {
		// From here on the probes' backends are left out (their cost is
		// the idle connector's, above): found again each round, in case
		// a probe connected anew.
		if err := meter.skipProbes(ctx); err != nil {
			return nil, err
		}
		time.Sleep(100 * time.Millisecond)
		idle, err := idleRate(ctx, meter, costIdle)
		if err != nil {
			return nil, err
		}
		idles = append(idles, idle)
		for _, w := range works {
			// The stacks take turns slice by slice: each slice's
			// statements run by one stack, then the next stack's; a
			// stack's figure for the round is the sum of its slices.
			sums := make(map[*costStack]cpuDelta, len(w.stacks))
			per := w.n / costSlices
			for slice := range costSlices {
				for k := range w.stacks {
					s := w.stacks[(k+round+slice)%len(w.stacks)]
					var before pgrouted.Stats
					if s.stats != nil {
						before = s.stats()
					}
					t0, err := meter.sample()
					if err != nil {
						return nil, err
					}
					for i := slice * per; i < (slice+1)*per; i++ {
						if err := w.op(ctx, s.db, i); err != nil {
							return nil, fmt.Errorf("server cost: %s, %s: %w", w.key, s.name, err)
						}
					}
					t1, err := meter.sample()
					if err != nil {
						return nil, err
					}
					sums[s] = sums[s].plus(t1.since(t0))
					if w.key == "readback" && s.stats != nil {
						after := s.stats()
						onReplica, all := replicaReads(before, after)
						c := backReads[s]
						c.replica += onReplica
						c.all += all
						c.catchingUp += after.Fallbacks[pgrouted.ReasonCatchingUp] - before.Fallbacks[pgrouted.ReasonCatchingUp]
						c.deferred += after.Fallbacks[pgrouted.ReasonDeferred] - before.Fallbacks[pgrouted.ReasonDeferred]
						c.positions += after.DeferredPositionReads - before.DeferredPositionReads
						backReads[s] = c
					}
				}
			}
			for _, s := range w.stacks {
				res[w][s].add(sums[s], idle, per*costSlices)
			}
		}
		e.Logf("server cost: round %d of %d done", round+1, costRounds)
	}

	t := Table{
		Title: "Server cost",
		Intro: fmt.Sprintf("CPU time of the servers' PostgreSQL processes per statement (per transaction for the 3-write transaction, per write and read-back "+
			"pair for the read-back), from /proc: the whole server, its postmaster and every child (backends, WAL writer, walsenders, the replicas' "+
			"startup process replaying the WAL, autovacuum, …), so that the work a statement causes outside its backend counts, but for the backends of "+
			"pgrouted's probe connections (work per second, not per statement: the idle connector's cost, below), less the servers' background rate "+
			"measured in an idle window at the start of each round (%s). %d rounds; in each, every stack runs %d writes (or pairs, or %d transactions) and %d reads "+
			"serially, in %d slices: the stacks take turns slice by slice (tens of milliseconds each), in an order that rotates from slice to slice and round to round, "+
			"and a stack's figure for the round is the sum of its slices; the figures are the medians of the rounds. "+
			"The ratios are paired: in each round, a stack's figure over its baseline's in the same round (their slices interleaved), then the median of the "+
			"rounds' ratios, with their interquartile range (IQR), so that the machine's speed drifting from round to round cancels out; "+
			"a ratio of the medians shown may differ from it. "+
			"Every stack connects to the servers' own addresses, not through testcluster's fault points. "+
			"*pgx* is pgx's database/sql driver (github.com/jackc/pgx/v5/stdlib) straight to one server, *pgxpool* pgx's pool; "+
			"*pgrouted* is pgrouted's driver on the whole cluster (1 primary, 2 replicas) with its defaults (probe interval 1 s, session consistency, "+
			"round-robin over the replicas, statement by statement), *pgrouted.Pool* its pgx-native pool. "+
			"The *vs baseline* column is the ratio over the stack it names: pgrouted over pgx (pgrouted.Pool over pgxpool) on the primary's CPU for the writes, "+
			"on the whole cluster's for the reads. The replica reads are compared like for like: *pgrouted, 1 replica* (and *pgrouted.Pool, 1 replica*) is opened on a "+
			"connection string naming only the primary and the replica that *pgx → replica* (*pgxpool → replica*) reads from, so both read one server; "+
			"*pgrouted, 2 replicas* spreads its reads over both replicas and is compared with pgx (pgxpool) alternating over the same two, statement by statement; "+
			"the alternating rows over pgx (pgxpool) on one replica are what spreading the reads costs by itself (on a small machine, a server whose backend idles "+
			"half the time runs it colder). The *… backends* columns are the share of the client backends (the connections' own processes: "+
			"parse, plan and execution of the statements, including pgrouted's probes' connections); the rest is the servers' own processes "+
			"(WAL writer and walsenders on the primary; WAL receiver and the startup process replaying the writes on the replicas). "+
			"The *read-back alone* rows are the pair less the `INSERT … RETURNING` of the same stack in the same round: pgx's (pgxpool's) is "+
			"a pgx read on the primary right after its write, the baseline of pgrouted's (pgrouted.Pool's) — the same read in the same place, "+
			"its backend as warm or as cold — and is also compared with the plain pgx read on the primary of the replica-read rows, for information; "+
			"their whole-cluster figure carries the noise of the write's replay on the replicas, their backends' figure does not. "+
			"Autovacuum is off on the two tables.",
			"CPU time: /proc/<pid>/schedstat, in ns; reaped children: the postmaster's cutime+cstime, in clock ticks", costRounds, costN, costTxN, costReadN, costSlices),
		Header: []string{"statement", "stack", "primary", "… backends", "replicas", "… backends", "cluster", "vs baseline", "wall"},
	}
	col := func(w *costWork, r *costResult) []time.Duration {
		if w.column == "primary" {
			return r.primary
		}
		return r.cluster()
	}
	row := func(title, stack string, r *costResult, ratio string) {
		t.Add(title, stack, us(median(r.primary)), us(median(r.primaryBE)), us(median(r.replicas)), us(median(r.replicaBE)),
			us(median(r.cluster())), ratio, us(median(r.wall)))
	}
	facts := func(key string, r *costResult) {
		e.Facts[key+"primary_us"] = float64(median(r.primary)) / 1e3
		e.Facts[key+"replicas_us"] = float64(median(r.replicas)) / 1e3
		e.Facts[key+"cluster_us"] = float64(median(r.cluster())) / 1e3
		e.Facts[key+"backends_us"] = float64(median(r.backends())) / 1e3
	}
	// ratioFacts records a paired ratio (pairedRatio) for the targets.
	ratioFacts := func(key string, med, lo, hi float64) {
		e.Facts[key+"ratio"], e.Facts[key+"ratio_lo"], e.Facts[key+"ratio_hi"] = med, lo, hi
	}
	var pgxRead *costResult
	for _, w := range works {
		for _, s := range w.stacks {
			r := res[w][s]
			b, hasBase := w.bases[s]
			ratio := "baseline"
			var med, lo, hi float64
			if hasBase {
				med, lo, hi = pairedRatio(col(w, r), col(w, res[w][b]))
				ratio = ratioText(med, lo, hi) + " " + b.name
			}
			name := s.name
			if w.key == "read" && s == sPgx {
				name, ratio, pgxRead = "pgx → primary", "(reference)", r
			}
			row(w.title, name, r, ratio)
			key := fmt.Sprintf("servercost/%s/%s/", w.key, name)
			facts(key, r)
			if hasBase {
				ratioFacts(key, med, lo, hi)
			}
		}
	}
	// The read-back alone: the pair less the INSERT … RETURNING of the
	// same stack in the same round. pgx's and pgxpool's is a pgx read on
	// the primary right after its write, the baseline of the others' (the
	// same position: the same backend, as warm or as cold); it is also
	// compared with the plain read on the primary of the replica-read
	// rows, for information.
	var ret, back *costWork
	for _, w := range works {
		switch w.key {
		case "returning":
			ret = w
		case "readback":
			back = w
		}
	}
	alone := map[*costStack]*costResult{}
	for _, s := range back.stacks {
		ws := s
		if s == sPgxSplit {
			ws = sPgx // the same writes
		}
		alone[s] = res[back][s].minus(res[ret][ws])
	}
	for _, s := range back.stacks {
		d := alone[s]
		key := fmt.Sprintf("servercost/readback-alone/%s/", s.name)
		facts(key, d)
		base, hasBase := backBase[s]
		if !hasBase {
			all, _, _ := pairedRatio(d.cluster(), pgxRead.cluster())
			med, lo, hi := pairedRatio(d.backends(), pgxRead.backends())
			row("read-back alone (the pair less `INSERT … RETURNING`)", s.name, d,
				fmt.Sprintf("baseline; %.2f× (backends: %s) a plain pgx read on the primary", all, ratioText(med, lo, hi)))
			continue
		}
		all, _, _ := pairedRatio(d.cluster(), alone[base].cluster())
		med, lo, hi := pairedRatio(d.backends(), alone[base].backends())
		row("read-back alone (the pair less `INSERT … RETURNING`)", s.name, d,
			fmt.Sprintf("%.2f× (backends: %s) %s", all, ratioText(med, lo, hi), base.name))
		ratioFacts(key+"backends_", med, lo, hi)
	}

	var notes []string
	for _, s := range back.stacks {
		if c, ok := backReads[s]; ok && c.all > 0 {
			pct := func(n uint64) float64 { return 100 * float64(n) / float64(c.all) }
			notes = append(notes, fmt.Sprintf("%s served %.1f%% of its read-backs from a replica (after checking the replica's replay position), the rest from the primary: "+
				"%.1f%% straight away as `catching-up` (the replicas' checks of writes that young mostly missed), %.1f%% as `position-deferred` "+
				"(reading the write's position would serve that read alone), the others after a check that missed. "+
				"%.1f%% read the write's position first (Stats.DeferredPositionReads).",
				s.name, pct(c.replica), pct(c.catchingUp), pct(c.deferred), pct(c.positions)))
		}
	}
	var ip, ir []float64
	for _, r := range idles {
		ip = append(ip, r.primary)
		ir = append(ir, r.replicas)
	}
	// Per connector on the whole cluster: the primary is probed by every
	// connector, each replica by those that name it.
	perConn := cpuRate{
		primary:  (idleOpen.primary - idleClosed.primary) / connectors,
		replicas: (idleOpen.replicas - idleClosed.replicas) / replicaProbes * 2,
	}
	notes = append(notes,
		fmt.Sprintf("Background (subtracted): the servers' idle CPU rate in the rounds (the probes' backends left out), median %.2f ms/s on the primary and %.2f ms/s on the replicas together. "+
			"With nothing of the benchmark's connected: %.2f and %.2f ms/s; with the %d pgrouted connectors (four on the whole cluster, two on the primary and one replica) "+
			"and the pgx pools open and idle: %.2f and %.2f ms/s, "+
			"so one idle pgrouted connector on the whole cluster (its probes of every host, every second, and its catalog reads) costs about %.2f ms/s of the primary's CPU and %.2f ms/s of the replicas'.",
			medianF(ip)/1e6, medianF(ir)/1e6, idleClosed.primary/1e6, idleClosed.replicas/1e6, connectors, idleOpen.primary/1e6, idleOpen.replicas/1e6,
			perConn.primary/1e6, perConn.replicas/1e6))
	e.Facts["servercost/idle connector/primary_ms_per_s"] = perConn.primary / 1e6
	e.Facts["servercost/idle connector/replicas_ms_per_s"] = perConn.replicas / 1e6
	t.Notes = notes
	return []Table{t}, nil
}

func medianF(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// idleRate measures the servers' CPU rate over d with nothing run.
func idleRate(ctx context.Context, m *cpuMeter, d time.Duration) (cpuRate, error) {
	t0, err := m.sample()
	if err != nil {
		return cpuRate{}, err
	}
	select {
	case <-ctx.Done():
		return cpuRate{}, ctx.Err()
	case <-time.After(d):
	}
	t1, err := m.sample()
	if err != nil {
		return cpuRate{}, err
	}
	return rateOf(t1.since(t0)), nil
}

// readBacks counts a stack's read-backs: those on a replica, all of them,
// those sent to the primary without a check (catching-up, and
// position-deferred), and those that read the position of the write
// before them.
type readBacks struct {
	replica, all, catchingUp, deferred, positions uint64
}

// replicaReads is how many reads a connector ran between two Stats, on a
// replica and in all.
func replicaReads(before, after pgrouted.Stats) (onReplica, all uint64) {
	// The primary is the host whose writes grew.
	for host, ops := range after.Statements {
		n := ops[pgrouted.OpRead] - before.Statements[host][pgrouted.OpRead]
		all += n
		if ops[pgrouted.OpWrite] == before.Statements[host][pgrouted.OpWrite] {
			onReplica += n
		}
	}
	return onReplica, all
}

// waitReplicaReads returns once reads through c go to a replica.
func waitReplicaReads(ctx context.Context, c *pgrouted.Connector) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		d, err := c.Explain(ctx, "SELECT 1")
		if err == nil && !d.Primary {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reads do not go to a replica after 30s: %+v, %v", d, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
