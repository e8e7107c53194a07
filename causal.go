package pgrouted

import (
	"context"
	"database/sql/driver"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/internal/consistency"
	"github.com/pgrouted/pgrouted/internal/pgpipe"
	"github.com/pgrouted/pgrouted/internal/sqlclass"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// This file is causal consistency's share of the paths: after a read
// under causal consistency, the scope it ran in (its Session's, else the
// Connector's relations) records an upper bound of what the read saw
// (consistency.Scopes.Saw), which its next reads need as they need its
// writes. The bound is read in the read's own round trip: SawSQL
// (internal/pgpipe) pipelined after the read (after a replica read:
// the later of the replica's receive and replay positions; after a
// primary read: the WAL insert position). Where the read's path cannot
// pipeline it (a string of several statements, a pgx batch, an exec mode
// the caller chose, a read inside a transaction opened with SQL), the
// bound is left unknown, and the primary's first probe sent after the
// read ended supplies it (consistency.Mark.Settle): reads of the scope go
// to the primary until then. A transaction begun with BeginTx reads it
// once it ended (tx.sawAfter).

// sawBy is what a read under causal consistency records once it ended
// (record): the scope it ran in and the relations it read. Only such
// reads carry one (call.saw): the other reads allocate nothing for it.
type sawBy struct {
	c       *Connector
	scopes  *consistency.Scopes
	session bool           // scopes is a Session's: a bound counts for every relation
	reads   sqlclass.Scope // the relations it read
	// h is the host that runs it (the primary: primary), set by the path
	// before each attempt.
	h       *host
	primary bool
}

// on sets the host the read runs on (its primary: primary); a nil s does
// nothing.
func (s *sawBy) on(h *host, primary bool) {
	if s != nil {
		s.h, s.primary = h, primary
	}
}

// sawFor returns what a statement planned p records after it ran: nil
// unless it is a read under causal consistency (outside a transaction
// begun with BeginTx, which records what it saw once it ends: sawAfter).
func (c *Connector) sawFor(p *plan) *sawBy {
	if p.in.Level != consistency.Causal || p.class != sqlclass.Read || p.in.Scopes == nil || p.in.DryRun {
		return nil
	}
	return &sawBy{c: c, scopes: p.in.Scopes, session: p.in.Session, reads: p.reads}
}

// record records that the read ran on s.h (the primary: s.primary) and
// saw at most lsn, the answer of SawSQL read after it (0: none could be read:
// the bound is then the primary's next probe). A Session's read orders
// its next reads of every relation; the Connector's, those of the
// relations it read (a read of unknown relations: every relation).
func (s *sawBy) record(lsn lagmeter.LSN) {
	if s == nil {
		return
	}
	var w lagmeter.Watermark
	if hv := s.c.view().of(s.h); lsn != 0 && hv != nil {
		if s.primary {
			// The insert position, as raise reads it after a write.
			w = hv.insertWatermark(lsn)
		} else {
			w = hv.watermark(lsn)
		}
	}
	named := s.reads.Named && !s.session
	s.scopes.Saw(named, s.reads.Keys[:s.reads.N], w, consistency.Now())
}

// recordUnknown is record for a read whose bound could not be read in its
// round trip, once what it returned is closed: the rows (wrapped, so that
// their Close records it), pgx's rows or batch results (once closed), or
// now. The read's snapshot was taken before then, so the primary's first
// probe sent after it is at or past what it saw.
func (s *sawBy) recordUnknown(cl *call) {
	if s == nil {
		return
	}
	if !cl.ex.whenClosed(cl, func(error) { s.record(0) }) {
		s.record(0)
	}
}

// sawSent is sawOutcome for a read that was sent: the done function of
// pgpipe.QueryRead.
func (s *sawBy) sawSent(lsn lagmeter.LSN, err error) { s.sawOutcome(lsn, true, err) }

// sawOutcome records the bound lsn read after a read whose outcome was
// err: none when it failed before anything was sent (it saw nothing),
// unknown when it failed after (it may have returned rows).
func (s *sawBy) sawOutcome(lsn lagmeter.LSN, sent bool, err error) {
	switch {
	case !sent:
	case err != nil:
		s.record(0)
	default:
		s.record(lsn)
	}
}

// sawPending is a pgx Query of the Pool on a replica under causal
// consistency, sent with SawSQL after it (pgpipe.Pending.StartRead): once
// its rows are closed, finish reads the bound and records it.
type sawPending struct {
	p   pgpipe.Pending
	saw *sawBy
}

// finish reads the bound after the read, whose rows are closed, and
// records it (record): nothing when the read failed before its first row
// (runs elsewhere: it saw nothing), unknown when it failed after one.
func (w *sawPending) finish(rowsSeen bool) {
	_, rerr := w.p.RR.Close()
	pos, sent, err := w.p.Finish(rerr)
	if err != nil && !rowsSeen {
		return
	}
	w.saw.sawOutcome(pos, sent, err)
}

// readSaw runs cl, a database/sql query under causal consistency, on b,
// a borrowed replica connection, with SawSQL after it in the same round
// trip (pgpipe.QueryRead): its rows (sawRows) record the bound when they
// are closed, then give b back.
func (cn *conn) readSaw(ctx context.Context, b *borrowed, cl *call) error {
	h, saw := b.h, cl.saw
	rows, err := pgpipe.QueryRead(ctx, b.conn(), &h.descs, cn.c.stmtsOf(h, b.conn()), cl.query, cl.args, pgpipe.SawSQL, saw.sawSent)
	if err != nil {
		return err
	}
	cl.rows = &sawRows{Rows: rows.(*pgpipe.Rows), b: b}
	return nil
}

// readSawOnPrimary runs cl, a database/sql query under causal consistency,
// on the primary session sc with the insert position read after it in the
// same round trip (pgpipe.QueryRead): the bound of what it saw, recorded
// at the rows' end. On a session without state of its own (stateless:
// sendAs.read), its end after the rows the caller read does not fail them
// (endRows).
func (cn *conn) readSawOnPrimary(ctx context.Context, sc *stdlib.Conn, cl *call, stateless bool) (driver.Rows, error) {
	saw, pc := cl.saw, sc.Conn()
	rows, err := pgpipe.QueryRead(ctx, pc, cn.descsOf(), cn.c.stmtsOf(cn.host, pc), cl.query, cl.args, pgpipe.InsertPositionSQL, saw.sawSent)
	if err != nil || !stateless {
		return rows, err
	}
	return &endRows{Rows: rows, pc: pc}, nil
}

// sawAfter records, under causal consistency, what a transaction that
// raised no mark saw (a read-only one, or one rolled back): SawSQL read
// on its connection once it ended, before the connection is given back,
// bounds every statement's snapshot in it. It is one more round trip per
// such transaction (a COMMIT's answer cannot carry it: pgx's Tx.Commit
// runs it). It counts for every relation: a transaction's reads are not
// followed one by one.
func (t *tx) sawAfter() {
	if t.in.Level != consistency.Causal || t.in.Scopes == nil {
		return
	}
	var pc *pgx.Conn
	switch {
	case t.replica != nil:
		pc = t.replica.conn()
	case t.cn.primary != nil:
		pc = t.cn.primary.Conn()
	}
	var lsn lagmeter.LSN
	if pc != nil && !pc.IsClosed() && pc.PgConn().TxStatus() == 'I' {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), positionTimeout)
		var text string
		if pc.QueryRow(ctx, pgpipe.SawSQL, pgx.QueryExecModeSimpleProtocol).Scan(&text) == nil {
			lsn, _ = lagmeter.ParseLSN(text)
		}
		cancel()
	}
	s := sawBy{c: t.cn.c, scopes: t.in.Scopes, session: true, h: t.host, primary: t.replica == nil}
	s.record(lsn)
}
