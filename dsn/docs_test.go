package dsn

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// durationKeys returns the keys whose values are durations: those whose
// set reads 1s and refuses a word (a list or a choice stores any word, to
// be checked after; a count or a bool refuses 1s).
func durationKeys() []string {
	var keys []string
	for _, s := range specs {
		if s.set == nil {
			continue
		}
		if s.set(defaultConfig(), "1s") == "" && s.set(defaultConfig(), "bogus") != "" {
			keys = append(keys, s.key)
		}
	}
	return keys
}

// TestEveryDurationKeyTakesGoSyntax: every duration key reads
// time.ParseDuration's syntax and today's forms through the one parser,
// refuses a bare number other than 0 naming the fix, and refuses a value
// below 0.
func TestEveryDurationKeyTakesGoSyntax(t *testing.T) {
	keys := durationKeys()
	want := []string{keyMaxLag, keyProbeInterval, keyLatencyWindow, keyPinAfterWrite, keyWriteTimeout, keyLease,
		keyReplicaMaxConnLifetime, keyReplicaMaxConnLifetimeJitter, keyReplicaMaxConnIdleTime, keyReplicaHealthCheckPeriod,
		keyPrimaryMaxConnLifetime, keyPrimaryMaxConnLifetimeJitter, keyPrimaryMaxConnIdleTime, keyPrimaryHealthCheckPeriod,
		keyCircuitMaxBackoff, keyPatroniTimeout, keyReplicaWait}
	if strings.Join(keys, " ") != strings.Join(want, " ") {
		t.Errorf("duration keys %v, want %v", keys, want)
	}
	for _, key := range keys {
		spec := lookupSpec(key)
		for _, v := range []string{"250us", "250µs", "250μs", "1m30s", "1h", "1.5s", ".5s", "2 s", "1500ms", "0.5m", "1h2m3s4ms5us6ns", "100ns"} {
			c := defaultConfig()
			if rule := spec.set(c, v); rule != "" {
				t.Errorf("%s=%s: %s", key, v, rule)
			}
			// The value set is the one parseDuration reads.
			d, _ := parseDuration(v)
			if got := spec.get(c); got != formatDuration(d) {
				t.Errorf("%s=%s: reads back as %s, want %s", key, v, got, formatDuration(d))
			}
		}
		for v, rule := range map[string]string{
			"5":    "has no unit: add one, e.g. 5ms",
			"-1s":  "must not be negative",
			"-1ns": "must not be negative",
			"1d":   "is not a duration",
			"1m30": "is not a duration",
		} {
			if got := spec.set(defaultConfig(), v); !strings.Contains(got, rule) {
				t.Errorf("%s=%s: %q, want %q", key, v, got, rule)
			}
		}
	}
}

// docFiles are the documents whose DSNs and keys must parse.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md", "../doc.go"}, files...)
	if len(files) < 5 {
		t.Fatalf("documents not found: %v", files)
	}
	return files
}

var (
	docKeyValue = regexp.MustCompile("(?:pgrouted_|pool_(?:max|min|health)_)[a-z_]+=[^&\\s`'\")|]*")
	docURL      = regexp.MustCompile("postgres(?:ql)?://[^\\s`'\"]+")
	// docTableRow is a row of README's DSN table: key, values, default,
	// bounds.
	docTableRow = regexp.MustCompile("^\\| `((?:pgrouted|pool)_[a-z_]+)` \\|[^|]*\\|([^|]*)\\|([^|]*)\\|$")
	docNumber   = regexp.MustCompile(`\d[0-9.]*\s?[a-zA-Zµμ]+`)
	docBacktick = regexp.MustCompile("`([^`]+)`")
)

// TestDocumentedValuesParse: every pgrouted_ key=value that README.md,
// package pgrouted's documentation and docs/ show (this package's shows a
// wrong one on purpose) is a key Parse knows with a value it
// accepts, every postgres:// DSN they show that pgx reads parses, and in
// README's DSN table each duration key's default and bounds are values the
// key reads.
func TestDocumentedValuesParse(t *testing.T) {
	isolateEnv(t, nil)
	seen, urls := 0, 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range docKeyValue.FindAllString(string(text), -1) {
			key, v, _ := strings.Cut(strings.TrimRight(kv, ".,;:"), "=")
			spec := lookupSpec(key)
			switch {
			case spec == nil:
				t.Errorf("%s: %s: unknown key", file, kv)
				continue
			case spec.set == nil || v == "": // names, weights; a key named in prose
				continue
			}
			seen++
			c := defaultConfig()
			rule := spec.set(c, v)
			if rule == "" {
				rule = spec.check(c)
			}
			if rule != "" {
				t.Errorf("%s: %s %s", file, kv, rule)
			}
		}
		for _, u := range docURL.FindAllString(string(text), -1) {
			u = strings.TrimRight(u, ".,;:")
			if _, err := pgx.ParseConfig(u); err != nil || !strings.Contains(u, "pgrouted_") {
				continue // a placeholder (127.0.0.1:P0) or no key of ours
			}
			urls++
			if _, err := Parse(u); err != nil {
				t.Errorf("%s: %s: %v", file, u, err)
			}
		}
	}
	if seen < 20 || urls < 3 {
		t.Errorf("found %d key=value and %d DSNs in the documents; the patterns no longer match them", seen, urls)
	}

	text, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	isDuration := map[string]bool{}
	for _, k := range durationKeys() {
		isDuration[k] = true
	}
	rows := map[string]bool{}
	for _, line := range strings.Split(string(text), "\n") {
		m := docTableRow.FindStringSubmatch(line)
		if m == nil || !isDuration[m[1]] {
			continue
		}
		key, def, bounds := m[1], m[2], m[3]
		rows[key] = true
		for _, b := range docBacktick.FindAllStringSubmatch(def, -1) {
			if rule := lookupSpec(key).set(defaultConfig(), b[1]); rule != "" {
				t.Errorf("README: %s default %s %s", key, b[1], rule)
			}
		}
		for _, n := range docNumber.FindAllString(bounds, -1) {
			if _, err := parseDuration(n); err != nil {
				if _, errSize := parseSize(n); key != keyMaxLag || errSize != nil {
					t.Errorf("README: %s bound %q does not parse: %v", key, n, err)
				}
			}
		}
	}
	for k := range isDuration {
		if !rows[k] {
			t.Errorf("README's DSN table has no row for %s", k)
		}
	}
}
