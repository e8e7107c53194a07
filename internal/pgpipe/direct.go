package pgpipe

// This file is the positioned write sent without a pgconn.Pipeline, in the
// steady state: when nothing has to be prepared or deallocated before the
// statement (its named statement and the position query's are prepared,
// or both are unnamed). A pgconn.Pipeline keeps a queue of what it sent,
// a few allocations per message; here the round trip is the same and
// pgconn keeps its own bookkeeping:
//
//   - the statement's messages (Bind, or Parse and Bind for the unnamed
//     statement; Describe; Execute; Sync) are queued in the connection's
//     frontend, unflushed;
//   - pgconn's ExecPrepared (ExecParams for the unnamed one) of the
//     position query appends its own (… Sync) and flushes them all in one
//     write, with the connection locked and the context watched as for
//     any pgx statement;
//   - the *pgconn.ResultReader it returns reads the answers in order: the
//     statement's first (its rows, its command tag or its error), and up
//     to the statement's ReadyForQuery when closed, where pgconn unlocks
//     the connection (the statement has committed);
//   - the position query's answer, which follows, is read message by
//     message with PgConn.ReceiveMessage up to its own ReadyForQuery
//     (readPosition), after which the connection is idle as pgx left it.
//
// What pgconn does with every message (the transaction status of each
// ReadyForQuery, notices, notifications, parameter statuses, a FATAL
// error closing the connection, a failed read closing it) is done, since
// every message goes through pgconn's own receive.

import (
	"context"
	"database/sql/driver"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/pgrouted/pgrouted/lagmeter"
)

// scratchKey is the key, in a connection's pgconn.PgConn.CustomData, of
// its scratch.
const scratchKey = "pgrouted.pgpipe.scratch"

// scratch is what the positioned write (and the replica check) reuses on
// one connection from one statement to the next, as pgx keeps its
// ExtendedQueryBuilder per connection: the arguments' encoding buffers,
// the messages queued directly and the check's parameter. The connection's user owns it as it owns the connection (one
// goroutine at a time).
type scratch struct {
	eqb  pgx.ExtendedQueryBuilder
	vals []any

	parse    pgproto3.Parse
	bind     pgproto3.Bind
	describe pgproto3.Describe
	execute  pgproto3.Execute
	sync     pgproto3.Sync

	// The replica check's parameter (checkStmt): the position as text.
	lsnParam [1][]byte
	lsnText  [17]byte
}

// scratchOf returns pc's scratch, made on first use; a new one when pc
// carries no CustomData.
func scratchOf(pc *pgconn.PgConn) *scratch {
	data := pc.CustomData()
	if data == nil {
		return new(scratch)
	}
	if s, ok := data[scratchKey].(*scratch); ok {
		return s
	}
	s := new(scratch)
	data[scratchKey] = s
	return s
}

// values returns args' values in s's buffer.
func (s *scratch) values(args []driver.NamedValue) []any {
	if cap(s.vals) < len(args) {
		s.vals = make([]any, len(args))
	}
	vals := s.vals[:len(args)]
	for i, a := range args {
		vals[i] = a.Value
	}
	return vals
}

// direct reports whether the statement e and the position query pe may be
// sent without a pipeline: nothing precedes either's Bind (no statement
// to prepare, no name to deallocate; see Stmts). e and pe are named.
func direct(ctx context.Context, pc *pgconn.PgConn, e, pe *Encoded) bool {
	if ctx.Err() != nil || pc.IsClosed() || pc.IsBusy() {
		// The pipeline's path reports it, without sending anything.
		return false
	}
	if e.st != nil && e.parse {
		return false
	}
	st := pe.st
	return st == nil || (!pe.parse && len(st.closing) == 0)
}

// startDirect sends e and the position query pe in one write and returns
// the reader of e's answer (see the file's comment). An error means that
// nothing was sent: the connection is closed, as the caller's context
// ended before pgconn sent e's messages, which must never be sent later.
func startDirect(ctx context.Context, pc *pgconn.PgConn, s *scratch, e, pe *Encoded) (*pgconn.ResultReader, error) {
	f := pc.Frontend()
	if e.st == nil {
		s.parse = pgproto3.Parse{Query: e.query, ParameterOIDs: e.oids}
		f.SendParse(&s.parse)
		s.bind = pgproto3.Bind{ParameterFormatCodes: e.formats, Parameters: e.params, ResultFormatCodes: e.results}
	} else {
		s.bind = pgproto3.Bind{PreparedStatement: e.name, ParameterFormatCodes: e.formats, Parameters: e.params, ResultFormatCodes: e.results}
	}
	f.SendBind(&s.bind)
	s.describe = pgproto3.Describe{ObjectType: 'P'}
	f.SendDescribe(&s.describe)
	f.SendExecute(&s.execute)
	f.SendSync(&s.sync)
	// Keep none of the statement's values alive.
	s.parse, s.bind = pgproto3.Parse{}, pgproto3.Bind{}

	var rr *pgconn.ResultReader
	if pe.st == nil {
		rr = pc.ExecParams(ctx, pe.query, nil, nil, nil, nil)
	} else {
		rr = pc.ExecPrepared(ctx, pe.name, nil, nil, nil)
	}
	if !pc.IsBusy() && !pc.IsClosed() {
		// pgconn gave up before it flushed (the context ended since
		// direct looked): e's messages wait in the frontend's buffer.
		_, err := rr.Close()
		discard(pc)
		return nil, err
	}
	return rr, nil
}

