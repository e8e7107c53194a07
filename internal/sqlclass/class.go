package sqlclass

import "strconv"

// Class is what a statement (or a string of statements) does, as far as
// routing is concerned. Every class but [Read] must run on the primary.
//
// Classes are ordered by danger; a string of several statements takes the
// most dangerous class among them:
//
//	Read < Write < Unknown < Lock < Tx < Session
//
// The zero value is [Unknown], so a Class that was never set is not
// mistaken for a read.
type Class uint8

const (
	// Unknown is a statement the classifier does not recognise, or input
	// it cannot lex to the end (an unterminated string, quoted identifier,
	// dollar quote or block comment). Callers treat it as a write. It is
	// the zero value.
	Unknown Class = iota

	// Read is a statement that only reads and leaves no session state
	// behind: SELECT, WITH, VALUES, TABLE, SHOW, plain EXPLAIN, and
	// EXPLAIN ANALYZE of a read. In autocommit mode it may run on a replica.
	// An input with no statement at all (only whitespace, comments and
	// semicolons) is also Read, with [Result.Statements] zero.
	Read

	// Write is a statement that changes data or the schema, or otherwise
	// has to run on the primary without leaving session state behind:
	// INSERT, UPDATE, DELETE, MERGE, COPY, DDL, CALL, DO, NOTIFY, SET LOCAL,
	// SELECT … INTO, reads that call nextval, pg_notify and the other
	// functions listed in the package documentation.
	Write

	// Lock is a read that takes row locks (FOR UPDATE, FOR NO KEY UPDATE,
	// FOR SHARE, FOR KEY SHARE) and the LOCK statement. It runs on the
	// primary.
	Lock

	// Tx is a transaction-control statement: BEGIN, START TRANSACTION,
	// COMMIT, END, ROLLBACK, ABORT, SAVEPOINT, RELEASE, SET TRANSACTION,
	// PREPARE TRANSACTION, COMMIT PREPARED, ROLLBACK PREPARED. It runs on
	// the primary; a caller that sees it outside the database/sql
	// transaction API must follow the server's transaction status, since
	// such a string may leave a transaction open.
	Tx

	// Session changes the state of the session: SET, RESET, DISCARD,
	// PREPARE, DEALLOCATE, DECLARE, LISTEN, UNLISTEN, LOAD, CREATE TEMP …,
	// SELECT … INTO [LOCAL|GLOBAL] TEMP, calls of set_config, of the
	// advisory lock functions and of the others listed in the package
	// documentation. It runs on the primary, and the connection stays on the
	// primary from then on, because a replica session would not have that
	// state.
	Session

	numClasses = iota
)

// rank orders the classes by danger; see [Class].
var rank = [numClasses]uint8{
	Read:    0,
	Write:   1,
	Unknown: 2,
	Lock:    3,
	Tx:      4,
	Session: 5,
}

// max returns the more dangerous of c and d.
func (c Class) max(d Class) Class {
	if rank[d] > rank[c] {
		return d
	}
	return c
}

var classNames = [numClasses]string{
	Unknown: "unknown",
	Read:    "read",
	Write:   "write",
	Lock:    "lock",
	Tx:      "tx",
	Session: "session",
}

// String returns the lower-case name of the class: "read", "write",
// "unknown", "lock", "tx" or "session".
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Hint is a route forced by a comment at the start of the input.
type Hint uint8

const (
	// NoHint: the input does not start with a routing comment.
	NoHint Hint = iota
	// HintPrimary: the input starts with /* pgrouted:primary */.
	HintPrimary
	// HintReplica: the input starts with /* pgrouted:replica */.
	HintReplica
)

// String returns "none", "primary" or "replica".
func (h Hint) String() string {
	switch h {
	case NoHint:
		return "none"
	case HintPrimary:
		return "primary"
	case HintReplica:
		return "replica"
	}
	return "Hint(" + strconv.Itoa(int(h)) + ")"
}

// Result is the classification of one input string.
type Result struct {
	// Class is the most dangerous class among the statements of the input
	// (see [Class] for the order). It is [Read] for an input without any
	// statement.
	Class Class

	// Hint is the route forced by a leading comment, if any.
	Hint Hint

	// Statements is the number of non-empty statements in the input:
	// 0 for an input of only whitespace, comments and semicolons, more than
	// 1 for a multi-statement string.
	Statements int

	// DML is true when the input is a single INSERT, UPDATE, DELETE or
	// MERGE statement, or a single WITH statement that modifies data: a
	// write that runs in any transaction context and answers like a query
	// (no COPY sub-protocol, no transaction control).
	DML bool

	// ChangesCatalog is true when a statement of the input may change the
	// function catalog: CREATE, ALTER, DROP, and DO and CALL, whose code
	// may run DDL. A caller that keeps a snapshot of the catalog reads it
	// again after such a statement.
	ChangesCatalog bool

	// WritesNothing is true when the input is one statement that changes
	// only its session and writes neither data nor the catalog: SET (SET
	// LOCAL, SET TRANSACTION, SET ROLE and the others), RESET, LISTEN,
	// UNLISTEN, DEALLOCATE. A caller that keeps the positions of its
	// writes keeps none for it.
	WritesNothing bool

	// Func is what the user functions the input calls made of it, when it
	// was classified by [ClassifyWith] with a catalog: [FuncNone] when no
	// call changed its class.
	Func FuncVerdict

	// FuncStart and FuncEnd locate, in the input, the name of the function
	// behind Func (see [Result.FuncName]).
	FuncStart, FuncEnd int

	// Reads and Writes are the relations a single statement reads (a
	// [Read]) and writes (a DML statement), when [ClassifyWith] was given
	// a catalog that knows them ([Functions.SetRelations]); every relation
	// otherwise (see [Scope]).
	Reads, Writes Scope

	// seen has bit 1<<c set for every class c of some statement.
	seen uint8
	// userCall: a statement calls a function that may read relations its
	// text does not name (relations.go).
	userCall bool
}

// FuncName returns the name of the function behind r.Func as the input
// sql writes it (without its schema), or "" when r.Func is [FuncNone].
func (r Result) FuncName(sql string) string {
	if r.Func == FuncNone || r.FuncEnd > len(sql) || r.FuncStart > r.FuncEnd {
		return ""
	}
	return sql[r.FuncStart:r.FuncEnd]
}

// AssumeHidden makes r the classification of a statement that runs user
// code its text does not show ([FuncHidden], class [Session]: the
// primary, and the session stays there), for a caller whose catalog may
// not know what the statement runs (a change it made is not in its
// snapshot yet). It names no object ([Result.FuncName] is ""), unless r
// was [FuncHidden] already.
func (r *Result) AssumeHidden() {
	if r.Func < FuncHidden {
		r.Func, r.FuncStart, r.FuncEnd = FuncHidden, 0, 0
	}
	r.Class = r.Class.max(Session)
	r.seen |= 1 << Session
}

// Has reports whether some statement of the input is of class c. It tells a
// caller, for instance, that a string classified [Session] also holds a
// [Tx] statement.
func (r Result) Has(c Class) bool {
	return c < numClasses && r.seen&(1<<c) != 0
}

// Rank is c's place in the order of danger (Read 0, Write 1, Unknown 2,
// Lock 3, Tx 4, Session 5; see [Class]), for callers that weigh statements
// against each other as a string of statements is weighed.
func (c Class) Rank() int { return int(rank[c]) }
