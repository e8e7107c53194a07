package pgpipe

// This file is the named prepared statements of the pipelined paths, as
// pgx's QueryExecModeCacheStatement keeps its own: per connection, a
// bounded LRU of statements prepared once (the Parse pipelined before the
// first Bind, or in the round trip that describes the statement),
// deallocated on eviction, and invalidated on any error of the statement.

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"
)

// stmtsKey is the key, in a connection's pgconn.PgConn.CustomData, of its
// Stmts.
const stmtsKey = "pgrouted.pgpipe.stmts"

// Stmts are the named statements prepared on one connection by this
// package. The connection's user owns them as it owns the connection (one
// goroutine at a time); they live in the connection's CustomData, so they
// go with it.
//
// Nothing is known for sure of a statement whose Parse was sent and whose
// answer was not read (a pipeline abandoned after an error): such a name
// is deallocated (a Close message, which PostgreSQL answers for a name it
// does not know too) before it is prepared again. So a Close always
// precedes a Parse of a name, in the same pipeline.
type Stmts struct {
	capacity int
	lru      list.List                // of *stmtEntry, the most recently used first
	byQuery  map[string]*list.Element // of lru, by query text
	closing  []string                 // names to deallocate: evicted, or invalidated
}

// stmtEntry is a statement prepared on the connection.
type stmtEntry struct {
	query string
	name  string
	oids  []uint32 // the parameter types it was prepared with (see prefix)
}

// StmtsOf returns the named statements of pc, made on first use, holding
// at most capacity statements; nil (statements stay unnamed) when capacity
// is not positive (as pgx's cache_statement mode needs a statement cache)
// or pc carries no CustomData.
func StmtsOf(pc *pgconn.PgConn, capacity int) *Stmts {
	data := pc.CustomData()
	if capacity <= 0 || data == nil {
		return nil
	}
	if st, ok := data[stmtsKey].(*Stmts); ok {
		return st
	}
	st := &Stmts{capacity: capacity, byQuery: make(map[string]*list.Element)}
	data[stmtsKey] = st
	return st
}

// Forget forgets the named statements of pc, after a DEALLOCATE ALL
// removed them from the server.
func Forget(pc *pgconn.PgConn) {
	if data := pc.CustomData(); data != nil {
		delete(data, stmtsKey)
	}
}

// InvalidateAll invalidates every named statement of pc: each is
// deallocated by the next pipeline and prepared again at its next use. For
// a statement that may have deallocated them (DEALLOCATE, DISCARD) or
// changed what their names mean (SET search_path).
func InvalidateAll(pc *pgconn.PgConn) {
	data := pc.CustomData()
	if data == nil {
		return
	}
	st, ok := data[stmtsKey].(*Stmts)
	if !ok {
		return
	}
	for el := st.lru.Front(); el != nil; el = el.Next() {
		st.closing = append(st.closing, el.Value.(*stmtEntry).name)
	}
	st.lru.Init()
	clear(st.byQuery)
}

// Len is the number of statements prepared.
func (st *Stmts) Len() int { return st.lru.Len() }

// stmtName is the name of query's statement: stable across connections,
// as pgx's stmtcache.StatementName, with a prefix of its own (pgx's own
// statements of the same text are pgx's).
func stmtName(query string) string {
	digest := sha256.Sum256([]byte(query))
	return "pgrouted_" + hex.EncodeToString(digest[0:24])
}

// prepared returns the name of query's statement when it is prepared with
// the parameter types oids, and marks it used.
func (st *Stmts) prepared(query string, oids []uint32) (string, bool) {
	el, ok := st.byQuery[query]
	if !ok {
		return "", false
	}
	ent := el.Value.(*stmtEntry)
	if !slices.Equal(ent.oids, oids) {
		return "", false
	}
	st.lru.MoveToFront(el)
	return ent.name, true
}

