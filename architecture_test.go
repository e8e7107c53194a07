//go:build unix

package pgrouted_test

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/printer"
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
				if recv := typeName(d.Recv.List[0].Type); recv != "" {
					member(recv, d.Name.Name)
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

// statementPath is the files of the root package a statement's path runs
// through, from its plan to its result (docs/architecture.md, "The path of
// a statement"): TestArchitectureNoCycles allows no two of them to call
// each other both ways.
var statementPath = []string{
	"conn.go", "connstate.go", "call.go", "route.go",
	"plan.go", "pick.go",
	"intent.go", "eligible.go", "position.go", "raise.go", "loss.go", "causal.go",
	"replica.go", "replicawait.go",
	"primary.go", "primaryrun.go",
	"tx.go", "stmt.go", "rows.go", "pool_rows.go",
}

// cycleAllowed is the pairs of files of the statement path that still call
// each other both ways, each with why; empty when there are none.
var cycleAllowed = map[[2]string]string{}

// TestArchitectureNoCycles: no two files of the statement path call each
// other both ways. It builds the file-level call graph of the root
// package's functions and methods (a call from a function declared in one
// file to one declared in another) from the syntax alone: a method call
// is resolved by the type of its receiver where the declarations show it
// (receivers, parameters, fields, results, composite literals), else,
// when unexported, by its name when only one file declares methods of
// that name.
func TestArchitectureNoCycles(t *testing.T) {
	g := callGraph(t)
	onPath := map[string]bool{}
	for _, f := range statementPath {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("statementPath names %s: %v", f, err)
		}
		onPath[f] = true
	}
	for i, a := range statementPath {
		for _, b := range statementPath[i+1:] {
			ab, ba := g.calls[[2]string{a, b}], g.calls[[2]string{b, a}]
			if len(ab) == 0 || len(ba) == 0 {
				continue
			}
			if why, ok := cycleAllowed[[2]string{a, b}]; ok {
				t.Logf("%s <-> %s allowed: %s", a, b, why)
				continue
			}
			t.Errorf("%s and %s call each other:\n\t%s\n\t%s", a, b, strings.Join(ab, "\n\t"), strings.Join(ba, "\n\t"))
		}
	}
	for p := range cycleAllowed {
		if len(g.calls[p]) == 0 || len(g.calls[[2]string{p[1], p[0]}]) == 0 {
			t.Errorf("cycleAllowed lists %s <-> %s, which no longer call each other both ways", p[0], p[1])
		}
	}
	if len(g.calls) < 50 {
		t.Fatalf("the call graph has %d edges between files: the parse changed", len(g.calls))
	}
}

// fileCalls is the root package's call graph between files: for each
// (caller's file, callee's file), the calls "caller -> callee".
type fileCalls struct {
	calls map[[2]string][]string
}

