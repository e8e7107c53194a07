package pgrouted

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
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

// catalogInterval is how often the function catalog is read again when
// nothing asked for it sooner: functions created or altered by another
// process are unknown, hence run on the primary, until then.
var catalogInterval = 30 * time.Second

// catalog keeps the snapshot of the primary's functions that every
// statement's classification reads (sqlclass.Functions), off the hot path:
// one goroutine reads pg_proc at start, when asked (after DDL through the
// driver, after a primary change) and on an interval, and publishes an
// immutable snapshot.
type catalog struct {
	read, write []sqlclass.FuncName // pgrouted_read_functions, pgrouted_write_functions

	fns     atomic.Pointer[sqlclass.Functions]
	loads   atomic.Uint64 // successful loads
	wake    chan struct{} // a reload is wanted (buffered: one pending)
	loaded  chan struct{} // closed after the first successful load
	ctx     context.Context
	cancel  context.CancelFunc // stops the goroutine
	done    chan struct{}      // closed when it returned
	started bool
}

// newCatalog returns a catalog that knows no function yet: until its first
// load, every call of a function that is not built into the classifier's
// curated list is unknown, and runs on the primary.
func newCatalog(read, write []sqlclass.FuncName) *catalog {
	k := &catalog{
		read:   read,
		write:  write,
		wake:   make(chan struct{}, 1),
		loaded: make(chan struct{}),
		done:   make(chan struct{}),
	}
	k.ctx, k.cancel = context.WithCancel(context.Background())
	k.fns.Store(sqlclass.NewFunctions(nil, read, write))
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

// invalidate asks for a new snapshot soon. It never blocks.
func (k *catalog) invalidate() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// catalogLoader reads every function definition from some server: the
// primary when there is one, else any host that answers (a standby's
// catalog is a copy of the primary's).
type catalogLoader func(ctx context.Context) (catalogDefs, error)

// catalogDefs is what a load reads: the functions, and the relations
// (their kinds, triggers, rules, cascading foreign keys and inheritance:
// the scope of read-your-writes, see sqlclass.Scope).
type catalogDefs struct {
	funcs []sqlclass.FuncDef
	rels  []sqlclass.RelDef
}

// start runs the goroutine that loads snapshots, until close. timeout
// bounds each load; a failed load is tried again after retry.
func (k *catalog) start(load catalogLoader, timeout, retry time.Duration) {
	k.started = true
	go k.run(load, timeout, retry)
}

func (k *catalog) run(load catalogLoader, timeout, retry time.Duration) {
	defer close(k.done)
	for {
		lctx, lcancel := context.WithTimeout(k.ctx, timeout)
		defs, err := load(lctx)
		lcancel()
		wait := catalogInterval
		if err == nil {
			fns := sqlclass.NewFunctions(defs.funcs, k.read, k.write)
			fns.SetRelations(defs.rels)
			k.fns.Store(fns)
			if k.loads.Add(1) == 1 {
				close(k.loaded)
			}
		} else {
			wait = retry
		}
		t := time.NewTimer(wait)
		select {
		case <-k.ctx.Done():
			t.Stop()
			return
		case <-k.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// close stops the goroutine and waits for it.
func (k *catalog) close() {
	k.cancel()
	if k.started {
		<-k.done
	}
}

// readCatalog reads the function and relation catalog on a connection, in
// one round trip (sqlclass.CatalogQuery, then sqlclass.RelationsQuery, as
// one string of the simple protocol).
func readCatalog(ctx context.Context, pc *pgconn.PgConn) (catalogDefs, error) {
	mrr := pc.Exec(ctx, sqlclass.CatalogQuery+";\n"+sqlclass.RelationsQuery)
	var defs catalogDefs
	for i := 0; mrr.NextResult(); i++ {
		switch i {
		case 0:
			defs.funcs = readFunctions(mrr.ResultReader())
		case 1:
			defs.rels = readRelations(mrr.ResultReader())
		}
	}
	if err := mrr.Close(); err != nil {
		return catalogDefs{}, err
	}
	return defs, nil
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
		if len(v) != 5 {
			continue
		}
		defs = append(defs, sqlclass.FuncDef{
			Schema:    intern(v[0]),
			Name:      string(v[1]),
			Volatile:  string(v[2]) == "v",
			Procedure: string(v[3]) == "p",
			Extension: intern(v[4]),
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
func (c *Connector) loadCatalog(ctx context.Context) (catalogDefs, error) {
	v := c.view()
	order := make([]*host, 0, len(v.hosts))
	if v.primary != nil {
		order = append(order, v.primary.host)
	}
	for _, healthy := range []bool{true, false} {
		for i := range v.hosts {
			if h := &v.hosts[i]; h != v.primary && h.probe.Healthy == healthy && !h.probe.Removed && h.probe.Untrusted == "" {
				order = append(order, h.host)
			}
		}
	}
	err := errors.New("no host")
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
