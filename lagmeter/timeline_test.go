package lagmeter

import (
	"strings"
	"testing"
)

func TestParseTimelineHistory(t *testing.T) {
	// What PostgreSQL writes in 00000003.history after two promotions.
	h, err := ParseTimelineHistory("1\t0/3000148\tno recovery target specified\n\n2\t0/5A0C3D8\tno recovery target specified\n")
	if err != nil {
		t.Fatal(err)
	}
	want := []TimelineSwitch{{1, 0x3000148}, {2, 0x5A0C3D8}}
	if len(h) != len(want) || h[0] != want[0] || h[1] != want[1] {
		t.Fatalf("got %v, want %v", h, want)
	}
	if sp, ok := SwitchPoint(h, 2); !ok || sp != 0x5A0C3D8 {
		t.Errorf("SwitchPoint(2) = %v, %v", sp, ok)
	}
	if _, ok := SwitchPoint(h, 3); ok {
		t.Error("SwitchPoint(3): the current timeline has no switch point")
	}
	if h, err := ParseTimelineHistory("# comment\n"); err != nil || len(h) != 0 {
		t.Errorf("comment only: %v, %v", h, err)
	}
	for _, bad := range []string{"1", "x\t0/1", "1\tnope", "2\t0/1\n1\t0/2", "0\t0/1"} {
		if _, err := ParseTimelineHistory(bad); err == nil || !strings.Contains(err.Error(), "line") {
			t.Errorf("%q: error %v, want one naming the line", bad, err)
		}
	}
}
