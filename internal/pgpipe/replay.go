package pgpipe

// This file is the check of a replica's replay position against a
// caller's, and the wait for it: the SQL (PostgreSQL 19's WAIT FOR LSN, or
// a polling query on older servers), how its answer is read, and the read
// sent after it in the same pipeline, which the server skips when the
// check fails.

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// ErrBehind: the replica's position check found it behind the caller's
// position (or a wait for it ended without it).
var ErrBehind = errors.New("pgrouted: replica has not replayed the caller's writes")

// waitForLSNVersion is the first server_version_num with WAIT FOR LSN.
const waitForLSNVersion = 190000

// hasWaitFor reports whether the server of pc has WAIT FOR LSN.
func hasWaitFor(pc *pgconn.PgConn) bool {
	return serverMajor(pc.ParameterStatus("server_version"))*10000 >= waitForLSNVersion
}

// serverMajor is the major version in a server_version ("15.18 (Debian
// 15.18-0+deb12u1)", "19beta1"), or 0.
func serverMajor(v string) int {
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(v[:end])
	return n
}

// waitStepMs is the polling step of waitSQL: pg_sleep sleeps in whole
// milliseconds.
const waitStepMs = 1

// behindMark starts the error a replica's position check raises when the
// replica lacks the caller's writes; the replay position follows it.
const behindMark = "pgrouted: replica behind at "

