package dsn

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// checkChain fails t when a secret shows anywhere in err's chain: the text
// of every error in it (errors.Unwrap, and the []error of errors.Join
// style), fmt's %v, %+v and %#v of it, and every exported string of it,
// found by reflection (fields of structs, through pointers, slices and
// maps). It returns the errors it walked.
func checkChain(t *testing.T, err error, secrets ...string) []error {
	t.Helper()
	var walked []error
	var walk func(e error, depth int)
	walk = func(e error, depth int) {
		if e == nil || depth > 32 {
			return
		}
		walked = append(walked, e)
		texts := []string{e.Error(), fmt.Sprintf("%v", e), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e)}
		texts = append(texts, exportedStrings(reflect.ValueOf(e), 0)...)
		for _, text := range texts {
			for _, s := range secrets {
				if strings.Contains(text, s) {
					t.Errorf("%T in the chain of %q shows the password: %q", e, err, strings.ReplaceAll(text, s, "<PASSWORD>"))
				}
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap(), depth+1)
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x, depth+1)
			}
		}
	}
	walk(err, 0)
	return walked
}

// exportedStrings returns every string reachable from v through exported
// fields, pointers, interfaces, slices, arrays and maps.
func exportedStrings(v reflect.Value, depth int) []string {
	if !v.IsValid() || depth > 8 {
		return nil
	}
	switch v.Kind() {
	case reflect.String:
		return []string{v.String()}
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return exportedStrings(v.Elem(), depth+1)
	case reflect.Struct:
		var out []string
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out = append(out, exportedStrings(v.Field(i), depth+1)...)
			}
		}
		return out
	case reflect.Slice, reflect.Array:
		var out []string
		for i := range v.Len() {
			out = append(out, exportedStrings(v.Index(i), depth+1)...)
		}
		return out
	case reflect.Map:
		var out []string
		for _, k := range v.MapKeys() {
			out = append(out, exportedStrings(k, depth+1)...)
			out = append(out, exportedStrings(v.MapIndex(k), depth+1)...)
		}
		return out
	}
	return nil
}

// TestParseErrorChainHasNoPassword: when pgx rejects a connection string
// with a password in it, in either form, the ParseError unwraps to a copy
// of pgx's ParseConfigError whose ConnString has the password masked, and
// nothing in the chain (texts, fmt's verbs, exported strings) shows it.
// Reverting Unwrap to pgx's own error fails it: its ConnString is the
// string as given.
func TestParseErrorChainHasNoPassword(t *testing.T) {
	isolateEnv(t, nil)
	for _, dsn := range []string{
		"postgres://u:" + marker + "@db1:x/db",
		"postgres://u:" + marker + "%21@db1:notaport/db",
		"postgresql://u:" + marker + "@db1/db?sslmode=bogus",
		"postgres://u@db1/db?password=" + marker + "&sslmode=bogus",
		"postgres://u@db1/db?pass%77ord=" + marker + "&connect_timeout=soon",
		"postgres://u:" + marker + "/x@db1/db?sslmode=bogus", // a slash in the password: the rest is the path
		"postgres://u:" + marker + "@[::1/db",
		"host=db1 password=" + marker + " sslmode=bogus",
		"host=db1 password='" + marker + "' port=x",
		"host=db1 password = '" + marker + " \\' still the password' sslmode=bogus",
		"host=db1 password=" + marker + `\ more sslmode=bogus`,
		"host=db1 sslpassword=" + marker + " connect_timeout=soon",
		"host=db1 PASSWORD=" + marker + " connect_timeout=soon",
		"host=db1 password='" + marker, // not closed
		"password=" + marker + " bad key=1",
		"host=db1,db2 port=1,2,3 password=" + marker,
	} {
		t.Run(dsn, func(t *testing.T) {
			_, err := Parse(dsn)
			if err == nil {
				t.Fatal("parses")
			}
			var pce *pgconn.ParseConfigError
			if !errors.As(err, &pce) {
				t.Fatalf("%v does not unwrap to a *pgconn.ParseConfigError", err)
			}
			if pce.ConnString == dsn || pce.ConnString == "" {
				t.Errorf("ConnString %q: not a redacted copy", strings.ReplaceAll(pce.ConnString, marker, "<PASSWORD>"))
			}
			if walked := checkChain(t, err, marker); len(walked) < 2 {
				t.Errorf("chain of %d errors", len(walked))
			}
			// The same in a join, as a caller may gather errors.
			checkChain(t, errors.Join(errors.New("config"), fmt.Errorf("wrapped: %w", err)), marker)
		})
	}
}

// TestRedactConnString: what stays of a connection string pgx rejected.
func TestRedactConnString(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"host=db1 password=" + marker + " sslmode=bogus", "host=db1 password=xxxxx sslmode=bogus"},
		{"host=db1 password = '" + marker + ` \' x' port=1`, "host=db1 password = xxxxx port=1"},
		{"host=db1 password=" + marker + `\ x port=1`, "host=db1 password=xxxxx port=1"},
		{"host=db1 sslpassword=" + marker, "host=db1 sslpassword=xxxxx"},
		{"host=db1 password='" + marker + " port=1", "host=db1 password=xxxxx"},
		{"host=db1 password= port=1", "host=db1 password= xxxxx"}, // libpq: the password is port=1
		{"host=db1   port=1 bad key=2", "host=db1   port=1 bad key=2"},
		{"postgres://u:" + marker + "@db1/db?password=" + marker + "&x=1", "postgres://u:xxxxx@db1/db?password=xxxxx&x=1"},
	} {
		if got := redactConnString(tc.in, secrets{}); got != tc.want {
			t.Errorf("redactConnString(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

// TestParseErrorPrintable: a value that is not UTF-8 or holds a control or
// format character is escaped in the error text, which stays one line that
// reads in order.
func TestParseErrorPrintable(t *testing.T) {
	isolateEnv(t, nil)
	for _, dsn := range []string{
		"host=db1 pgrouted_select='\u202eromdna'",
		"postgres://db1/app?pgrouted_consistency=%ff%0a",
		"host=db1 pgrouted_\u202ex=1",
	} {
		_, err := Parse(dsn)
		var pe *ParseError
		if !errors.As(err, &pe) {
			t.Fatalf("%q: %v", dsn, err)
		}
		if msg := err.Error(); Printable(msg) != msg || Printable(pe.Key) != pe.Key || strings.Contains(msg, "\n") {
			t.Errorf("%q: error %q, key %q", dsn, msg, pe.Key)
		}
	}
}
