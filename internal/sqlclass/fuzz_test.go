package sqlclass

import "testing"

// FuzzClassify checks that Classify never panics and that its conservative
// promises hold for any input s:
//
//   - a write appended as a statement of its own is never lost: s followed
//     by "\n; DELETE FROM t" is at least a Write, whatever s leaves open
//     (an unterminated string, quoted identifier, dollar quote or block
//     comment swallows the DELETE, but then the input is Unknown). The
//     newline ends a line comment at the end of s, which would otherwise,
//     rightly, swallow the DELETE;
//   - likewise an advisory lock appended is Session, or the input is at
//     least Unknown;
//   - a read before s does not change the class of s;
//   - a routing comment before s does not change its class;
//   - a catalog only makes a statement more dangerous: ClassifyWith is at
//     least Classify, and its FuncName lies within s.
func FuzzClassify(f *testing.F) {
	for _, tt := range classifyTests {
		f.Add(tt.sql)
	}
	for _, tt := range functionTests {
		f.Add(tt.sql)
	}
	fn := testFunctions(f, []string{"jitter"}, []string{"app.audit"})
	f.Fuzz(func(t *testing.T, s string) {
		r := Classify(s)
		if r.Class >= numClasses || r.Hint > HintReplica || r.Statements < 0 {
			t.Fatalf("Classify(%q) = %+v: out of range", s, r)
		}
		if r.Statements == 0 && r.Class != Read {
			t.Fatalf("Classify(%q) = %+v: no statement but not a read", s, r)
		}
		if r.Statements > 0 && !r.Has(r.Class) {
			t.Fatalf("Classify(%q) = %+v: Has(Class) is false", s, r)
		}

		if w := Classify(s + "\n; DELETE FROM t"); rank[w.Class] < rank[Write] {
			t.Fatalf("Classify(%q + DELETE) = %v, want at least write", s, w.Class)
		}
		if l := Classify(s + "\n; SELECT pg_advisory_lock(1)"); l.Class != Session && rank[l.Class] < rank[Unknown] {
			t.Fatalf("Classify(%q + advisory lock) = %v, want session, or at least unknown", s, l.Class)
		}
		if p := Classify("SELECT 1;\n" + s); p.Class != r.Class {
			t.Fatalf("Classify(SELECT 1; + %q) = %v, Classify(%q) = %v", s, p.Class, s, r.Class)
		}
		if h := Classify("/* pgrouted:replica */ " + s); h.Class != r.Class {
			t.Fatalf("Classify(hint + %q) = %v, Classify(%q) = %v", s, h.Class, s, r.Class)
		}
		w := ClassifyWith(s, fn)
		if rank[w.Class] < rank[r.Class] || w.Statements != r.Statements || w.Hint != r.Hint {
			t.Fatalf("ClassifyWith(%q) = %+v, Classify = %+v", s, w, r)
		}
		if w.Func != FuncNone && (w.FuncStart < 0 || w.FuncEnd > len(s) || w.FuncStart > w.FuncEnd) {
			t.Fatalf("ClassifyWith(%q): function span [%d, %d) outside the input", s, w.FuncStart, w.FuncEnd)
		}
		if w.Func != FuncNone && rank[w.Class] < rank[w.Func.class()] {
			t.Fatalf("ClassifyWith(%q) = %v with %v", s, w.Class, w.Func)
		}
	})
}