// callGraph parses the root package's non-test files and builds their
// fileCalls.
func callGraph(t *testing.T) fileCalls {
	t.Helper()
	_, parsed, names := parseRootFiles(t)
	type fn struct {
		file    string
		results []ast.Expr
	}
	funcs := map[string]fn{}                   // package-level function -> its declaration
	methods := map[string]fn{}                 // Type.method -> its declaration
	byName := map[string]map[string]bool{}     // method -> the files declaring one of that name
	fields := map[string]map[string]ast.Expr{} // Type -> field -> its type
	for _, f := range parsed {
		path := names[f]
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				var res []ast.Expr
				if d.Type.Results != nil {
					for _, r := range d.Type.Results.List {
						for range max(len(r.Names), 1) {
							res = append(res, r.Type)
						}
					}
				}
				if d.Recv == nil {
					funcs[d.Name.Name] = fn{path, res}
					continue
				}
				typ := typeName(d.Recv.List[0].Type)
				methods[typ+"."+d.Name.Name] = fn{path, res}
				if byName[d.Name.Name] == nil {
					byName[d.Name.Name] = map[string]bool{}
				}
				byName[d.Name.Name][path] = true
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					fields[ts.Name.Name] = map[string]ast.Expr{}
					for _, fl := range st.Fields.List {
						for _, n := range fl.Names {
							fields[ts.Name.Name][n.Name] = fl.Type
						}
						if len(fl.Names) == 0 {
							fields[ts.Name.Name][typeName(fl.Type)] = fl.Type
						}
					}
				}
			}
		}
	}
	g := fileCalls{calls: map[[2]string][]string{}}
	for _, f := range parsed {
		file := names[f]
		imports := map[string]bool{}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			name := filepath.Base(p)
			if strings.HasPrefix(name, "v") && len(name) <= 3 { // pgx/v5
				name = filepath.Base(filepath.Dir(p))
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imports[name] = true
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			caller := fd.Name.Name
			env := map[string]string{} // local name -> its type's name
			bind := func(fl *ast.FieldList) {
				if fl == nil {
					return
				}
				for _, p := range fl.List {
					for _, n := range p.Names {
						env[n.Name] = typeName(p.Type)
					}
				}
			}
			if fd.Recv != nil {
				caller = typeName(fd.Recv.List[0].Type) + "." + caller
				bind(fd.Recv)
			}
			bind(fd.Type.Params)
			bind(fd.Type.Results)
			var typeOf func(x ast.Expr) string
			callee := func(call *ast.CallExpr) (string, fn, bool) {
				switch x := call.Fun.(type) {
				case *ast.Ident:
					if _, local := env[x.Name]; local {
						return "", fn{}, false
					}
					d, ok := funcs[x.Name]
					return x.Name, d, ok
				case *ast.SelectorExpr:
					if id, ok := x.X.(*ast.Ident); ok && imports[id.Name] {
						if _, local := env[id.Name]; !local {
							return "", fn{}, false
						}
					}
					typ := typeOf(x.X)
					if strings.Contains(typ, ".") {
						return "", fn{}, false // another package's type
					}
					if typ != "" {
						if d, ok := methods[typ+"."+x.Sel.Name]; ok {
							return typ + "." + x.Sel.Name, d, true
						}
						if _, ok := fields[typ][x.Sel.Name]; ok {
							return "", fn{}, false // a field of func type
						}
					}
					// By its name alone only when unexported: an exported
					// one may be another package's interface method.
					if fs := byName[x.Sel.Name]; len(fs) == 1 && !ast.IsExported(x.Sel.Name) {
						for k, d := range methods {
							if _, m, _ := strings.Cut(k, "."); m == x.Sel.Name && fs[d.file] {
								return k, d, true
							}
						}
					}
				}
				return "", fn{}, false
			}
			typeOf = func(x ast.Expr) string {
				switch x := x.(type) {
				case *ast.Ident:
					return env[x.Name]
				case *ast.ParenExpr:
					return typeOf(x.X)
				case *ast.StarExpr:
					return typeOf(x.X)
				case *ast.UnaryExpr:
					return typeOf(x.X)
				case *ast.CompositeLit:
					return typeName(x.Type)
				case *ast.IndexExpr:
					return elemName(typeOfExpr(x.X, env, fields))
				case *ast.SelectorExpr:
					if ft, ok := fields[typeOf(x.X)][x.Sel.Name]; ok {
						return typeName(ft)
					}
				case *ast.CallExpr:
					if _, d, ok := callee(x); ok && len(d.results) > 0 {
						return typeName(d.results[0])
					} else if !ok {
						if sel, isSel := x.Fun.(*ast.SelectorExpr); isSel {
							if id, isID := sel.X.(*ast.Ident); isID && imports[id.Name] {
								return "ext." + sel.Sel.Name // another package's result
							}
						}
					}
				}
				return ""
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.AssignStmt:
					if n.Tok == token.DEFINE {
						if len(n.Lhs) == len(n.Rhs) {
							for i, l := range n.Lhs {
								if id, ok := l.(*ast.Ident); ok {
									env[id.Name] = typeOf(n.Rhs[i])
								}
							}
						} else if call, ok := n.Rhs[0].(*ast.CallExpr); ok && len(n.Rhs) == 1 {
							_, d, _ := callee(call)
							for i, l := range n.Lhs {
								if id, ok := l.(*ast.Ident); ok && i < len(d.results) {
									env[id.Name] = typeName(d.results[i])
								}
							}
						}
					}
				case *ast.RangeStmt:
					if id, ok := n.Value.(*ast.Ident); ok && n.Tok == token.DEFINE {
						env[id.Name] = elemName(typeOfExpr(n.X, env, fields))
					}
				case *ast.ValueSpec:
					if n.Type != nil {
						for _, id := range n.Names {
							env[id.Name] = typeName(n.Type)
						}
					}
				case *ast.FuncLit:
					bind(n.Type.Params)
				case *ast.CallExpr:
					name, d, ok := callee(n)
					if ok && d.file != file {
						k := [2]string{file, d.file}
						call := caller + " -> " + name
						if !slicesContains(g.calls[k], call) {
							g.calls[k] = append(g.calls[k], call)
						}
					}
				}
				return true
			})
		}
	}
	return g
}

