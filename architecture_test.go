//go:build unix

package pgrouted_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/pgrouted/pgrouted/internal/consistency"
)

// TestArchitectureNamesEveryFile: docs/architecture.md has a paragraph for
// every file of the root package and every internal package.
func TestArchitectureNamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		n++
		if !strings.Contains(text, "**"+f+"**") {
			t.Errorf("docs/architecture.md has no paragraph for %s (a line starting with - **%s**)", f, f)
		}
	}
	dirs, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !strings.Contains(text, "**internal/"+d.Name()+"**") {
			t.Errorf("docs/architecture.md has no paragraph for internal/%s", d.Name())
		}
	}
	if n < 30 {
		t.Fatalf("found %d root files: not run from the package's directory?", n)
	}
}

// TestReadYourWritesStateHasOneOwner: the read-your-writes state can be
// changed only by internal/consistency: its State and Mark have no field
// another package can reach, no file outside that package (tests aside)
// builds a State or stores one through sync/atomic, and no file of the
// root package imports unsafe.
func TestReadYourWritesStateHasOneOwner(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[consistency.State](), reflect.TypeFor[consistency.Mark]()} {
		for i := range typ.NumField() {
			if f := typ.Field(i); f.IsExported() {
				t.Errorf("consistency.%s has an exported field %s: code outside the package could change the state", typ.Name(), f.Name)
			}
		}
	}
	fset := token.NewFileSet()
	var files []string
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (path == filepath.Join("internal", "consistency") || strings.HasPrefix(d.Name(), ".")) && path != "." {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, path := range files {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		name := "" // what internal/consistency is imported as
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if p == "unsafe" && filepath.Dir(path) == "." {
				t.Errorf("%s imports unsafe", path)
			}
			if p == "github.com/pgrouted/pgrouted/internal/consistency" {
				name = "consistency"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			continue
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			var x ast.Expr
			switch n := n.(type) {
			case *ast.CompositeLit:
				x = n.Type
			case *ast.IndexExpr: // atomic.Pointer[consistency.State]
				x = n.Index
			default:
				return true
			}
			if sel, ok := x.(*ast.SelectorExpr); ok && sel.Sel.Name == "State" {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == name {
					t.Errorf("%s: %s builds or stores a consistency.State: only internal/consistency may", path, fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no file outside internal/consistency imports it: the scan looked in the wrong place")
	}
}