// replayAnswer is the answer of the position statements (checkSQL,
// waitSQL) on a replay position r: r as text when it is at or past the
// position target (an SQL expression of type pg_lsn), else a failing cast
// whose error's text carries r after behindMark. The cast depends on the
// row, so the planner cannot fold it.
func replayAnswer(target string) string {
	return fmt.Sprintf(`CASE WHEN r >= %s THEN r::text ELSE (%s || coalesce(r::text, 'none'))::pg_lsn::text END`, target, quoteLiteral(behindMark))
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// checkSQL is the check of a replica's replay position against a
// watermark's position, its parameter $1 (pg_lsn, sent as text): it
// answers the position when the replica has replayed up to it, and fails
// otherwise (replayAnswer), so that a read pipelined after it in the same
// implicit transaction does not run. One text for every position: it is
// prepared once per connection (see checkStmt).
var checkSQL = `SELECT ` + replayAnswer(`$1::pg_lsn`) + ` FROM pg_last_wal_replay_lsn() AS r`

// checkStmt is the statement that checks, or waits up to wait for, the
// replica's replay position to reach lsn on pc (see checkSQL, waitSQL):
// the check named with st, the waits unnamed (their text carries the
// position and the wait). The check's parameter is s's (see scratch),
// valid until its next use.
func checkStmt(pc *pgconn.PgConn, s *scratch, st *Stmts, lsn lagmeter.LSN, wait time.Duration) Encoded {
	switch {
	case wait <= 0:
		s.lsnParam[0] = appendLSN(s.lsnText[:0], lsn)
		e := Encoded{query: checkSQL, params: s.lsnParam[:]}
		if st != nil {
			st.name(&e)
		}
		return e
	case hasWaitFor(pc):
		return Encoded{query: waitForSQL(lsn, wait)}
	}
	return Encoded{query: waitSQL(lsn, wait)}
}

// waitSQL waits up to wait for the replica's replay position to reach lsn,
// then answers as checkSQL does: the position when it reached lsn, else an
// error whose text carries the position (behindMark). It is one query, for
// servers without WAIT FOR LSN: rows of a series, each reading
// pg_last_wal_replay_lsn() after a pg_sleep of waitStepMs (none for the
// first), the first row at or past lsn or past the deadline taken (LIMIT
// 1), so it ends as soon as the position is replayed. The replay function
// is VOLATILE, so the planner re-reads it on every row; the lateral
// subquery depends on the row, so the sleep runs on every row.
func waitSQL(lsn lagmeter.LSN, wait time.Duration) string {
	steps := int64(wait/(waitStepMs*time.Millisecond))*2 + 2
	return `SELECT ` + replayAnswer(quoteLiteral(lsn.String())) + ` ` +
		fmt.Sprintf(`FROM (SELECT w.r FROM generate_series(0, %[2]d) AS g, `+
			`LATERAL (SELECT pg_last_wal_replay_lsn() AS r FROM pg_sleep(CASE WHEN g = 0 THEN 0 ELSE %[3]g END)) AS w `+
			`WHERE w.r >= '%[1]s' OR g = %[2]d OR clock_timestamp() >= statement_timestamp() + interval '%[4]d microseconds' LIMIT 1) AS x`,
			lsn, steps, float64(waitStepMs)/1000, wait.Microseconds())
}

// waitForSQL is waitSQL for PostgreSQL 19 and later: WAIT FOR LSN, which
// fails when the wait times out or the server leaves recovery, so that the
// read pipelined after it does not run (see waitForMissed).
func waitForSQL(lsn lagmeter.LSN, wait time.Duration) string {
	return fmt.Sprintf(`WAIT FOR LSN '%s' WITH (TIMEOUT '%dms')`, lsn, max(wait.Milliseconds(), 1))
}

// waitForMissed reports whether err is WAIT FOR LSN's failure to see the
// position: a timeout, a server that left recovery, or a refusal to wait.
// The read after it in the pipeline did not run.
func waitForMissed(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return strings.Contains(pe.Message, "target LSN") || strings.Contains(pe.Message, "WAIT FOR") ||
		strings.Contains(pe.Message, "recovery is not in progress") ||
		strings.HasPrefix(pe.Code, "25") || strings.HasPrefix(pe.Code, "55")
}

// readReplay reads the answer of a position statement from rr: nil when
// the replica has the position, ErrBehind when it is behind, or the error
// that ended the query; and the replay position the answer carries either
// way (0 when none).
func readReplay(rr *pgconn.ResultReader) (lagmeter.LSN, error) {
	var lsn lagmeter.LSN
	for rr.NextRow() {
		if v := rr.Values(); len(v) == 1 && v[0] != nil {
			lsn, _ = parseLSN(v[0]) // 0 when it is not one (WAIT FOR's answer)
		}
	}
	_, err := rr.Close()
	if err == nil {
		return lsn, nil
	}
	if waitForMissed(err) {
		return 0, ErrBehind
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && strings.Contains(pe.Message, behindMark) {
		text := pe.Message[strings.Index(pe.Message, behindMark)+len(behindMark):]
		text, _, _ = strings.Cut(text, `"`)
		lsn, perr := lagmeter.ParseLSN(text)
		if perr != nil {
			lsn = 0
		}
		return lsn, ErrBehind
	}
	return lsn, err
}

// appendLSN appends lsn as PostgreSQL writes it ("16/B374D848", as
// lagmeter.LSN.String) to b.
func appendLSN(b []byte, lsn lagmeter.LSN) []byte {
	start := len(b)
	b = strconv.AppendUint(b, uint64(lsn)>>32, 16)
	b = append(b, '/')
	b = strconv.AppendUint(b, uint64(lsn)&0xFFFFFFFF, 16)
	for i := start; i < len(b); i++ {
		if c := b[i]; c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return b
}

// Check checks, on pc and alone, that the replica has replayed up to lsn,
// waiting up to wait for it: nil when it has, ErrBehind when it has not
// (then or by the end of the wait), else the error that ended the query.
// replay is the replica's replay position the answer carried (0 when
// none), at or past lsn on success. With st (pc's named statements), the
// check is a named statement, prepared once on the connection.
func Check(ctx context.Context, pc *pgconn.PgConn, st *Stmts, lsn lagmeter.LSN, wait time.Duration) (replay lagmeter.LSN, err error) {
	ce := checkStmt(pc, scratchOf(pc), st, lsn, wait)
	pl := pc.StartPipeline(ctx)
	ce.Send(pl)
	pl.SendPipelineSync()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return 0, err
	}
	replay, err = readCheck(pl, &ce)
	if serr := FinishSync(pl, syncErr(err)); serr != nil && (err == nil || errors.Is(err, ErrBehind)) {
		err = serr
	}
	if cerr := pl.Close(); cerr != nil && err == nil && !IsPgError(cerr) {
		err = cerr
	}
	return replay, err
}

// readCheck reads the answer of the position statement ce from pl (see
// readReplay). Being behind is the statement's answer, not an error of
// it: only another error invalidates a named check.
func readCheck(pl *pgconn.Pipeline, ce *Encoded) (lagmeter.LSN, error) {
	rr, err := ce.Next(pl)
	if err != nil {
		return 0, err
	}
	replay, err := readReplay(rr)
	if err != nil && !errors.Is(err, ErrBehind) {
		ce.failed(err)
	}
	return replay, err
}

// syncErr is the error to read a Sync after (FinishSync): being behind is
// the server's error, after which the Sync is still to be read.
func syncErr(err error) error {
	if errors.Is(err, ErrBehind) {
		return nil
	}
	return err
}

// Checked is a read sent after the check of a replica's replay position
// in one round trip: the check and the read go in one pipeline, in one
// implicit transaction, the check first, so that the server skips the read
// when the check fails. [Checked.Start] sends both and reads the check's
// answer, [Checked.Read] the read's result reader (RR), whose rows stream
// to the caller (driver rows, [Rows.Open], or pgx's own,
// pgx.RowsFromResultReader), and [Checked.Finish] ends the pipeline once
// they are closed. The zero value is ready for Start; a Checked holds no
// closure, so that it can be part of its rows' allocation.
type Checked struct {
	// RR reads the read's result once Read returned nil.
	RR *pgconn.ResultReader

	// Saw is, after Finish, the upper bound of what the read saw
	// (SawSQL, sent after it when Start was asked for it; 0 when it was
	// not, or could not be read).
	Saw lagmeter.LSN

	pl    *pgconn.Pipeline
	e     Encoded
	pe    Encoded // SawSQL, when sent
	saw   bool
	descs *Descs
	err   error // Finish's
}

// Start encodes query with args (see Encode), in pgx's result formats
// with pgxFormats (for pgx.RowsFromResultReader), else stdlib's; sends the
// check that the replica has replayed up to lsn, waiting up to wait for
// it (as [Check] does), and the read, in one pipeline on pc; and reads the
// check's answer. With st, both are named statements (see Encode).
//
// replay and err are the check's, as Check returns them, when err is nil
// or ErrBehind, and sent is when the pipeline was sent; any other error
// is the encoding's or the connection's. When err is nil, the read's
// answer is Read's to read; otherwise the pipeline is closed, and nothing
// more is to be read.
//
// With saw (causal consistency), SawSQL follows the read in the same
// round trip, after its Sync, and Finish reads it into Saw.
func (c *Checked) Start(ctx context.Context, pc *pgx.Conn, descs *Descs, st *Stmts, lsn lagmeter.LSN, wait time.Duration, query string, args []driver.NamedValue, pgxFormats, saw bool) (replay lagmeter.LSN, sent time.Time, err error) {
	results := stdlibRows
	if pgxFormats {
		results = pgxRows
	}
	s := scratchOf(pc.PgConn())
	e, err := encode(ctx, pc, descs, st, query, args, results, s)
	if err != nil {
		return 0, sent, err
	}
	ce := checkStmt(pc.PgConn(), s, st, lsn, wait)
	pl := pc.PgConn().StartPipeline(ctx)
	ce.Send(pl)
	e.Send(pl)
	pl.SendPipelineSync()
	var pe Encoded
	if saw {
		pe = fixed(st, SawSQL)
		pe.Send(pl)
		pl.SendPipelineSync()
	}
	sent = time.Now()
	if err := pl.Flush(); err != nil {
		pl.Close()
		return 0, sent, err
	}
	if replay, err = readCheck(pl, &ce); err != nil {
		pl.Close()
		return replay, sent, err
	}
	*c = Checked{pl: pl, e: e, pe: pe, saw: saw, descs: descs}
	c.e.params, c.e.formats, c.e.results = nil, nil, nil // sent (the first two are the connection's scratch)
	return replay, sent, nil
}

// Read reads the read's result reader into RR, after Start returned nil.
// On error the pipeline is closed: nothing more is to be read, and Finish
// is not to be called.
func (c *Checked) Read() error {
	rr, err := c.e.Next(c.pl)
	if err != nil {
		if IsPgError(err) {
			c.descs.Drop(c.e.query)
		}
		c.pl.Close()
		c.pl = nil
		return err
	}
	c.RR = rr
	return nil
}

// Finish reads what is left of the read (RR) and the Sync after it, ends
// the pipeline, and returns the read's outcome: RR's error, or the
// connection's after it. A refused read has its description dropped and
// its named statement invalidated. Later calls return the same.
func (c *Checked) Finish() error {
	if c.pl == nil {
		return c.err
	}
	pl := c.pl
	c.pl = nil
	_, err := c.RR.Close() // as the rows closed it, or the rest of it
	invalidateOn(c.e.st, c.e.query, err)
	if serr := FinishSync(pl, err); serr != nil && err == nil {
		err = serr
	}
	if c.saw && err == nil {
		var text string
		if _, perr := resultOf(pl, &c.pe, &text); perr == nil {
			c.Saw, _ = lagmeter.ParseLSN(text)
		}
	}
	if cerr := pl.Close(); cerr != nil && err == nil && !IsPgError(cerr) {
		err = cerr
	}
	if IsPgError(err) {
		c.descs.Drop(c.e.query)
	}
	c.err = err
	return err
}

// Err returns what Finish returned, once it ran.
func (c *Checked) Err() error { return c.err }
