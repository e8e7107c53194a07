package examples_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted"
)

// fence is a Go code block of the README, which names the file it comes
// from: ```go gorm/open.go
var fence = regexp.MustCompile("(?s)```go( [^\\n]*)?\\n(.*?)```")

// TestREADMESnippetsAreTheCode: every Go block of README.md appears
// verbatim in the file it names, and every function of the examples'
// open.go files (the lines a user copies) appears in the README.
func TestREADMESnippetsAreTheCode(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := fence.FindAllStringSubmatch(string(readme), -1)
	if len(blocks) < 6 {
		t.Fatalf("only %d Go blocks in README.md", len(blocks))
	}
	for _, b := range blocks {
		file := strings.TrimSpace(b[1])
		if file == "" {
			t.Errorf("a Go block names no file, so nothing checks it:\n%s", b[2])
			continue
		}
		src, err := os.ReadFile(filepath.FromSlash(file))
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
	files, err := filepath.Glob("*/open.go")
	if err != nil || len(files) != 5 {
		t.Fatalf("open.go files: %v, %v", files, err)
	}
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		af, err := parser.ParseFile(fset, f, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			code := string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset])
			if !strings.Contains(string(readme), code) {
				t.Errorf("%s: func %s is not shown in README.md", f, fd.Name.Name)
			}
		}
	}
}

// TestREADMEDSNsParse: the DSNs the README shows are valid pgrouted DSNs.
func TestREADMEDSNsParse(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	dsns := regexp.MustCompile(`postgres://[^\s"`+"`"+`]+`).FindAllString(string(readme), -1)
	if len(dsns) < 2 {
		t.Fatalf("only %d DSNs in README.md", len(dsns))
	}
	for _, d := range dsns {
		if _, err := pgrouted.ParseConfig(d); err != nil {
			t.Errorf("README DSN %s: %v", d, err)
		}
	}
}
