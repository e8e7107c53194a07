package lagmeter

import (
	"fmt"
	"strconv"
	"strings"
)

// TimelineSwitch is one entry of a timeline history: the history left
// Timeline at LSN (the switch point). WAL up to LSN on Timeline is part of
// every later timeline of that history; WAL past it on Timeline is not.
type TimelineSwitch struct {
	Timeline uint32 `json:"timeline"`
	LSN      LSN    `json:"lsn"`
}

// ParseTimelineHistory parses a timeline history file (pg_wal/NNNNNNNN.history,
// as TIMELINE_HISTORY returns it): one line per earlier timeline, "parent
// timeline, tab, switch point, tab, reason", with blank lines and lines
// starting with '#' ignored. Timelines must increase from line to line.
func ParseTimelineHistory(text string) ([]TimelineSwitch, error) {
	var out []TimelineSwitch
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("lagmeter: timeline history line %d: want a timeline and a switch point, got %q", n+1, line)
		}
		tli, err := strconv.ParseUint(f[0], 10, 32)
		if err != nil || tli == 0 {
			return nil, fmt.Errorf("lagmeter: timeline history line %d: bad timeline %q", n+1, f[0])
		}
		lsn, err := ParseLSN(f[1])
		if err != nil {
			return nil, fmt.Errorf("lagmeter: timeline history line %d: %w", n+1, err)
		}
		if len(out) > 0 && uint32(tli) <= out[len(out)-1].Timeline {
			return nil, fmt.Errorf("lagmeter: timeline history line %d: timeline %d does not follow %d", n+1, tli, out[len(out)-1].Timeline)
		}
		out = append(out, TimelineSwitch{Timeline: uint32(tli), LSN: lsn})
	}
	return out, nil
}

// SwitchPoint returns where history left timeline tli, and whether it
// records tli at all.
func SwitchPoint(history []TimelineSwitch, tli uint32) (LSN, bool) {
	for _, s := range history {
		if s.Timeline == tli {
			return s.LSN, true
		}
	}
	return 0, false
}
