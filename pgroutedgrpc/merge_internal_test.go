package pgroutedgrpc

import "testing"

// TestMerge: the position that needs both the caller's writes and the
// server's.
func TestMerge(t *testing.T) {
	tests := []struct {
		cur, r, want string
		ok           bool
	}{
		{"", "v1:A:1:0/10", "v1:A:1:0/10", true},
		{"v1:A:1:0/10", "", "v1:A:1:0/10", true},
		{"v1:A:1:0/10", "v1:A:1:0/20", "v1:A:1:0/20", true},
		{"v1:A:1:0/20", "v1:A:1:0/10", "v1:A:1:0/20", true},
		{"v1:A:1:0/20", "v1:A:1:0/20", "v1:A:1:0/20", true},
		{"v1:A:1:5/0", "v1:A:2:0/10", "v1:A:2:0/10", true}, // a later timeline
		{"v1:A:3:0/10", "v1:A:2:5/0", "v1:A:3:0/10", true},
		{"v1:A:1:0/20;unknown", "v1:A:1:0/10", "v1:A:1:0/20;unknown", true},
		{"v1:A:1:0/10;unknown", "v1:A:1:0/20", "v1:A:1:0/20;unknown", true},
		{"v1:A:1:0/20", "v1:A:1:0/10;unknown", "v1:A:1:0/20;unknown", true},
		{";unknown", "v1:A:1:0/10", "v1:A:1:0/10;unknown", true},
		{"v1:A:1:0/10", ";unknown", "v1:A:1:0/10;unknown", true},
		{"v1:A:1:0/10", "v1:B:1:0/20", "v1:A:1:0/10", false}, // another cluster
		{"v1:A:1:0/10;unknown", "v1:B:1:0/20;unknown", "v1:A:1:0/10;unknown", false},
	}
	for _, tt := range tests {
		cur, err := parsePosition(tt.cur)
		if err != nil {
			t.Fatal(err)
		}
		r, err := parsePosition(tt.r)
		if err != nil {
			t.Fatal(err)
		}
		m, ok := merge(cur, r)
		if m.text() != tt.want || ok != tt.ok {
			t.Errorf("merge(%q, %q) = %q, %v; want %q, %v", tt.cur, tt.r, m.text(), ok, tt.want, tt.ok)
		}
	}
	for _, bad := range []string{"garbage", "v1:A:1:0/10;unknown;unknown", "v1:a:1:0/10"} {
		if _, err := parsePosition(bad); err == nil {
			t.Errorf("parsePosition(%q): no error", bad)
		}
	}
}
