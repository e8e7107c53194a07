package workload

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	pgxv5 "github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted"
)

// overheadRounds is how many times each stack runs the statement.
const overheadRounds = 4000

// Overhead measures the latency of a one-row SELECT by primary key through
// pgx's driver straight to the primary, straight to a replica and
// alternating over the two replicas, pgrouted forced to the primary,
// pgrouted on the primary and that one replica, and pgrouted on the whole
// cluster (reads round-robin over the two replicas), and of a one-row
// autocommit INSERT through pgx's driver and pgrouted, one statement at a
// time and interleaved (pgx, forced, routed, pgx, ...), so that a change
// of load on the machine falls on every stack alike; medians resist the
// load's spikes better than the Go benchmarks' means.
func Overhead(ctx context.Context, e *Env) ([]Table, error) {
	if err := e.Restore(ctx); err != nil {
		return nil, err
	}
	if err := e.Cluster.Primary().Exec(ctx, `
		CREATE TABLE IF NOT EXISTS ovh_kv (id int PRIMARY KEY, v text);
		INSERT INTO ovh_kv SELECT g, md5(g::text) FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING`); err != nil {
		return nil, err
	}
	if err := e.Cluster.WaitReplicated(ctx); err != nil {
		return nil, err
	}
	// Every stack reaches the servers directly, not through their fault
	// points (Env.DirectDSNOf).
	rs := e.Cluster.Replicas()
	dsnP, dsnR, dsnR2 := e.Cluster.Primary().DirectDSN(), rs[0].DirectDSN(), rs[1].DirectDSN()
	dsnAll, errAll := e.DirectDSN()
	dsnOne, errOne := e.DirectDSNOf(e.Cluster.Primary(), rs[0])
	if err := errors.Join(errAll, errOne); err != nil {
		return nil, err
	}
	pgx, err := sql.Open("pgx", dsnP)
	if err != nil {
		return nil, err
	}
	defer pgx.Close()
	pgxReplica, err := sql.Open("pgx", dsnR)
	if err != nil {
		return nil, err
	}
	defer pgxReplica.Close()
	pgxReplica2, err := sql.Open("pgx", dsnR2)
	if err != nil {
		return nil, err
	}
	defer pgxReplica2.Close()
	routed, _, err := e.openRouted(ctx, dsnAll, "&pgrouted_probe_interval=250ms")
	if err != nil {
		return nil, err
	}
	defer routed.Close()
	// pgrouted on the primary and the replica pgx reads from: its reads
	// go where pgx straight to a replica's go.
	routed1, _, err := e.openRouted(ctx, dsnOne, "&pgrouted_probe_interval=250ms")
	if err != nil {
		return nil, err
	}
	defer routed1.Close()
	const (
		pgxName     = "pgx"
		replicaName = "pgx straight to a replica"
		altName     = "pgx alternating over 2 replicas"
		poolName    = "pgxpool"
		poolRName   = "pgxpool straight to a replica"
	)
	const read = "SELECT v FROM ovh_kv WHERE id = $1"
	viaSQL := func(ctx context.Context, dbs ...*sql.DB) func(int, *string) error {
		return func(i int, v *string) error { return dbs[i%len(dbs)].QueryRowContext(ctx, read, i%1000+1).Scan(v) }
	}
	// The pgx-native stacks are opened once the driver's have run (their
	// pools, and the Pool's probes, are not there while those run): db
	// is read when a read runs.
	var (
		poolP, poolR *pgxpool.Pool
		routedPool   *pgrouted.Pool
	)
	viaPgx := func(ctx context.Context, db func() pgxDB) func(int, *string) error {
		return func(i int, v *string) error { return db().QueryRow(ctx, read, i%1000+1).Scan(v) }
	}
	openPools := func() error {
		var err error
		if poolP, err = pgxpool.New(ctx, dsnP); err != nil {
			return err
		}
		if poolR, err = pgxpool.New(ctx, dsnR); err != nil {
			return err
		}
		if routedPool, err = pgrouted.NewPool(ctx, dsnOne+"&pgrouted_probe_interval=250ms"); err != nil {
			return err
		}
		return waitReplicaReads(ctx, routedPool.Connector())
	}
	defer func() {
		for _, p := range []*pgxpool.Pool{poolP, poolR} {
			if p != nil {
				p.Close()
			}
		}
		if routedPool != nil {
			routedPool.Close()
		}
	}()
	forced := pgrouted.WithRoute(ctx, pgrouted.Primary)
	stacks := []struct {
		name string
		read func(i int, v *string) error
		// base is the stack a like-for-like comparison is with.
		base string
	}{
		{pgxName, viaSQL(ctx, pgx), ""},
		{replicaName, viaSQL(ctx, pgxReplica), ""},
		{altName, viaSQL(ctx, pgxReplica, pgxReplica2), ""},
		{"pgrouted, forced to the primary", viaSQL(forced, routed), pgxName},
		{"pgrouted, 1 replica", viaSQL(ctx, routed1), replicaName},
		{"pgrouted, 2 replicas (round-robin)", viaSQL(ctx, routed), altName},
		{poolName, viaPgx(ctx, func() pgxDB { return poolP }), ""},
		{poolRName, viaPgx(ctx, func() pgxDB { return poolR }), ""},
		{"pgrouted.Pool, forced to the primary", viaPgx(forced, func() pgxDB { return routedPool }), poolName},
		{"pgrouted.Pool, 1 replica", viaPgx(ctx, func() pgxDB { return routedPool }), poolRName},
	}
	// The driver's stacks take turns, then the pgx-native ones: each
	// statement's backend idles while the others of its group run, and
	// fewer at a time keep that as it is for pgx alone.
	lat := make([][]time.Duration, len(stacks))
	for _, group := range [][2]int{{0, 6}, {6, len(stacks)}} {
		if group[0] == 6 {
			if err := openPools(); err != nil {
				return nil, err
			}
		}
		n := group[1] - group[0]
		for i := range overheadRounds + 100 {
			// The order rotates from round to round: no stack always
			// follows the same one.
			for k := range n {
				j := group[0] + (k+i)%n
				s := stacks[j]
				var v string
				t0 := time.Now()
				if err := s.read(i, &v); err != nil {
					return nil, fmt.Errorf("%s: %w", s.name, err)
				}
				if i >= 100 { // the first ones open connections and fill caches
					lat[j] = append(lat[j], time.Since(t0))
				}
			}
		}
	}
	t := Table{
		Title: "Overhead, interleaved",
		Intro: fmt.Sprintf("A one-row `SELECT` by primary key, %d times through each stack, one statement at a time, the stacks taking turns "+
			"in an order that rotates from round to round (after 100 rounds of warm-up), each statement timed on its own: pgx's database/sql driver straight to the primary, straight to a replica, "+
			"and alternating over the two replicas statement by statement; pgrouted with the statement routed to the primary (the same server as pgx); "+
			"pgrouted opened on the primary and the replica pgx straight to a replica reads from (*1 replica*: its reads go to that server); and pgrouted on the "+
			"whole cluster, its reads round-robin over both replicas. Then, taking turns among themselves, pgx's pool (pgxpool) straight to the primary "+
			"and to that replica, and pgrouted.Pool opened on the primary and that replica, forced to the primary and not. The last column compares like with like: each pgrouted "+
			"stack with the pgx stack that reads the same servers the same way. Every stack connects to the servers' own addresses, not through testcluster's fault points "+
			"(which copy every byte in this process, at more CPU per statement than the server spends on it).", overheadRounds),
		Header: []string{"stack", "p50", "p90", "p99", "p50 vs pgx", "p50 vs pgx straight to a replica", "p50 vs pgx on the same servers"},
	}
	p50s := map[string]time.Duration{}
	for j, s := range stacks {
		sortDurations(lat[j])
		p50 := percentile(lat[j], 50)
		p50s[s.name] = p50
		vs := func(base string) string {
			if p50s[base] == 0 {
				return ""
			}
			return fmt.Sprintf("%+.1f%%", 100*(float64(p50)/float64(p50s[base])-1))
		}
		vsReplica, vsSame := "", ""
		if j > 0 {
			vsReplica = vs(replicaName)
		}
		if s.base != "" {
			vsSame = vs(s.base) + " (" + s.base + ")"
		}
		t.Add(s.name, p50, percentile(lat[j], 90), percentile(lat[j], 99), vs(pgxName), vsReplica, vsSame)
		e.Facts["overhead/"+s.name+"/p50_us"] = float64(p50) / 1e3
	}
	ins, err := overheadInsert(ctx, e, pgx, routed, poolP, routedPool)
	if err != nil {
		return nil, err
	}
	return []Table{t, ins}, nil
}