// typeOfExpr is the declared type of a local or a field, for indexing and
// ranging (a slice's element type).
func typeOfExpr(x ast.Expr, env map[string]string, fields map[string]map[string]ast.Expr) ast.Expr {
	switch x := x.(type) {
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok {
			return fields[env[id.Name]][x.Sel.Name]
		}
	}
	return nil
}

// elemName is the name of the element type of a slice or array type.
func elemName(x ast.Expr) string {
	switch x := x.(type) {
	case *ast.ArrayType:
		return typeName(x.Elt)
	}
	return ""
}

// typeName is the name of a type expression without pointers or type
// arguments ("" for anything but a named type).
func typeName(x ast.Expr) string {
	for {
		switch y := x.(type) {
		case *ast.StarExpr:
			x = y.X
			continue
		case *ast.IndexExpr:
			x = y.X
			continue
		case *ast.IndexListExpr:
			x = y.X
			continue
		case *ast.Ident:
			return y.Name
		case *ast.SelectorExpr: // another package's: "pkg.Name"
			if id, ok := y.X.(*ast.Ident); ok {
				return id.Name + "." + y.Sel.Name
			}
		}
		return ""
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// maxFuncLines is the longest a function of the root package may be, from
// its func line to its closing brace: the routing core reads as named
// steps, each short enough to hold in mind (docs/architecture.md).
const maxFuncLines = 60

// TestArchitectureShortFunctions: no function or method of the root
// package (its files but the tests) is longer than maxFuncLines. Split a
// long one along its steps, each a function that says what it does.
func TestArchitectureShortFunctions(t *testing.T) {
	fset, parsed, names := parseRootFiles(t)
	for _, f := range parsed {
		path := names[f]
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			from, to := fset.Position(fd.Pos()).Line, fset.Position(fd.End()).Line
			if n := to - from + 1; n > maxFuncLines {
				name := fd.Name.Name
				if fd.Recv != nil && len(fd.Recv.List) == 1 {
					name = typeName(fd.Recv.List[0].Type) + "." + name
				}
				t.Errorf("%s:%d: %s is %d lines long, more than %d: split it along its steps", path, from, name, n, maxFuncLines)
			}
		}
	}
}

// parseRootFiles parses the root package's files but its tests, in the
// order of their names, and returns them with their names.
func parseRootFiles(t *testing.T) (*token.FileSet, []*ast.File, map[*ast.File]string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var parsed []*ast.File
	names := map[*ast.File]string{}
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, f)
		names[f] = path
	}
	return fset, parsed, names
}

// faceFile reports whether path is a file of the driver's two faces: the
// executor interface and database/sql's face (executor.go), and the
// pgx-native API's (pgxcall.go and the Pool's files, pool*.go).
func faceFile(path string) bool {
	return path == "executor.go" || path == "pgxcall.go" || strings.HasPrefix(path, "pool")
}

