package pgpipe

// This file provides a database/sql driver.Rows over a *pgconn.ResultReader,
// so that a query can be sent through a pgconn.Pipeline together with
// another one (pgx's stdlib.Rows cannot be built from outside pgx). It
// mirrors the conversions of stdlib.Rows in pgx v5.12.0 (stdlib/sql.go:
// databaseSQLResultFormats, Rows.initValueFuncs, Rows.Next and the
// ColumnType* methods) so that a query gives the same driver values and
// column types whichever route it takes.

import (
	"database/sql/driver"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// ResultFormats returns the result format codes stdlib asks for, one per
// field: binary for the intrinsic types stdlib lists in
// databaseSQLResultFormats (bool, bytea, cid, date, float4, float8, int2,
// int4, int8, oid, timestamp, timestamptz, xid), text for the rest. Only the
// fields' DataTypeOID is read, so fields may be a statement description's
// Fields, whose Format is 0.
func ResultFormats(fields []pgconn.FieldDescription) []int16 {
	formats := make([]int16, len(fields))
	for i, fd := range fields {
		switch fd.DataTypeOID {
		case pgtype.BoolOID, pgtype.ByteaOID, pgtype.CIDOID, pgtype.DateOID,
			pgtype.Float4OID, pgtype.Float8OID, pgtype.Int2OID, pgtype.Int4OID,
			pgtype.Int8OID, pgtype.OIDOID, pgtype.TimestampOID,
			pgtype.TimestamptzOID, pgtype.XIDOID:
			formats[i] = pgtype.BinaryFormatCode
		default:
			formats[i] = pgtype.TextFormatCode
		}
	}
	return formats
}

// valueFunc converts one non-NULL column value, as read from the wire, to
// its driver.Value. It never keeps src: the reader reuses that buffer for the
// next row.
type valueFunc func(src []byte) (driver.Value, error)

// Rows is a driver.Rows over the rows of one query read from a
// *pgconn.ResultReader, with stdlib.Rows' conversions.
type Rows struct {
	m        *pgtype.Map
	rr       *pgconn.ResultReader
	fields   []pgconn.FieldDescription // a copy: rr's is the connection's, reused by its next result
	columns  []string
	convert  []valueFunc
	done     func(error) error
	nextErr  func(error) error // what Next returns for the query's error; nil: the error as is
	loaded   bool              // rr holds a row Next has not returned yet
	rrClosed bool              // rr is closed (by Next at the end, or by Close)
	rrErr    error             // the error of closing rr
	closed   bool              // Close ran done
	closeErr error             // what done returned
}

var (
	_ driver.Rows                           = (*Rows)(nil)
	_ driver.RowsColumnTypeDatabaseTypeName = (*Rows)(nil)
	_ driver.RowsColumnTypeLength           = (*Rows)(nil)
	_ driver.RowsColumnTypePrecisionScale   = (*Rows)(nil)
	_ driver.RowsColumnTypeScanType         = (*Rows)(nil)
)

// NewRows returns rows over rr, whose values are in the formats of its
// field descriptions (rr.FieldDescriptions()). m is the connection's type
// map. done is called exactly once, by Close (Close is idempotent), with the
// error of closing rr (nil when fine, including after reading every row);
// what done returns is what Close returns. done is called even when rr
// reported an error.
//
// Like stdlib's QueryContext, it reads the first row at once, so that a
// statement failing before its first row (a unique violation of an
// INSERT … RETURNING, an error of the first row) fails here, not at the
// first Next: the rows are then closed (done has run) and the error is
// returned.
func NewRows(m *pgtype.Map, rr *pgconn.ResultReader, done func(error) error) (driver.Rows, error) {
	fields := append([]pgconn.FieldDescription(nil), rr.FieldDescriptions()...)
	r := &Rows{
		m:       m,
		rr:      rr,
		fields:  fields,
		columns: make([]string, len(fields)),
		convert: make([]valueFunc, len(fields)),
		done:    done,
	}
	for i, fd := range fields {
		r.columns[i] = fd.Name
		r.convert[i] = newValueFunc(m, fd)
	}
	if rr.NextRow() {
		r.loaded = true
		return r, nil
	}
	r.closeReader()
	if r.rrErr != nil {
		err := r.rrErr
		if cerr := r.Close(); cerr != nil {
			err = cerr
		}
		return nil, err
	}
	return r, nil
}

// newValueFunc returns the converter of a column, as stdlib's
// Rows.initValueFuncs: the same Go type per OID, a string for every type it
// does not list.
func newValueFunc(m *pgtype.Map, fd pgconn.FieldDescription) valueFunc {
	switch fd.DataTypeOID {
	case pgtype.BoolOID:
		return scanValue(m, fd, asIs[bool])
	case pgtype.ByteaOID, pgtype.JSONOID, pgtype.JSONBOID, pgtype.XMLOID:
		// Their scan plans into *[]byte copy src.
		return scanValue(m, fd, asIs[[]byte])
	case pgtype.CIDOID, pgtype.OIDOID, pgtype.XIDOID:
		return scanValue(m, fd, pgtype.Uint32.Value) // int64
	case pgtype.DateOID:
		return scanValue(m, fd, pgtype.Date.Value) // time.Time, or "infinity", "-infinity"
	case pgtype.Float4OID:
		return scanValue(m, fd, func(d float32) (driver.Value, error) { return float64(d), nil })
	case pgtype.Float8OID:
		return scanValue(m, fd, asIs[float64])
	case pgtype.Int2OID:
		return scanValue(m, fd, func(d int16) (driver.Value, error) { return int64(d), nil })
	case pgtype.Int4OID:
		return scanValue(m, fd, func(d int32) (driver.Value, error) { return int64(d), nil })
	case pgtype.Int8OID:
		return scanValue(m, fd, asIs[int64])
	case pgtype.TimestampOID:
		return scanValue(m, fd, pgtype.Timestamp.Value) // time.Time (UTC), or "infinity", "-infinity"
	case pgtype.TimestamptzOID:
		return scanValue(m, fd, pgtype.Timestamptz.Value) // time.Time (Local), or "infinity", "-infinity"
	default:
		return scanValue(m, fd, asIs[string])
	}
}

// scanValue returns a valueFunc that scans into a T with the type map's plan
// for the column, then converts the T with value.
func scanValue[T any](m *pgtype.Map, fd pgconn.FieldDescription, value func(T) (driver.Value, error)) valueFunc {
	var d T
	plan := m.PlanScan(fd.DataTypeOID, fd.Format, &d)
	return func(src []byte) (driver.Value, error) {
		if err := plan.Scan(src, &d); err != nil {
			return nil, err
		}
		return value(d)
	}
}

// asIs returns d as the driver.Value.
func asIs[T any](d T) (driver.Value, error) { return d, nil }

// Columns returns the names of the columns.
func (r *Rows) Columns() []string { return r.columns }

// ColumnTypeDatabaseTypeName returns the upper-case name of the column's type
// in the type map, or its OID in decimal when the map does not know it (an
// enum, for instance).
func (r *Rows) ColumnTypeDatabaseTypeName(index int) string {
	oid := r.fields[index].DataTypeOID
	if dt, ok := r.m.TypeForOID(oid); ok {
		return strings.ToUpper(dt.Name)
	}
	return strconv.FormatInt(int64(oid), 10)
}

// varHeaderSize is the size of a varlena header, which the type modifiers of
// varchar, char and numeric include.
const varHeaderSize = 4

// ColumnTypeLength returns the length of text, bytea (unlimited), varchar,
// char and varbit columns (from the type modifier, so unconstrained varchar
// and varbit give negative lengths, as with stdlib); ok is false for the
// other types.
func (r *Rows) ColumnTypeLength(index int) (length int64, ok bool) {
	fd := r.fields[index]
	switch fd.DataTypeOID {
	case pgtype.TextOID, pgtype.ByteaOID:
		return math.MaxInt64, true
	case pgtype.VarcharOID, pgtype.BPCharOID:
		return int64(fd.TypeModifier - varHeaderSize), true
	case pgtype.VarbitOID:
		return int64(fd.TypeModifier), true
	default:
		return 0, false
	}
}

// ColumnTypePrecisionScale returns the precision and scale of a numeric
// column, decoded from its type modifier as stdlib does (an unconstrained
// numeric gives 65535, 65531); ok is false for the other types.
func (r *Rows) ColumnTypePrecisionScale(index int) (precision, scale int64, ok bool) {
	fd := r.fields[index]
	if fd.DataTypeOID != pgtype.NumericOID {
		return 0, 0, false
	}
	mod := fd.TypeModifier - varHeaderSize
	return int64((mod >> 16) & 0xffff), int64(mod & 0xffff), true
}

// ColumnTypeScanType returns the Go type stdlib reports for the column: the
// natural one for the intrinsic types, float64 for numeric (whose values are
// strings nonetheless) and string for the rest.
func (r *Rows) ColumnTypeScanType(index int) reflect.Type {
	switch r.fields[index].DataTypeOID {
	case pgtype.Float8OID:
		return reflect.TypeFor[float64]()
	case pgtype.Float4OID:
		return reflect.TypeFor[float32]()
	case pgtype.Int8OID:
		return reflect.TypeFor[int64]()
	case pgtype.Int4OID:
		return reflect.TypeFor[int32]()
	case pgtype.Int2OID:
		return reflect.TypeFor[int16]()
	case pgtype.BoolOID:
		return reflect.TypeFor[bool]()
	case pgtype.NumericOID:
		return reflect.TypeFor[float64]()
	case pgtype.DateOID, pgtype.TimestampOID, pgtype.TimestamptzOID:
		return reflect.TypeFor[time.Time]()
	case pgtype.ByteaOID:
		return reflect.TypeFor[[]byte]()
	default:
		return reflect.TypeFor[string]()
	}
}

// Next reads the next row into dest. After the last row it closes the
// reader and returns the error of the query (as nextErr makes it), or
// io.EOF.
func (r *Rows) Next(dest []driver.Value) error {
	if r.loaded {
		r.loaded = false // the first row, read by NewRows
	} else if r.rrClosed || !r.rr.NextRow() {
		r.closeReader()
		if r.rrErr != nil {
			if r.nextErr != nil {
				return r.nextErr(r.rrErr)
			}
			return r.rrErr
		}
		return io.EOF
	}
	for i, src := range r.rr.Values() {
		if src == nil {
			dest[i] = nil
			continue
		}
		v, err := r.convert[i](src)
		if err != nil {
			return fmt.Errorf("convert field %d failed: %w", i, err)
		}
		dest[i] = v
	}
	return nil
}

// closeReader closes rr once, reading what is left of its rows, and keeps
// its error. rr is not used afterwards: it belongs to the connection, which
// reuses it for its next result.
func (r *Rows) closeReader() {
	if !r.rrClosed {
		r.rrClosed = true
		_, r.rrErr = r.rr.Close()
	}
}

// Close closes the reader, if Next has not, and returns what done returns
// for its error. Later calls return the same without calling done again.
func (r *Rows) Close() error {
	if !r.closed {
		r.closed = true
		r.closeReader()
		r.closeErr = r.done(r.rrErr)
	}
	return r.closeErr
}