// add records query's statement as prepared under name with oids,
// evicting the least recently used one past the capacity (it is
// deallocated by the next pipeline).
func (st *Stmts) add(query, name string, oids []uint32) {
	if el, ok := st.byQuery[query]; ok {
		st.lru.Remove(el)
	}
	st.byQuery[query] = st.lru.PushFront(&stmtEntry{query: query, name: name, oids: oids})
	st.unclose(name)
	for st.lru.Len() > st.capacity {
		el := st.lru.Back()
		ent := el.Value.(*stmtEntry)
		st.lru.Remove(el)
		delete(st.byQuery, ent.query)
		st.closing = append(st.closing, ent.name)
	}
}

// invalidate forgets query's statement after an error of it, as pgx
// invalidates its cached statements: it is deallocated, and prepared
// afresh at its next use.
func (st *Stmts) invalidate(query string) {
	el, ok := st.byQuery[query]
	if !ok {
		return
	}
	ent := el.Value.(*stmtEntry)
	st.lru.Remove(el)
	delete(st.byQuery, query)
	st.closing = append(st.closing, ent.name)
}

// unclose takes name out of the names to deallocate: it is being
// prepared (after a Close of its own) or is prepared.
func (st *Stmts) unclose(name string) {
	st.closing = slices.DeleteFunc(st.closing, func(n string) bool { return n == name })
}

// closed records that the server answered a Close of name.
func (st *Stmts) closed(name string) { st.unclose(name) }

// name makes e a named statement of st: its statement's name, and whether
// it must be prepared before its Bind (it is not prepared with e's
// parameter types). Every statement of a pipeline is named before the
// first is sent.
func (st *Stmts) name(e *Encoded) {
	e.st = st
	if name, ok := st.prepared(e.query, e.oids); ok {
		e.name = name
		return
	}
	if el, ok := st.byQuery[e.query]; ok {
		// Prepared with other parameter types (a description read
		// afresh): prepared again.
		st.lru.Remove(el)
		delete(st.byQuery, e.query)
	}
	e.name = stmtName(e.query)
	// Neither prepared nor to deallocate while its Parse is on its way:
	// a Close sent after it in the pipeline would undo it.
	st.unclose(e.name)
	e.parse = true
}

// sendPrefix queues in pl what must precede e's Bind: the deallocations
// pending (taken at send time: a name being prepared is not among them),
// then, when e's statement is to be prepared, a Close and a Parse of its
// name. e.closes records the Closes sent, whose answers prefix reads.
func (e *Encoded) sendPrefix(pl *pgconn.Pipeline) {
	e.closes = append(e.closes[:0], e.st.closing...)
	if e.parse {
		e.closes = append(e.closes, e.name)
	}
	for _, n := range e.closes {
		pl.SendDeallocate(n)
	}
	if e.parse {
		pl.SendPrepare(e.name, e.query, e.oids)
	}
}

// prefix reads, from pl, the answers of what e sent before its Bind (see
// Stmts.name): the Closes' and the Parse's, whose statement description it
// returns (nil without a Parse). An error is the statement's: the server
// skipped the rest up to the Sync.
func (e *Encoded) prefix(pl *pgconn.Pipeline) (*pgconn.StatementDescription, error) {
	if e.st == nil {
		return nil, nil
	}
	for _, n := range e.closes {
		res, err := pl.GetResults()
		if err != nil {
			return nil, err
		}
		if _, ok := res.(*pgconn.CloseComplete); !ok {
			return nil, errUnexpected
		}
		e.st.closed(n)
	}
	e.closes = e.closes[:0]
	if !e.parse {
		return nil, nil
	}
	res, err := pl.GetResults()
	if err != nil {
		return nil, err
	}
	sd, ok := res.(*pgconn.StatementDescription)
	if !ok {
		return nil, errUnexpected
	}
	e.parse = false
	// Prepared with e's parameter types: the ones it is looked up by
	// (none for a statement whose types the server infers).
	e.st.add(e.query, e.name, e.oids)
	return sd, nil
}

// failed records the outcome err of e's statement: a named statement that
// failed is invalidated, as pgx invalidates its own on any error.
func (e *Encoded) failed(err error) { invalidateOn(e.st, e.query, err) }

// invalidateOn is Encoded.failed for a closure (rows' done), which then
// keeps only st and query, not the whole Encoded.
func invalidateOn(st *Stmts, query string, err error) {
	if err != nil && st != nil {
		st.invalidate(query)
	}
}
