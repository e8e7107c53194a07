package pgrouted

// This file is the classification cache: the classes of statement texts
// already classified, so that the texts an application sends again and
// again (an ORM's, a prepared statement's) are lexed once, not on every
// run. A classification depends on the text and on the function catalog's
// snapshot it judged calls by (catalog.go): an entry made under an older
// snapshot is a miss.

import (
	"context"
	"hash/maphash"
	"strings"
	"sync/atomic"

	"github.com/pgrouted/pgrouted/internal/sqlclass"
)

const (
	// classSlots is the number of entries: a text goes to the slot its
	// hash names, replacing what was there. An application's recurring
	// texts (an ORM's, its prepared statements') number in the tens or
	// hundreds; one that inlines values in its texts replaces entries at
	// each statement and pays one classification per statement, as
	// without a cache.
	classSlots = 1024
	// maxClassifiedLen is the longest text the cache keeps: a longer one
	// (a batch, a migration) is classified on every run.
	maxClassifiedLen = 4096
)

// classCache maps statement texts to their classifications, each under
// the catalog snapshot it was made with: a direct-mapped table of
// immutable entries. Lookups take no lock and do not allocate; a store
// allocates one entry and a copy of the text.
type classCache struct {
	seed  maphash.Seed
	slots [classSlots]atomic.Pointer[classEntry]
}

// classEntry is one text's classification under the catalog snapshot fns.
type classEntry struct {
	query string
	fns   *sqlclass.Functions
	r     sqlclass.Result
}

func newClassCache() *classCache { return &classCache{seed: maphash.MakeSeed()} }

func (cc *classCache) slot(query string) *atomic.Pointer[classEntry] {
	return &cc.slots[maphash.String(cc.seed, query)%classSlots]
}

// get writes query's classification under fns to dst, if the cache holds
// it, and reports whether it did.
func (cc *classCache) get(query string, fns *sqlclass.Functions, dst *sqlclass.Result) bool {
	e := cc.slot(query).Load()
	if e == nil || e.fns != fns || e.query != query {
		return false
	}
	*dst = e.r
	return true
}

// put stores query's classification r under fns.
func (cc *classCache) put(query string, fns *sqlclass.Functions, r sqlclass.Result) {
	if len(query) > maxClassifiedLen {
		return
	}
	// A copy: query may be a slice of a larger buffer the entry would
	// keep alive.
	cc.slot(query).Store(&classEntry{query: strings.Clone(query), fns: fns, r: r})
}

// classify classifies query into dst, judging the functions it calls by the
// catalog's snapshot. Before the first snapshot every function is unknown:
// a statement that calls one waits for it (catalogBootWait at most) rather
// than pin its connection for a call of count(*). Classifications under a
// loaded snapshot are cached (classcache.go); those made before the first
// load are not, so that the next run of the same text waits for it again.
// After a catalog change of the Connector's own, until the snapshot read
// after it is in, see readAfterOwnChange.
func (c *Connector) classify(ctx context.Context, query string, dst *sqlclass.Result) {
	if c.funcs.stale() {
		// A catalog change of the Connector's own is not in the
		// snapshot yet: the relations a statement writes and reads
		// cannot be told from it (catalog.stale).
		defer func() { dst.Reads, dst.Writes = sqlclass.AllRelations, sqlclass.AllRelations }()
		c.classifyWith(ctx, query, dst)
		if dst.Class == sqlclass.Read {
			c.readAfterOwnChange(ctx, query, dst)
		}
		return
	}
	c.classifyWith(ctx, query, dst)
}

// readAfterOwnChange classifies query, a read by the stale snapshot, again
// under the snapshot read after the Connector's own catalog change, which
// it waits for (catalogFreshWait at most): the change may have made code
// the stale snapshot does not know run in the read (a view replaced by one
// that calls a function, a domain's new check), which must not run on a
// replica's shared connection. When none came in time, the read is taken
// for one that runs hidden code: the primary, and the session stays there.
func (c *Connector) readAfterOwnChange(ctx context.Context, query string, dst *sqlclass.Result) {
	if !c.funcs.waitFresh(ctx, catalogFreshWait) {
		dst.AssumeHidden()
		return
	}
	c.classifyWith(ctx, query, dst)
}

// classifyWith is classify under the current snapshot.
func (c *Connector) classifyWith(ctx context.Context, query string, dst *sqlclass.Result) {
	fns := c.funcs.functions()
	if c.classes.get(query, fns, dst) {
		return
	}
	*dst = classifyText(query, fns)
	if !c.funcs.isLoaded() {
		if dst.Func != sqlclass.FuncUnknown || !c.funcs.waitLoaded(ctx, catalogBootWait) {
			return
		}
		fns = c.funcs.functions()
		*dst = classifyText(query, fns)
	}
	c.classes.put(query, fns, *dst)
}
