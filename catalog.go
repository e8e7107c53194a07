package pgrouted

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/topology"
)

// This file is what the SQL text hides of the functions a statement calls:
// the primary's catalog, read into a snapshot that classification uses
// without allocating. (The statements a replica refused although they
// looked like reads are refused.go's.) See "Functions" in the package
// documentation.

// catalogBootWait bounds how long a statement that calls a function waits
// for the first snapshot of the catalog, instead of being taken for a call
// of an unknown function (which pins its connection to the primary).
var catalogBootWait = 5 * time.Second

// catalogFreshWait bounds how long a read waits, after a catalog change of
// the Connector's own, for the snapshot read after it (catalog.waitFresh)
// before it is taken for one that runs hidden code: one load, tens of
// milliseconds, unless the primary is slow or gone.
var catalogFreshWait = time.Second

// catalogInterval is how often the catalog is read again when nothing
// asked for it sooner and its fingerprint (sqlclass.CatalogVersionQuery,
// checked every probe interval) did not change: a backstop for a change
// the fingerprint misses.
var catalogInterval = 30 * time.Second

// catalog keeps the snapshot of the primary's catalog that every
// statement's classification reads (sqlclass.Functions: functions,
// relations, and the code statements run without showing it), off the hot
// path: one goroutine reads it at start, when asked (after DDL through the
// driver, after a primary change), when the primary's catalog fingerprint
// differs from the snapshot's (checked every probe interval, so another
// process's CREATE or ALTER reaches routing within one), and on an
// interval, and publishes an immutable snapshot.
type catalog struct {
	read, write []sqlclass.FuncName // pgrouted_read_functions, pgrouted_write_functions
	interval    time.Duration       // catalogInterval when it was made

	fns   atomic.Pointer[sqlclass.Functions]
	loads atomic.Uint64 // successful loads
	// gen counts the statements through the Connector that changed the
	// catalog (changed); fresh is gen when the load of the current
	// snapshot began. While fresh < gen the snapshot may not know what
	// such a statement made (a foreign key that cascades into another
	// table, a trigger, a rule, a view, a partition): see stale.
	gen, fresh atomic.Uint64
	refreshed  atomic.Pointer[chan struct{}] // closed, and replaced, after each load (waitFresh)
	hold       atomic.Pointer[chan struct{}] // tests: loads wait until it is closed
	wake       chan struct{}                 // a reload is wanted (buffered: one pending)
	loaded     chan struct{}                 // closed after the first successful load
	ctx        context.Context
	cancel     context.CancelFunc // stops the goroutine
	done       chan struct{}      // closed when it returned
	started    bool
}