// discard closes pc without sending what its frontend holds: its network
// connection first, so that pgconn's Close cannot flush it.
func discard(pc *pgconn.PgConn) {
	_ = pc.Conn().Close()
	_ = pc.Close(context.Background())
}

// readPosition reads the answer of the position query from pc, whose
// statement's answer was read up to its ReadyForQuery (see the file's
// comment), and returns the position, 0 when it could not be read. A
// connection left in the middle of the answer (broken, or ctx ended) is
// closed: it is found closed at its next use.
func readPosition(ctx context.Context, pc *pgconn.PgConn) lagmeter.LSN {
	if pc.IsClosed() {
		return 0
	}
	var stop func() bool
	if ctx.Done() != nil {
		// pgconn watches no context between two ReceiveMessage calls
		// given context.Background(): one watch for the whole answer.
		nc := pc.Conn()
		stop = context.AfterFunc(ctx, func() { _ = nc.SetReadDeadline(time.Unix(1, 0)) })
	}
	pos, synced := receivePosition(pc)
	if stop != nil && !stop() {
		// The deadline is set, or being set: the connection is done.
		synced = false
	}
	if !synced {
		if !pc.IsClosed() {
			discard(pc)
		}
		return 0
	}
	return pos
}

// receivePosition reads the position query's answer from pc up to its
// ReadyForQuery: the position (0 when there was none, or an error), and
// whether the ReadyForQuery came.
func receivePosition(pc *pgconn.PgConn) (pos lagmeter.LSN, synced bool) {
	failed := false
	for {
		msg, err := pc.ReceiveMessage(context.Background())
		if err != nil {
			return 0, false
		}
		switch msg := msg.(type) {
		case *pgproto3.DataRow:
			if len(msg.Values) > 0 {
				var ok bool
				if pos, ok = parseLSN(msg.Values[0]); !ok {
					failed = true
				}
			}
		case *pgproto3.ErrorResponse:
			failed = true
		case *pgproto3.ReadyForQuery:
			if failed {
				pos = 0
			}
			return pos, true
		case *pgproto3.ParseComplete, *pgproto3.BindComplete, *pgproto3.RowDescription,
			*pgproto3.NoData, *pgproto3.CommandComplete,
			*pgproto3.NoticeResponse, *pgproto3.ParameterStatus, *pgproto3.NotificationResponse:
		default:
			return 0, false
		}
	}
}

// parseLSN parses a WAL position as PostgreSQL writes it ("16/B374D848"),
// as lagmeter.ParseLSN does, from the bytes of a row without copying them.
func parseLSN(b []byte) (lagmeter.LSN, bool) {
	var hi, lo uint64
	digits, slash := 0, false
	for _, c := range b {
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		case c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case c == '/' && !slash && digits > 0:
			slash, digits = true, 0
			continue
		default:
			return 0, false
		}
		if digits++; digits > 8 {
			return 0, false
		}
		if slash {
			lo = lo<<4 | d
		} else {
			hi = hi<<4 | d
		}
	}
	if !slash || digits == 0 {
		return 0, false
	}
	return lagmeter.LSN(hi<<32 | lo), true
}

// ExecPlain runs query with args on pc as stdlib's Conn.ExecContext does (pgx's
// Exec; driver.ErrBadConn when pc is closed or nothing was sent), with the
// arguments in pc's scratch, and returns pgx's command tag with the error
// too: an empty one when the server answered nothing.
// Unlike stdlib, it takes an error for nothing sent only when NothingSent
// says so; a connection closed before the call is driver.ErrBadConn.
func ExecPlain(ctx context.Context, pc *pgx.Conn, query string, args []driver.NamedValue) (pgconn.CommandTag, error) {
	if pc.IsClosed() {
		return pgconn.CommandTag{}, driver.ErrBadConn
	}
	s := scratchOf(pc.PgConn())
	vals := s.values(args)
	tag, err := pc.Exec(ctx, query, vals...)
	clear(vals) // keep none of the statement's values alive
	if err != nil && NothingSent(err) {
		return tag, driver.ErrBadConn
	}
	return tag, err
}

// NothingSent reports whether err, from a statement of pgx's on a
// connection that was open when it began, means that nothing of it was
// sent: pgconn.SafeToRetry, but not pgconn's "conn closed", which pgconn
// also returns, safe to retry, from a read once the connection was closed
// under a statement it had sent (by another goroutine: a primary's term
// ending closes its sessions).
func NothingSent(err error) bool {
	return pgconn.SafeToRetry(err) && !errors.Is(err, pgconn.ErrConnClosed)
}
