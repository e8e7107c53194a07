//go:build unix

package pgrouted_test

import (
	"bufio"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted/testcluster"
)

// TestChangelogCompatibility: the compatibility table of CHANGELOG.md's
// newest section (and docs/compatibility.md's rows of the same) says what
// CI tests: Go is go.mod's go line (and, under CI, the toolchain running
// the tests is a release of it), pgx is the version go.mod requires, the
// compatibility subset's PostgreSQL majors are .ci/run's TEST_VERSIONS,
// and the whole suite's is the one it runs on under CI, the
// distribution's. Outside CI, the machine
// running the tests is not CI's: its PostgreSQL and Go are logged, not
// compared.
func TestChangelogCompatibility(t *testing.T) {
	table := markdownTable(t, "CHANGELOG.md", "### Compatibility")
	cell := func(name string) string {
		t.Helper()
		v, ok := table[name]
		if !ok {
			t.Fatalf("CHANGELOG.md's compatibility table has no row %q: %q", name, table)
		}
		return v
	}

	goLine, pgxVersion := goModVersions(t)
	if got := cell("Go"); leading(got) != goLine {
		t.Errorf("CHANGELOG.md: Go %q, go.mod's go line %s", got, goLine)
	}
	// A test of this table in CI runs on the Go it says.
	if v := strings.TrimPrefix(runtime.Version(), "go"); v != goLine && !strings.HasPrefix(v, goLine+".") {
		if os.Getenv("CI") == "true" {
			t.Errorf("CI runs Go %s; CHANGELOG.md says %s", v, goLine)
		} else {
			t.Logf("Go %s here; CHANGELOG.md says CI tests %s", v, goLine)
		}
	}
	if got := cell("pgx"); leading(got) != pgxVersion {
		t.Errorf("CHANGELOG.md: pgx %q, go.mod requires %s", got, pgxVersion)
	}
	subset := majors(t, cell("PostgreSQL, the compatibility subset"))
	if ci := ciTestVersions(t); !slices.Equal(subset, ci) {
		t.Errorf("CHANGELOG.md: the compatibility subset on PostgreSQL %v, .ci/run's TEST_VERSIONS %v", subset, ci)
	}
	if !slices.Contains(subset, testcluster.MinMajor) {
		t.Errorf("the compatibility subset (%v) leaves out PostgreSQL %d, the oldest testcluster runs", subset, testcluster.MinMajor)
	}
	whole := majors(t, cell("PostgreSQL, the whole suite"))
	switch {
	case os.Getenv(testcluster.EnvMajor) != "":
		t.Logf("the suite runs on PostgreSQL %d from %s: not the distribution's", cluster.Major(), testcluster.EnvMajor)
	case os.Getenv("CI") == "true":
		if !slices.Equal(whole, []int{cluster.Major()}) {
			t.Errorf("CHANGELOG.md: the whole suite on PostgreSQL %v; CI runs it on %d", whole, cluster.Major())
		}
	default:
		t.Logf("the whole suite runs on PostgreSQL %d here; CHANGELOG.md says CI runs it on %v", cluster.Major(), whole)
	}

	// docs/compatibility.md says the same.
	docs := markdownTable(t, "docs/compatibility.md", "| component |")
	if got := leading(docs["Go"]); got != goLine {
		t.Errorf("docs/compatibility.md: Go %q, go.mod's go line %s", docs["Go"], goLine)
	}
	if got := leading(docs["pgx"]); got != pgxVersion {
		t.Errorf("docs/compatibility.md: pgx %q, go.mod requires %s", docs["pgx"], pgxVersion)
	}
	all := slices.Sorted(slices.Values(slices.Concat(whole, subset)))
	if got := majors(t, docs["PostgreSQL"]); !slices.Equal(got, all) {
		t.Errorf("docs/compatibility.md: PostgreSQL %v tested, CHANGELOG.md %v", got, all)
	}
}

// markdownTable returns the rows of the first table in file after the
// first line starting with start (that line included, when it is the
// table's header), as first cell → second cell.
func markdownTable(t *testing.T, file, start string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	found, inTable := false, false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !found {
			if !strings.HasPrefix(line, start) {
				continue
			}
			found = true
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		inTable = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 2 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") {
			continue
		}
		rows[strings.TrimSpace(cells[0])] = strings.TrimSpace(cells[1])
	}
	if len(rows) == 0 {
		t.Fatalf("%s: no table after %q", file, start)
	}
	return rows
}

// leading returns a cell's value: what comes before its first " (", the
// note.
func leading(cell string) string {
	v, _, _ := strings.Cut(cell, " (")
	return strings.TrimSpace(v)
}

// majors returns the sorted PostgreSQL major versions of a cell: "13, 18
// (note)".
func majors(t *testing.T, cell string) []int {
	t.Helper()
	var out []int
	for f := range strings.SplitSeq(leading(cell), ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			t.Fatalf("PostgreSQL versions %q: %v", cell, err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// goModVersions returns go.mod's go line and the pgx version it requires.
func goModVersions(t *testing.T) (goLine, pgx string) {
	t.Helper()
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		switch {
		case len(f) == 2 && f[0] == "go":
			goLine = strings.TrimSuffix(f[1], ".0")
		case len(f) >= 2 && f[0] == "github.com/jackc/pgx/v5":
			pgx = f[1]
		case len(f) >= 3 && f[0] == "require" && f[1] == "github.com/jackc/pgx/v5":
			pgx = f[2]
		}
	}
	if goLine == "" || pgx == "" {
		t.Fatalf("go.mod: go line %q, pgx %q", goLine, pgx)
	}
	return goLine, pgx
}

// ciTestVersions returns the sorted PostgreSQL majors .ci/run passes to
// make test as TEST_VERSIONS.
func ciTestVersions(t *testing.T) []int {
	t.Helper()
	b, err := os.ReadFile(".ci/run")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*TEST_VERSIONS="([^"]*)"`).FindAllSubmatch(b, -1)
	if len(m) != 1 {
		t.Fatalf(".ci/run: %d assignments of TEST_VERSIONS, want 1", len(m))
	}
	var out []int
	for _, f := range strings.Fields(string(m[0][1])) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf(".ci/run: TEST_VERSIONS=%q: %v", m[0][1], err)
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