// newCatalog returns a catalog that knows no function yet: until its first
// load, every call of a function that is not built into the classifier's
// curated list is unknown, and runs on the primary.
func newCatalog(read, write []sqlclass.FuncName) *catalog {
	k := &catalog{
		read:     read,
		write:    write,
		interval: catalogInterval,
		wake:     make(chan struct{}, 1),
		loaded:   make(chan struct{}),
		done:     make(chan struct{}),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.fns.Store(sqlclass.NewFunctions(nil, read, write))
	ch := make(chan struct{})
	k.refreshed.Store(&ch)
	return k
}

// functions returns the current snapshot; it never returns nil.
func (k *catalog) functions() *sqlclass.Functions {
	return k.fns.Load()
}

// isLoaded reports whether a snapshot of the catalog was read.
func (k *catalog) isLoaded() bool {
	select {
	case <-k.loaded:
		return true
	default:
		return false
	}
}

// waitLoaded waits until the first snapshot is read, ctx ends or d passes,
// and reports whether a snapshot is there.
func (k *catalog) waitLoaded(ctx context.Context, d time.Duration) bool {
	if k.isLoaded() {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.loaded:
		return true
	case <-ctx.Done():
	case <-t.C:
	case <-k.ctx.Done():
	}
	return k.isLoaded()
}

// changed records a statement through the Connector that changed the
// catalog, before the statement returns to its caller: from then on the
// snapshot is stale until a load that began after it, which it asks for.
func (k *catalog) changed() {
	k.gen.Add(1)
	k.invalidate()
}

// stale reports whether the current snapshot was read before the last
// catalog change made through the Connector: the relations it knows may
// have changed since (a table it knows now referenced by a cascading
// foreign key, given a trigger or a rule), so a write's and a read's
// relations cannot be told from it. fresh is read before the snapshot a
// caller reads after it, and stored after that snapshot: a snapshot read
// after a fresh that is not stale is at least that load's.
func (k *catalog) stale() bool { return k.fresh.Load() < k.gen.Load() }

// waitFresh waits until the snapshot is not stale, ctx ends or d passes,
// and reports whether it is not: it returns at once when it was not.
func (k *catalog) waitFresh(ctx context.Context, d time.Duration) bool {
	var t *time.Timer
	for {
		ch := *k.refreshed.Load() // before stale: a load after it closes it
		if !k.stale() {
			return true
		}
		if t == nil {
			t = time.NewTimer(d)
			defer t.Stop()
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return !k.stale()
		case <-t.C:
			return !k.stale()
		case <-k.ctx.Done():
			return !k.stale()
		}
	}
}

// invalidate asks for a new snapshot soon. It never blocks.
func (k *catalog) invalidate() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// catalogLoader reads every function definition from some server: the
// primary when there is one (on the catalog's own connection, cs), else
// any host that answers (a standby's catalog is a copy of the primary's).
type catalogLoader func(ctx context.Context, cs *catalogSession) (catalogDefs, error)

// catalogDefs is what a load reads: the catalog's fingerprint, the
// functions, the relations (their kinds, triggers, rules, cascading
// foreign keys and inheritance: the scope of read-your-writes, see
// sqlclass.Scope), and the objects that run code a statement does not
// show (sqlclass.SetHidden).
type catalogDefs struct {
	version string
	funcs   []sqlclass.FuncDef
	rels    []sqlclass.RelDef
	objs    []sqlclass.ObjectDef
	edges   []sqlclass.EdgeDef
}

// catalogPoller reads the primary's catalog fingerprint
// (sqlclass.CatalogVersionQuery) on the catalog's own connection, cs.
type catalogPoller func(ctx context.Context, cs *catalogSession) (string, error)

// catalogSession is the catalog's own connection to the primary, owned by
// the catalog's goroutine: the fingerprint it reads every probe interval,
// and the catalog when it changed, are the catalog's traffic, not the
// statements', so they take no connection of a pool that reads borrow
// (a pool of one would make a read wait for them) and run under the
// probes' application_name (topology.ProbeApplicationName), as the probes'
// own statements do: monitoring, which the server's activity views and a
// measurement of the statements' cost tell apart from the application's.
type catalogSession struct {
	h  *host // the host pc is connected to
	pc *pgconn.PgConn
}

// conn returns a connection to h, the one it has when it is to h and open,
// else a new one (closing the old).
func (cs *catalogSession) conn(ctx context.Context, h *host) (*pgconn.PgConn, error) {
	if cs.pc != nil && (cs.h != h || cs.pc.IsClosed()) {
		cs.close()
	}
	if cs.pc == nil {
		cfg := h.pool.Config().ConnConfig.Config.Copy()
		cfg.ValidateConnect, cfg.AfterConnect, cfg.OnNotice, cfg.OnNotification = nil, nil, nil, nil
		if cfg.RuntimeParams == nil {
			cfg.RuntimeParams = map[string]string{}
		}
		cfg.RuntimeParams["application_name"] = topology.ProbeApplicationName
		pc, err := pgconn.ConnectConfig(ctx, cfg)
		if err != nil {
			return nil, err
		}
		cs.h, cs.pc = h, pc
	}
	return cs.pc, nil
}

// fail closes the connection after an error on it: the next use opens a
// new one.
func (cs *catalogSession) fail() { cs.close() }

// close closes the connection, if any.
func (cs *catalogSession) close() {
	if cs.pc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cs.pc.Close(ctx)
		cancel()
	}
	cs.h, cs.pc = nil, nil
}

// start runs the goroutine that loads snapshots, until close. timeout
// bounds each load; a failed load is tried again after retry; every tick
// (when poll is not nil) the fingerprint is read, and the catalog again
// when it changed.
func (k *catalog) start(load catalogLoader, poll catalogPoller, timeout, retry, tick time.Duration) {
	k.started = true
	go k.run(load, poll, timeout, retry, tick)
}

func (k *catalog) run(load catalogLoader, poll catalogPoller, timeout, retry, tick time.Duration) {
	defer close(k.done)
	var cs catalogSession
	defer cs.close()
	for {
		if h := k.hold.Load(); h != nil {
			select {
			case <-*h:
			case <-k.ctx.Done():
				return
			}
		}
		gen := k.gen.Load() // before the load: what it may not see
		lctx, lcancel := context.WithTimeout(k.ctx, timeout)
		defs, err := load(lctx, &cs)
		lcancel()
		if err != nil {
			if !k.sleep(retry) {
				return
			}
			continue
		}
		k.fns.Store(k.snapshot(defs))
		k.fresh.Store(gen)
		next := make(chan struct{})
		close(*k.refreshed.Swap(&next))
		if k.loads.Add(1) == 1 {
			close(k.loaded)
		}
		if !k.watch(poll, &cs, defs.version, timeout, tick) {
			return
		}
	}
}

