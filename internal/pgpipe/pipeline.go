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
// if that is what happened.
func FinishSync(pl *pgconn.Pipeline, err error) error {
	if err != nil && !IsPgError(err) {
		return err // the connection broke: nothing more to read
	}
	res, serr := pl.GetResults()
	if serr != nil && !IsPgError(serr) {
		return serr
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok && serr == nil {
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
	res, serr := pl.GetResults()
	if serr != nil && !IsPgError(serr) {
		return tag, serr
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok && serr == nil {
		return tag, errors.New("pgrouted: pipeline: expected a sync")
	}
	if err == nil {
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
