package pgrouted

import ()

// This file is what a conn keeps between statements that its paths read
// and change: pinned to the primary session (pin), inside a transaction
// opened with SQL (inSQLTx), on a primary session of an older primary
// (epochChanged), and a catalog to read again (catalogChanged).

// pin pins the connection to its primary session: a statement changed
// session state (or may have: a function the catalog cannot vouch for, a
// read a replica refused), which a replica session would not have, so
// everything runs on the primary session from then on (plan: ReasonPinned).
func (cn *conn) pin() {
	if cn.pinned {
		return
	}
	cn.pinned = true
	cn.c.warnPinnedBehindPooler(cn.host)
}

// inSQLTx reports whether the primary session is inside a transaction that
// was opened with SQL (BEGIN) rather than with BeginTx.
func (cn *conn) inSQLTx() bool {
	return cn.primary != nil && cn.primary.Conn().PgConn().TxStatus() != 'I'
}

// catalogChanged asks for a new snapshot of the function catalog, and
// forgets the statement descriptions, after a statement that may have
// changed them, once no transaction hides the change
// from other sessions.
func (cn *conn) catalogChanged() {
	if cn.tx != nil || cn.inSQLTx() {
		cn.catalogPending = true
		return
	}
	cn.catalogPending = false
	cn.c.funcs.changed()
	cn.c.schemaChanged()
	// The schema may have changed too: describe statements again (a
	// change made elsewhere is met by the recovery of stale.go).
	for _, h := range cn.c.hosts.all() {
		h.descs.Reset()
	}
	if cn.descs != nil {
		cn.descs.Reset()
	}
}

// epochChanged reports whether the primary session belongs to an older
// primary than the topology's current one, or to a term that ended.
func (cn *conn) epochChanged() bool {
	return cn.primary != nil && (cn.c.top.Snapshot().Epoch != cn.epoch || cn.term == nil || cn.term.ended())
}