// snapshot builds the classification's snapshot of what a load read.
func (k *catalog) snapshot(defs catalogDefs) *sqlclass.Functions {
	fns := sqlclass.NewFunctions(defs.funcs, k.read, k.write)
	fns.SetRelations(defs.rels)
	if defs.objs != nil {
		fns.SetHidden(defs.funcs, defs.objs, defs.edges)
	}
	return fns
}

// watch waits until the snapshot of fingerprint version is to be read
// again: asked for (invalidate), the fingerprint changed, or
// k.interval passed. It returns false when the catalog is closed.
func (k *catalog) watch(poll catalogPoller, cs *catalogSession, version string, timeout, tick time.Duration) bool {
	deadline := time.Now().Add(k.interval)
	for {
		wait := time.Until(deadline)
		if poll != nil && tick < wait {
			wait = tick
		}
		if wait <= 0 {
			return true
		}
		t := time.NewTimer(wait)
		select {
		case <-k.ctx.Done():
			t.Stop()
			return false
		case <-k.wake:
			t.Stop()
			return true
		case <-t.C:
		}
		if poll == nil || !time.Now().Before(deadline) {
			return true
		}
		pctx, pcancel := context.WithTimeout(k.ctx, timeout)
		v, err := poll(pctx, cs)
		pcancel()
		if err == nil && v != version {
			return true
		}
	}
}

// sleep waits d, or until the catalog is asked to load or closed; it
// returns false when closed.
func (k *catalog) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-k.ctx.Done():
		return false
	case <-k.wake:
	case <-t.C:
	}
	return true
}

// close stops the goroutine and waits for it.
func (k *catalog) close() {
	k.cancel()
	if k.started {
		<-k.done
	}
}

// catalogReads is what readCatalog sends, as one string of the simple
// protocol: the fingerprint first, so that a change that lands during the
// load makes the next poll load again.
var catalogReads = strings.Join([]string{sqlclass.CatalogVersionQuery, sqlclass.CatalogQuery,
	sqlclass.RelationsQuery, sqlclass.HiddenObjectsQuery, sqlclass.HiddenEdgesQuery}, ";\n")

// readCatalog reads the catalog on a connection, in one round trip
// (catalogReads).
func readCatalog(ctx context.Context, pc *pgconn.PgConn) (catalogDefs, error) {
	mrr := pc.Exec(ctx, catalogReads)
	defs := catalogDefs{objs: []sqlclass.ObjectDef{}}
	for i := 0; mrr.NextResult(); i++ {
		rr := mrr.ResultReader()
		switch i {
		case 0:
			defs.version = readVersion(rr)
		case 1:
			defs.funcs = readFunctions(rr)
		case 2:
			defs.rels = readRelations(rr)
		case 3:
			defs.objs = readObjects(rr, defs.objs)
		case 4:
			defs.edges = readEdges(rr)
		}
	}
	if err := mrr.Close(); err != nil {
		return catalogDefs{}, err
	}
	return defs, nil
}

// readVersion reads the row of sqlclass.CatalogVersionQuery from rr.
func readVersion(rr *pgconn.ResultReader) string {
	var v string
	for rr.NextRow() {
		if row := rr.Values(); len(row) == 1 {
			v = string(row[0])
		}
	}
	return v
}

// readObjects appends the rows of sqlclass.HiddenObjectsQuery from rr to
// objs.
func readObjects(rr *pgconn.ResultReader, objs []sqlclass.ObjectDef) []sqlclass.ObjectDef {
	for rr.NextRow() {
		v := rr.Values()
		if len(v) != 4 || len(v[0]) != 1 {
			continue
		}
		oid, err := strconv.ParseUint(string(v[1]), 10, 32)
		if err != nil {
			continue
		}
		objs = append(objs, sqlclass.ObjectDef{Kind: v[0][0], OID: uint32(oid), Name: string(v[2]), Text: string(v[3])})
	}
	return objs
}

