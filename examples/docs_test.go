package examples_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/promcollector"
	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// root is the repository's root, from this module's folder.
const root = ".."

// maxREADMELines is the README's length limit: what it does not say in
// that many lines belongs in docs/.
const maxREADMELines = 250

// TestREADMELength: the README stays short.
func TestREADMELength(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > maxREADMELines {
		t.Errorf("README.md has %d lines, want at most %d: move detail to docs/", n, maxREADMELines)
	}
}

// docs are the Markdown files whose links are checked.
func docs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CHANGELOG.md", "examples/README.md", "bench/README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(more) < 10 {
		t.Fatalf("only %d pages in docs/", len(more))
	}
	for _, m := range more {
		rel, _ := filepath.Rel(root, m)
		files = append(files, filepath.ToSlash(rel))
	}
	return files
}

var (
	// link is a Markdown inline link or image: [text](target).
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// codeFence and htmlComment hide what is not rendered as a link.
	codeFence   = regexp.MustCompile("(?ms)^```.*?^```")
	inlineCode  = regexp.MustCompile("`[^`\n]*`")
	htmlComment = regexp.MustCompile(`(?s)<!--.*?-->`)
	heading     = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
)

// anchors returns the anchors GitHub gives the headings of a Markdown
// text: lower case, punctuation dropped, spaces as hyphens, repeats
// numbered.
func anchors(md string) map[string]bool {
	md = codeFence.ReplaceAllString(md, "")
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteByte('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// TestDocLinks: every relative link of the README, the CHANGELOG and
// docs/ names a file or folder that exists and, with #anchor, a heading of
// it.
func TestDocLinks(t *testing.T) {
	checked := 0
	for _, f := range docs(t) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Error(err)
			continue
		}
		text := htmlComment.ReplaceAllString(codeFence.ReplaceAllString(string(b), ""), "")
		text = inlineCode.ReplaceAllString(text, "")
		for _, m := range link.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			checked++
			path, anchor, _ := strings.Cut(target, "#")
			file := filepath.Join(root, filepath.FromSlash(f))
			if path != "" {
				file = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			}
			st, err := os.Stat(file)
			if err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if anchor == "" {
				continue
			}
			if st.IsDir() || !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %s: an anchor in something that is not a Markdown file", f, target)
				continue
			}
			md, err := os.ReadFile(file)
			if err != nil {
				t.Error(err)
				continue
			}
			if !anchors(string(md))[anchor] {
				t.Errorf("%s: link %s: no heading with anchor #%s in %s", f, target, anchor, path)
			}
		}
	}
	if checked < 30 {
		t.Errorf("only %d relative links checked", checked)
	}
}

// TestAnchors: the anchor rule on headings of the kinds the docs use.
func TestAnchors(t *testing.T) {
	a := anchors("# pgrouted\n## Failover and errors\n## What it costs: statements, connections\n### `pgrouted_max_lag`\n## Failover and errors\n```\n# not a heading\n```\n")
	for _, want := range []string{"pgrouted", "failover-and-errors", "what-it-costs-statements-connections", "pgrouted_max_lag", "failover-and-errors-1"} {
		if !a[want] {
			t.Errorf("no anchor %q in %v", want, a)
		}
	}
	if a["not-a-heading"] {
		t.Error("a line in a code block made an anchor")
	}
}

// TestRootREADMESnippetsAreTheCode: every Go block of the repository's
// README names the file it comes from (```go examples/gorm/open.go), and
// appears there verbatim, paragraph by paragraph: the examples' tests
// compile and run that file, and this test fails when the two drift.
func TestRootREADMESnippetsAreTheCode(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := fence.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 5 {
		t.Fatalf("only %d Go blocks in README.md", len(blocks))
	}
	var names []string
	for _, b := range blocks {
		file := strings.TrimSpace(b[1])
		if file == "" {
			t.Errorf("a Go block of README.md names no file, so nothing compiles it:\n%s", b[2])
			continue
		}
		names = append(names, file)
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
		if err != nil {
			t.Errorf("README block from %s: %v", file, err)
			continue
		}
		for _, part := range strings.Split(strings.TrimSpace(b[2]), "\n\n") {
			if !strings.Contains(string(src), part) {
				t.Errorf("README block from %s is not in the file:\n%s", file, part)
			}
		}
	}
	for _, want := range []string{"examples/databasesql/open.go", "examples/gorm/open.go", "examples/sqlx/open.go", "examples/ent/open.go", "examples/web/web.go", "examples/nethttp/server.go"} {
		if !slices.Contains(names, want) {
			t.Errorf("README.md shows nothing of %s", want)
		}
	}
}

