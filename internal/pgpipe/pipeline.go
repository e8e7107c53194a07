package pgpipe

// This file reads what a pgconn.Pipeline answers: a result, a Sync, and
// which errors end the connection.

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// errUnexpected: the pipeline answered something other than what was
// sent.
var errUnexpected = errors.New("pgrouted: pipeline: unexpected result")

// NextResult reads the next query's result reader from pl.
func NextResult(pl *pgconn.Pipeline) (*pgconn.ResultReader, error) {
	res, err := pl.GetResults()
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return nil, errUnexpected
	}
	return rr, nil
}

// FinishSync reads the Sync that ends a pipeline segment after a query
// whose outcome was err. It returns the error that ended the connection,
// if that is what happened, or the server's error between the query's
// result and the Sync: the commit of the segment's implicit transaction
// failed (a deferred constraint's violation, a serialization failure at
// commit), and nothing of the query was committed; the Sync after it is
// read then too. (After the query's own error the server skips to the
// Sync: none comes.)
func FinishSync(pl *pgconn.Pipeline, err error) error {
	if err != nil && !IsPgError(err) {
		return err // the connection broke: nothing more to read
	}
	res, serr := pl.GetResults()
	if IsPgError(serr) {
		// The commit failed: its Sync follows.
		if ferr := FinishSync(pl, nil); ferr != nil {
			return ferr
		}
		return serr
	}
	if serr != nil {
		return serr
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok {
		return errors.New("pgrouted: pipeline: expected a sync")
	}
	return nil
}

// Result reads one query and the Sync after it from pl: the query's
// command tag or error and, with into, its first column's text.
func Result(pl *pgconn.Pipeline, into *string) (pgconn.CommandTag, error) {
	return resultOf(pl, nil, into)
}

// resultOf is Result for the statement e sent (nil: a statement sent
// with SendQueryParams).
func resultOf(pl *pgconn.Pipeline, e *Encoded, into *string) (pgconn.CommandTag, error) {
	var tag pgconn.CommandTag
	var rr *pgconn.ResultReader
	var err error
	if e != nil {
		rr, err = e.Next(pl)
	} else {
		rr, err = NextResult(pl)
	}
	if err == nil {
		for rr.NextRow() {
			if v := rr.Values(); into != nil && len(v) > 0 && v[0] != nil {
				*into = string(v[0])
			}
		}
		tag, err = rr.Close()
		if e != nil {
			e.failed(err)
		}
	}
	if err != nil && !IsPgError(err) {
		return tag, err // the connection broke
	}
	// The Sync, after the commit's error if there is one.
	if serr := FinishSync(pl, err); serr != nil && (err == nil || !IsPgError(serr)) {
		err = serr
	}
	return tag, err
}

// IsPgError reports whether err is the server's (a *pgconn.PgError): the
// connection is fine.
func IsPgError(err error) bool {
	if err == nil {
		return false
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe)
}
