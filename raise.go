package pgrouted

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file raises the read-your-writes marks after a committed write
// (raise*): the Connector's and the Session's, to the position read after
// it, or to an unknown or deferred one.

// raise raises the read-your-writes marks after a committed write to the
// relations ws on primary host at insert position lsn (0: unknown): the
// Connector's, and the Session's of in. sent is a time (consistency.Now)
// taken before the query that read lsn was sent (zero when none is
// known): the position also serves the global reads that began before it
// and still wait for one (positionRead).
func (c *Connector) raise(in *consistency.Intent, ws sqlclass.Scope, host *host, lsn lagmeter.LSN, sent time.Time) {
	if !in.Tracks {
		return
	}
	var w lagmeter.Watermark
	if hv := c.view().of(host); lsn != 0 && hv != nil {
		w = hv.insertWatermark(lsn)
	}
	c.positionRead(host, w, sent)
	now := time.Now()
	c.rw.writes.Wrote(ws.Named, ws.Keys[:ws.N], w, now, sent)
	if in.Session {
		in.Scopes.Wrote(ws.Named, ws.Keys[:ws.N], w, now, sent)
	}
}

// raiseOutcome raises the marks after one statement (or COMMIT) read its
// position pipelined: to pos when it succeeded; not at all when the
// server refused it (nothing committed) or it was never sent (an argument
// that cannot be encoded); to an unknown position when the connection
// failed under it (the answer was lost, not the commit). sent: see raise.
func (c *Connector) raiseOutcome(in *consistency.Intent, ws sqlclass.Scope, host *host, pos lagmeter.LSN, sent time.Time, err error) {
	switch {
	case err == nil:
		c.raise(in, ws, host, pos, sent)
	case pgpipe.IsPgError(err) || pgpipe.IsEncodeError(err) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, driver.ErrBadConn):
	default:
		c.raise(in, ws, host, 0, time.Time{})
	}
}

// raiseReading raises the marks after a committed write on primary host
// whose position is read now on pc, a primary session, after it, unless
// it is deferred (raiseDeferred).
func (c *Connector) raiseReading(ctx context.Context, in *consistency.Intent, ws sqlclass.Scope, host *host, pc *pgx.Conn) {
	if in.Defers() {
		c.raiseDeferred(in, ws, host)
		return
	}
	sent := consistency.Now()
	c.raise(in, ws, host, c.insertLSN(ctx, in, pc), sent)
}

// raiseDeferred records a committed write on primary host whose position
// is deferred: read when a read needs it (consistency.DeferredUse).
func (c *Connector) raiseDeferred(in *consistency.Intent, ws sqlclass.Scope, host *host) {
	if !in.Tracks {
		return
	}
	var on lagmeter.Watermark
	if hv := c.view().of(host); hv != nil {
		on = hv.watermark(0)
	}
	c.rw.writes.WroteDeferred(ws.Named, ws.Keys[:ws.N], on, consistency.Now())
}

// raiseAfterRows raises the marks once the rows of a write on primary host
// are closed (a statement returning rows commits once they are all sent,
// and the primary session is busy until then): reading the position on
// cn's primary session when it is still there outside a transaction, else
// to an unknown position. Both faces' rows call it (wroteRows, pgx's rows
// of the Pool).
func (cn *conn) raiseAfterRows(ctx context.Context, in *consistency.Intent, ws sqlclass.Scope, host *host) {
	if cn.primary != nil && !cn.inSQLTx() {
		cn.c.raiseReading(ctx, in, ws, host, cn.primary.Conn())
		return
	}
	cn.c.raise(in, ws, host, 0, time.Time{})
}
