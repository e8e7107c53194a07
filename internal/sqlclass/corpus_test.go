package sqlclass

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

var updateCorpus = flag.Bool("update-corpus", false, "rewrite testdata/statements.json from the classification tables")

// corpusFile holds every statement of the classification tables and of
// the fuzz corpus, for tests outside this package that run them against a
// server (the root package's TestSessionFingerprint).
const corpusFile = "testdata/statements.json"

// corpus returns the statements of classifyTests, functionTests,
// lexerStateTests, ormQueries and testdata/fuzz, sorted, each once.
func corpus(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, tt := range classifyTests {
		out = append(out, tt.sql)
	}
	for _, tt := range functionTests {
		out = append(out, tt.sql)
	}
	for _, tt := range lexerStateTests {
		out = append(out, tt.sql)
	}
	out = append(out, ormQueries...)
	files, err := filepath.Glob("testdata/fuzz/*/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		// go test fuzz v1, then one string("…") line in Go syntax.
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "string("); ok && strings.HasSuffix(rest, ")") {
				s, err := strconv.Unquote(strings.TrimSuffix(rest, ")"))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				out = append(out, s)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestCorpusUpToDate: testdata/statements.json holds corpus(); go test
// -run TestCorpusUpToDate -update-corpus rewrites it.
func TestCorpusUpToDate(t *testing.T) {
	want, err := json.MarshalIndent(corpus(t), "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if *updateCorpus {
		if err := os.WriteFile(corpusFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(corpusFile)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not the tables' statements (%v): go test ./internal/sqlclass -run TestCorpusUpToDate -update-corpus", corpusFile, err)
	}
}