// pgxDB is what the pgx-native stacks read through: a pgxpool.Pool or a
// pgrouted.Pool.
type pgxDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgxv5.Row
}

// overheadInsert is Overhead for a one-row autocommit INSERT, through pgx's
// driver and pgrouted, pgxpool and pgrouted.Pool (all on the primary).
func overheadInsert(ctx context.Context, e *Env, pgx, routed *sql.DB, pool *pgxpool.Pool, routedPool *pgrouted.Pool) (Table, error) {
	if err := e.Cluster.Primary().Exec(ctx, `
		DROP TABLE IF EXISTS ovh_ins;
		CREATE TABLE ovh_ins (id bigserial PRIMARY KEY, v text NOT NULL)`); err != nil {
		return Table{}, err
	}
	const insert = "INSERT INTO ovh_ins (v) VALUES ($1)"
	viaSQL := func(db *sql.DB) func() error {
		return func() error { _, err := db.ExecContext(ctx, insert, "x"); return err }
	}
	viaPgx := func(db interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}) func() error {
		return func() error { _, err := db.Exec(ctx, insert, "x"); return err }
	}
	stacks := []struct {
		name string
		exec func() error
		base int // the index of the stack it is compared with
	}{{"pgx", viaSQL(pgx), 0}, {"pgrouted", viaSQL(routed), 0}, {"pgxpool", viaPgx(pool), 2}, {"pgrouted.Pool", viaPgx(routedPool), 2}}
	// Each pair takes turns on its own, as in Overhead.
	lat := make([][]time.Duration, len(stacks))
	for _, group := range [][2]int{{0, 2}, {2, 4}} {
		n := group[1] - group[0]
		for i := range overheadRounds + 100 {
			for k := range n {
				j := group[0] + (k+i)%n
				s := stacks[j]
				t0 := time.Now()
				if err := s.exec(); err != nil {
					return Table{}, fmt.Errorf("%s: %w", s.name, err)
				}
				if i >= 100 {
					lat[j] = append(lat[j], time.Since(t0))
				}
			}
		}
	}
	t := Table{
		Title: "Overhead, interleaved: INSERT",
		Intro: fmt.Sprintf("A one-row autocommit `INSERT`, %d times through each stack, as above: pgx's database/sql driver straight to the primary and pgrouted "+
			"on the whole cluster, pgxpool straight to the primary and pgrouted.Pool on the primary and one replica (without a Session, the write's WAL position "+
			"is left to the first read that needs it: the write is pgx's one statement).", overheadRounds),
		Header: []string{"stack", "p50", "p90", "p99", "p50 vs baseline"},
	}
	p50s := make([]time.Duration, len(stacks))
	for j, s := range stacks {
		sortDurations(lat[j])
		p50s[j] = percentile(lat[j], 50)
		vs := "baseline"
		if s.base != j {
			vs = fmt.Sprintf("%+.1f%% (%s)", 100*(float64(p50s[j])/float64(p50s[s.base])-1), stacks[s.base].name)
		}
		t.Add(s.name, p50s[j], percentile(lat[j], 90), percentile(lat[j], 99), vs)
		e.Facts["overhead-insert/"+s.name+"/p50_us"] = float64(p50s[j]) / 1e3
	}
	return t, nil
}