// TestArchitectureOneExecutor: the routing core runs every call through
// its face (call.ex, an executor) and never asks which face it is: no
// file but the faces' names a face's type (sqlExec, pgxCall, its pgx
// kinds, pgxOf), asserts or switches on a call's face, or compares it with
// nil; and call has no field but ex for it.
func TestArchitectureOneExecutor(t *testing.T) {
	fset, parsed, names := parseRootFiles(t)
	faceNames := regexp.MustCompile(`^(sqlExec|pgxCall|pgxOf|px(Exec|Query|Batch|Copy|Begin))$`)
	isEx := func(e ast.Expr) bool {
		s, ok := e.(*ast.SelectorExpr)
		return ok && s.Sel.Name == "ex"
	}
	for _, f := range parsed {
		path := names[f]
		if faceFile(path) {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.Ident:
				if faceNames.MatchString(n.Name) {
					t.Errorf("%s: names %s: the routing core runs a call through its face (call.ex) without knowing it", fset.Position(n.Pos()), n.Name)
				}
			case *ast.TypeAssertExpr:
				if isEx(n.X) {
					t.Errorf("%s: asserts a call's face: run it through the executor instead", fset.Position(n.Pos()))
				}
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && (isEx(n.X) || isEx(n.Y)) {
					t.Errorf("%s: compares a call's face: every call has one", fset.Position(n.Pos()))
				}
			case *ast.TypeSpec:
				if n.Name.Name != "call" {
					break
				}
				st, ok := n.Type.(*ast.StructType)
				if !ok {
					break
				}
				for _, fld := range st.Fields.List {
					for _, name := range fld.Names {
						if name.Name != "ex" && name.Name != "saw" {
							t.Errorf("%s: call has a field %s: a face's side of a call is its executor's (call.ex)", fset.Position(name.Pos()), name.Name)
						}
					}
				}
			}
			return true
		})
	}
}

// TestArchitectureOutcomeReturned: what became of a call on its way is
// returned by each step (outcome), never kept in the call: call embeds
// what runs and what it returned (callText, callResults) and nothing else,
// none of its parts holds an outcome or a replica run's (replicaRun), and
// no code takes an outcome's address to write it elsewhere (*outcome).
func TestArchitectureOutcomeReturned(t *testing.T) {
	fset, parsed, _ := parseRootFiles(t)
	holds := regexp.MustCompile(`\b(outcome|replicaRun|callOutcome)\b`)
	parts := map[string]bool{"call": true, "callText": true, "callResults": true}
	seen := map[string]bool{}
	for _, f := range parsed {
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.TypeSpec:
				st, ok := n.Type.(*ast.StructType)
				if !ok || !parts[n.Name.Name] {
					break
				}
				seen[n.Name.Name] = true
				for _, fld := range st.Fields.List {
					typ := exprText(fset, fld.Type)
					if holds.MatchString(typ) {
						t.Errorf("%s: %s holds %s: a step returns what became of a call (outcome), the call does not keep it", fset.Position(fld.Pos()), n.Name.Name, typ)
					}
					if n.Name.Name == "call" && len(fld.Names) == 0 && typ != "callText" && typ != "callResults" {
						t.Errorf("%s: call embeds %s: it embeds what runs and what it returned only", fset.Position(fld.Pos()), typ)
					}
				}
			case *ast.StarExpr:
				if id, ok := n.X.(*ast.Ident); ok && id.Name == "outcome" {
					t.Errorf("%s: *outcome: an outcome is a value each step returns, and its route joins (outcome.then)", fset.Position(n.Pos()))
				}
			}
			return true
		})
	}
	for name := range parts {
		if !seen[name] {
			t.Errorf("no struct type %s in the root package: this test looks at the wrong names", name)
		}
	}
}

// exprText is the source text of the type expression e.
func exprText(fset *token.FileSet, e ast.Expr) string {
	var b strings.Builder
	if err := printer.Fprint(&b, fset, e); err != nil {
		return ""
	}
	return b.String()
}