// fakeSource is an empty Pool for Describe: a promcollector.PoolSource,
// so that the primary sessions' series are described too.
type fakeSource struct{}

func (fakeSource) Stats() pgrouted.Stats       { return pgrouted.Stats{} }
func (fakeSource) Topology() pgrouted.Snapshot { return pgrouted.Snapshot{} }
func (fakeSource) Stat() []pgrouted.HostPool   { return nil }

var _ promcollector.PoolSource = fakeSource{}

// TestMetricsDocumented: every Prometheus series promcollector describes
// is listed in its package documentation and in docs/observability.md,
// and so is every OpenTelemetry instrument of otelroute.
func TestMetricsDocumented(t *testing.T) {
	pkgDoc := read(t, "promcollector/doc.go")
	page := read(t, "docs/observability.md")
	ch := make(chan *prometheus.Desc, 200)
	promcollector.New(fakeSource{}).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	n := 0
	for d := range ch {
		m := fq.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		n++
		for doc, text := range map[string]string{"promcollector/doc.go": pkgDoc, "docs/observability.md": page} {
			if !regexp.MustCompile(`\b` + m[1] + `\b`).MatchString(text) {
				t.Errorf("%s does not list the series %s", doc, m[1])
			}
		}
	}
	if n < 60 {
		t.Errorf("only %d series described", n)
	}
	otelDoc := read(t, "otelroute/doc.go")
	// Every instrument RegisterMetrics creates, whichever helper creates
	// it (counter, updown, seconds, gauge): a call with its name first.
	inst := regexp.MustCompile(`\b(?:counter|updown|seconds|gauge)\("([^"]+)"`).FindAllStringSubmatch(read(t, "otelroute/metrics.go"), -1)
	if len(inst) < 50 {
		t.Fatalf("only %d otelroute instruments found", len(inst))
	}
	for _, m := range inst {
		for doc, text := range map[string]string{"otelroute/doc.go": otelDoc, "docs/observability.md": page} {
			if !strings.Contains(text, m[1]) {
				t.Errorf("%s does not list the instrument %s", doc, m[1])
			}
		}
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDockerCompose: docker-compose.yml parses; no published port is
// PostgreSQL's 5432 (a local server holds it); the application's role is
// not the image's superuser; every file it mounts exists; every file its
// comments name exists; and the DSN it documents parses.
func TestDockerCompose(t *testing.T) {
	text := read(t, "docker-compose.yml")
	var compose struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Volumes     []string          `yaml:"volumes"`
			Command     []string          `yaml:"command"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal([]byte(text), &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(compose.Services) != 3 {
		t.Fatalf("services: %d, want a primary and two replicas", len(compose.Services))
	}
	primary, ok := compose.Services["primary"]
	if !ok {
		t.Fatal("no primary service")
	}
	super := primary.Environment["POSTGRES_USER"]
	app := primary.Environment["APP_USER"]
	if app == "" || app == super || super == "" {
		t.Errorf("the application's role (APP_USER %q) must be set and differ from the superuser (POSTGRES_USER %q)", app, super)
	}
	for name, s := range compose.Services {
		if s.Image == "" || len(s.Ports) != 1 {
			t.Errorf("%s: image %q, ports %v", name, s.Image, s.Ports)
		}
		for _, p := range s.Ports {
			host, _, _ := strings.Cut(strings.Trim(p, `"`), ":")
			if host == "5432" {
				t.Errorf("%s publishes port 5432, which a local PostgreSQL holds", name)
			}
			if !strings.Contains(text, "localhost:"+host) {
				t.Errorf("%s: port %s is not in the documented DSN", name, host)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, "./") {
				if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(src))); err != nil {
					t.Errorf("%s mounts %s: %v", name, src, err)
				}
			} else if _, ok := compose.Volumes[src]; !ok {
				t.Errorf("%s mounts the undeclared volume %s", name, src)
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?m)(?:See|see) ((?:docs|docker)/[\w./-]+)`).FindAllStringSubmatch(text, -1) {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(strings.TrimSuffix(m[1], ".")))); err != nil {
			t.Errorf("docker-compose.yml names %s: %v", m[1], err)
		}
	}
	dsns := regexp.MustCompile(`postgres://\S+`).FindAllString(text+read(t, "docs/docker.md"), -1)
	if len(dsns) == 0 {
		t.Fatal("no DSN documented")
	}
	for _, d := range dsns {
		if _, err := pgrouted.ParseConfig(strings.Trim(d, "`'\"")); err != nil {
			t.Errorf("DSN %s: %v", d, err)
		}
		if !strings.Contains(d, "//"+app+":") {
			t.Errorf("DSN %s does not connect as the application's role %s", d, app)
		}
	}
}
