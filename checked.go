package pgrouted

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// behindMark starts the error a replica's position check raises when the
// replica lacks the caller's writes; the replay position follows it.
const behindMark = "pgrouted: replica behind at "

// checkSQL is the inline check of a replica's replay position against a
// watermark: it answers the position when the replica has replayed up to
// lsn, and fails otherwise, so that a read pipelined after it in the same
// implicit transaction does not run. The error's text carries the position
// (see behindMark); the failing cast depends on the row, so the planner
// cannot fold it.
func checkSQL(lsn lagmeter.LSN) string {
	return fmt.Sprintf(`SELECT CASE WHEN r >= '%s' THEN r::text ELSE (%s || coalesce(r::text, 'none'))::pg_lsn::text END FROM pg_last_wal_replay_lsn() AS r`,
		lsn, quoteLiteral(behindMark))
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// pipelinable reports whether a read can be sent in a pgconn pipeline
// (see readChecked): one statement that returns rows, and see
// Connector.pipelineOK.
func (cn *conn) pipelinable(host int, cl *call) bool {
	return cl.isQuery && cl.single && cn.c.pipelineOK(host, cl.args)
}

// readChecked runs a read on a borrowed replica connection after checking,
// in the same round trip, that the replica has replayed up to wm: the check
// and the read go in one pipeline, in one implicit transaction, the check
// first; when the check fails the server skips the read and readChecked
// returns errNotCaughtUp. The position the check read refreshes what the
// connector knows of the replica. On success cl.rows own b: closing them
// gives it back; on error the caller gives it back (again: giveBack is
// idempotent).
func (cn *conn) readChecked(ctx context.Context, b *borrowed, host int, wm lagmeter.Watermark, cl *call) error {
	snap := cn.c.top.Snapshot()
	h := &snap.Hosts[host]
	// What the replica's history allows: a position on it can reach wm
	// only if wm's timeline is in it.
	if ok, _ := wm.ReachedBy(lagmeter.Position{SystemID: h.SystemID, Timeline: h.Timeline, Replay: ^lagmeter.LSN(0)}, switchPoint(snap, wm.Timeline)); !ok {
		return errNotCaughtUp
	}
	pc := b.Conn.Conn()
	if cn.c.descs.get(cl.query) == nil {
		// The statement must be described first, and a replica that lacks
		// the caller's writes may fail to (a table the caller just
		// created): check it on its own this once.
		if err := cn.checkReplay(ctx, b, host, wm); err != nil {
			return err
		}
	}
	e, err := cn.c.encode(ctx, pc, cl.query, cl.args, true)
	if err != nil {
		return err
	}
	pl := pc.PgConn().StartPipeline(ctx)
	pl.SendQueryParams(checkSQL(wm.LSN), nil, nil, nil, nil)
	e.send(pl)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return err
	}
	var text string
	rr, err := nextResult(pl)
	if err == nil {
		for rr.NextRow() {
			if v := rr.Values(); len(v) == 1 && v[0] != nil {
				text = string(v[0])
			}
		}
		_, err = rr.Close()
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && strings.Contains(pe.Message, behindMark) {
			err = errNotCaughtUp
			text = pe.Message[strings.Index(pe.Message, behindMark)+len(behindMark):]
			text, _, _ = strings.Cut(text, `"`)
		}
		if lsn, perr := lagmeter.ParseLSN(text); perr == nil && lsn != 0 {
			cn.c.noteReplay(host, h.Conn, lsn)
		}
		pl.Close()
		return err
	}
	if lsn, perr := lagmeter.ParseLSN(text); perr == nil && lsn != 0 {
		cn.c.noteReplay(host, h.Conn, lsn)
	}
	rr, err = nextResult(pl)
	if err != nil {
		if isPgError(err) {
			cn.c.descs.drop(cl.query)
		}
		pl.Close()
		return err
	}
	cl.rows, err = newResultRows(pc.TypeMap(), rr, func(rerr error) error {
		if serr := finishSync(pl, rerr); serr != nil && rerr == nil {
			rerr = serr
		}
		if cerr := pl.Close(); cerr != nil && rerr == nil && !isPgError(cerr) {
			rerr = cerr
		}
		if isPgError(rerr) {
			cn.c.descs.drop(cl.query)
		}
		b.giveBack()
		return rerr
	})
	return err
}
