//go:build unix

package pgrouted_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
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

// TestArchitectureNamesExist: every backticked name in docs/architecture.md
// exists: an identifier (`pickReplica`, `Mark`) is declared somewhere in
// the module (a type, function, method, field, constant or variable); a
// qualified one (`conn.run`, `pgpipe.OK`, `sql.Open`) is a method or field
// of that type, or a name declared in that package (the module's own, or
// the standard library's database/sql and database/sql/driver); a name
// ending in * (`raise*`) is the prefix of one; a path is a directory of the
// module; a pgrouted_ or pool_ key (or key=value, or a prefix ending in _)
// is one the dsn package knows. The page is the one
// place a maintainer learns the layout: a name renamed or removed in the
// code and left in the page fails here.
func TestArchitectureNamesExist(t *testing.T) {
	doc, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	// Outside fenced blocks (a drawing of the layout, not names).
	var prose strings.Builder
	fenced := false
	for line := range strings.SplitSeq(string(doc), "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			prose.WriteString(line + "\n")
		}
	}
	decl := declaredNames(t)
	dsnSrc := readDir(t, "dsn")
	checked := 0
	for _, m := range regexp.MustCompile("`([^`\n]+)`").FindAllStringSubmatch(prose.String(), -1) {
		name := m[1]
		ok := true
		switch {
		case strings.HasPrefix(name, `"`), strings.HasPrefix(name, "**"):
			continue // a string or file name; files: TestArchitectureNamesEveryFile
		case strings.HasPrefix(name, "pgrouted_"), strings.HasPrefix(name, "pool_"):
			// A key, a key=value, or a prefix of keys (pool_).
			key, _, _ := strings.Cut(name, "=")
			if strings.HasSuffix(key, "_") {
				ok = strings.Contains(dsnSrc, `"`+key)
			} else {
				ok = strings.Contains(dsnSrc, `"`+key+`"`)
			}
		case strings.Contains(name, "/"):
			st, err := os.Stat(name)
			ok = err == nil && st.IsDir()
		case identPath.MatchString(name):
			ok = decl.has(name)
		default:
			continue // code, not a name
		}
		checked++
		if !ok {
			t.Errorf("docs/architecture.md names `%s`, which the code does not declare (renamed or removed?)", name)
		}
	}
	if checked < 30 {
		t.Fatalf("checked %d names of docs/architecture.md: the page or the parse changed", checked)
	}
}

// identPath is a Go name, optionally qualified once (Type.Member,
// package.Name), optionally ending in * (a prefix).
var identPath = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?\*?$`)

// declared is what TestArchitectureNamesExist checks against: every name
// declared at the top level of the module's packages, and for each
// package and type the names declared in or on it.
type declared struct {
	all     map[string]bool            // every top-level name, method and field
	members map[string]map[string]bool // type or package name -> its names
}

// has reports whether name (see identPath) is declared.
func (n declared) has(name string) bool {
	prefix := strings.HasSuffix(name, "*")
	name = strings.TrimSuffix(name, "*")
	set := n.all
	if q, member, ok := strings.Cut(name, "."); ok {
		set, name = n.members[q], member
	}
	if !prefix {
		return set[name]
	}
	for k := range set {
		if strings.HasPrefix(k, name) {
			return true
		}
	}
	return false
}

// declaredNames parses the module's Go files (of test files, their tests
// alone: the page may name a test), and database/sql and
// database/sql/driver.
func declaredNames(t *testing.T) declared {
	t.Helper()
	n := declared{all: map[string]bool{}, members: map[string]map[string]bool{}}
	member := func(owner, name string) {
		if n.members[owner] == nil {
			n.members[owner] = map[string]bool{}
		}
		n.members[owner][name] = true
		n.all[name] = true
	}
	add := func(pkg string, f *ast.File) {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					member(pkg, d.Name.Name)
					continue
				}
				typ := d.Recv.List[0].Type
				for {
					switch x := typ.(type) {
					case *ast.StarExpr:
						typ = x.X
						continue
					case *ast.IndexExpr:
						typ = x.X
						continue
					case *ast.IndexListExpr:
						typ = x.X
						continue
					}
					break
				}
				if id, ok := typ.(*ast.Ident); ok {
					member(id.Name, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						member(pkg, s.Name.Name)
						switch x := s.Type.(type) {
						case *ast.StructType:
							for _, fl := range x.Fields.List {
								for _, fn := range fl.Names {
									member(s.Name.Name, fn.Name)
								}
								if len(fl.Names) == 0 { // embedded
									if id, ok := fl.Type.(*ast.Ident); ok {
										member(s.Name.Name, id.Name)
									}
								}
							}
						case *ast.InterfaceType:
							for _, fl := range x.Methods.List {
								for _, fn := range fl.Names {
									member(s.Name.Name, fn.Name)
								}
							}
						}
					case *ast.ValueSpec:
						for _, vn := range s.Names {
							member(pkg, vn.Name)
						}
					}
				}
			}
		}
	}
	fset := token.NewFileSet()
	parseDir := func(dir string) {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, file := range files {
			f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasSuffix(file, "_test.go") {
				// Of a test file, only its tests: a helper of the
				// tests is no part of the layout.
				for _, d := range f.Decls {
					if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && strings.HasPrefix(fd.Name.Name, "Test") {
						member(f.Name.Name, fd.Name.Name)
					}
				}
				continue
			}
			add(f.Name.Name, f)
		}
	}
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			parseDir(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	goroot := build.Default.GOROOT
	parseDir(filepath.Join(goroot, "src", "database", "sql"))
	parseDir(filepath.Join(goroot, "src", "database", "sql", "driver"))
	return n
}

// readDir is the text of dir's Go files, tests left out.
func readDir(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(src)
	}
	return b.String()
}
