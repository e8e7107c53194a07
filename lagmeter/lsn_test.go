package lagmeter

import (
	"encoding/json"
	"testing"
)

func TestParseLSN(t *testing.T) {
	tests := []struct {
		in   string
		want LSN
		err  bool
	}{
		{"0/0", 0, false},
		{"16/B374D848", 0x16B374D848, false},
		{"FFFFFFFF/FFFFFFFF", 0xFFFFFFFFFFFFFFFF, false},
		{" 1/2 ", 0x100000002, false},
		{"", 0, true},
		{"1", 0, true},
		{"/1", 0, true},
		{"1/", 0, true},
		{"G/1", 0, true},
		{"123456789/0", 0, true},
		{"-1/0", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseLSN(tt.in)
		if (err != nil) != tt.err {
			t.Errorf("ParseLSN(%q) error = %v, want error %v", tt.in, err, tt.err)
			continue
		}
		if err == nil && got != tt.want {
			t.Errorf("ParseLSN(%q) = %v, want %v", tt.in, got, tt.want)
		}
		if err == nil {
			back, err := ParseLSN(got.String())
			if err != nil || back != got {
				t.Errorf("round trip of %v gave %v, %v", got, back, err)
			}
		}
	}
}

func TestLSNSubAndJSON(t *testing.T) {
	a, b := LSN(0x100000010), LSN(0x100000000)
	if a.Sub(b) != 16 || b.Sub(a) != 0 {
		t.Fatalf("Sub: %d %d", a.Sub(b), b.Sub(a))
	}
	j, err := json.Marshal(a)
	if err != nil || string(j) != `"1/10"` {
		t.Fatalf("json = %s, %v", j, err)
	}
	var c LSN
	if err := json.Unmarshal(j, &c); err != nil || c != a {
		t.Fatalf("unmarshal = %v, %v", c, err)
	}
}