// readEdges reads the rows of sqlclass.HiddenEdgesQuery from rr.
func readEdges(rr *pgconn.ResultReader) []sqlclass.EdgeDef {
	var edges []sqlclass.EdgeDef
	for rr.NextRow() {
		v := rr.Values()
		if len(v) != 4 || len(v[0]) != 1 || len(v[2]) != 1 {
			continue
		}
		oid, err1 := strconv.ParseUint(string(v[1]), 10, 32)
		ref, err2 := strconv.ParseUint(string(v[3]), 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		edges = append(edges, sqlclass.EdgeDef{Kind: v[0][0], OID: uint32(oid), RefKind: v[2][0], RefOID: uint32(ref)})
	}
	return edges
}

// readFunctions reads the rows of sqlclass.CatalogQuery from rr.
func readFunctions(rr *pgconn.ResultReader) []sqlclass.FuncDef {
	var defs []sqlclass.FuncDef
	// Schemas and extensions repeat (thousands of functions in pg_catalog):
	// one string each, which the snapshot keeps for as long as it lives.
	names := map[string]string{}
	intern := func(b []byte) string {
		if s, ok := names[string(b)]; ok {
			return s
		}
		s := string(b)
		names[s] = s
		return s
	}
	for rr.NextRow() {
		v := rr.Values()
		if len(v) != 7 {
			continue
		}
		oid, _ := strconv.ParseUint(string(v[5]), 10, 32)
		args, _ := strconv.Atoi(string(v[6]))
		defs = append(defs, sqlclass.FuncDef{
			Schema:    intern(v[0]),
			Name:      string(v[1]),
			Volatile:  string(v[2]) == "v",
			Procedure: string(v[3]) == "p",
			Extension: intern(v[4]),
			OID:       uint32(oid),
			Args:      args,
		})
	}
	return defs
}

// parseFuncNames parses the function names of a pgrouted_*_functions key.
func parseFuncNames(key string, list []string) ([]sqlclass.FuncName, error) {
	var out []sqlclass.FuncName
	for i, s := range list {
		n, err := sqlclass.ParseFuncName(s)
		if err != nil {
			return nil, fmt.Errorf("pgrouted: %s: entry %d (%q): %v", key, i+1, s, err)
		}
		out = append(out, n)
	}
	return out, nil
}

// loadCatalog reads the function and relation catalog from the primary or, when there is
// none, from any host that answers: a standby's catalog is a copy of the
// primary's, a little behind at most, and a function it does not have yet
// is unknown, which is safe.
func (c *Connector) loadCatalog(ctx context.Context, cs *catalogSession) (catalogDefs, error) {
	v := c.view()
	err := errors.New("no host")
	if v.primary != nil {
		var pc *pgconn.PgConn
		if pc, err = cs.conn(ctx, v.primary.host); err == nil {
			var defs catalogDefs
			if defs, err = readCatalog(ctx, pc); err == nil {
				return defs, nil
			}
			cs.fail()
		}
		if ctx.Err() != nil {
			return catalogDefs{}, err
		}
	}
	order := make([]*host, 0, len(v.hosts))
	for _, healthy := range []bool{true, false} {
		for i := range v.hosts {
			if h := &v.hosts[i]; h != v.primary && h.probe.Healthy == healthy && !h.probe.Removed && h.probe.Untrusted == "" {
				order = append(order, h.host)
			}
		}
	}
	for _, h := range order {
		var defs catalogDefs
		err = h.pool.AcquireFunc(ctx, func(pc *pgxpool.Conn) error {
			var rerr error
			defs, rerr = readCatalog(ctx, pc.Conn().PgConn())
			return rerr
		})
		if err == nil {
			return defs, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return catalogDefs{}, err
}

// pollCatalog reads the primary's catalog fingerprint
// (sqlclass.CatalogVersionQuery); without a primary, it fails, and the
// snapshot stays until one is known (a new primary loads it again).
func (c *Connector) pollCatalog(ctx context.Context, cs *catalogSession) (string, error) {
	v := c.view()
	if v.primary == nil {
		return "", errors.New("no primary")
	}
	pc, err := cs.conn(ctx, v.primary.host)
	if err != nil {
		return "", err
	}
	rr := pc.ExecParams(ctx, sqlclass.CatalogVersionQuery, nil, nil, nil, nil)
	version := readVersion(rr)
	if _, err := rr.Close(); err != nil {
		cs.fail()
		return "", err
	}
	return version, nil
}

// readRelations reads the rows of sqlclass.RelationsQuery from rr.
func readRelations(rr *pgconn.ResultReader) []sqlclass.RelDef {
	var defs []sqlclass.RelDef
	for rr.NextRow() {
		v := rr.Values()
		if len(v) != 6 || len(v[1]) != 1 {
			continue
		}
		d := sqlclass.RelDef{
			Name:     string(v[0]),
			Kind:     v[1][0],
			Triggers: string(v[2]) == "t",
			Rules:    string(v[3]) == "t",
			Cascades: string(v[4]) == "t",
		}
		if len(v[5]) > 0 {
			d.Parents = strings.Split(string(v[5]), "\x1f")
		}
		defs = append(defs, d)
	}
	return defs
}
