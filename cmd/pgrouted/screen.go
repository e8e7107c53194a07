package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/pgrouted/pgrouted"
)

// frame is everything one refresh of the demo's live view shows.
type frame struct {
	Elapsed, Duration time.Duration
	Phase, Phases     int // Phase is 1-based; 0 before the first
	Title, What       string

	Top    pgrouted.Snapshot
	Stats  pgrouted.Stats
	Notes  map[string]string // per host: what the demo did to it
	MaxLag time.Duration

	Reads, ReplicaReads, Checks, Stale, Errors, Interrupted uint64

	EventsTitle string
	Events      []Event
}

// demoTable is the live table: one row per host, with what pgrouted sees
// of it and what it served.
func demoTable(f *frame) *table {
	t := &table{
		header: []string{"ENDPOINT", "ROLE", "CIRCUIT", "LAG", "LAG BOUND", "RTT", "READS", "WRITES", "TX", "NOTE"},
		right:  map[int]bool{3: true, 4: true, 5: true, 6: true, 7: true, 8: true},
	}
	for _, h := range f.Top.Hosts {
		lb, lt := lagCells(h, f.MaxLag)
		st := f.Stats.Statements[h.Name]
		var notes []string
		if n := f.Notes[h.Name]; n != "" {
			notes = append(notes, n)
		}
		note := cell{}
		if behind(h, f.MaxLag) {
			notes = append(notes, fmt.Sprintf("behind: over %v, no reads", f.MaxLag))
			note.color = yellow
		}
		note.text = strings.Join(notes, "; ")
		t.rows = append(t.rows, []cell{
			{h.Name, bold}, roleCell(h, f.Top), circuitCell(h), lb, lt, rttCell(h),
			{formatCount(st[pgrouted.OpRead]), ""}, {formatCount(st[pgrouted.OpWrite]), ""}, {formatCount(st[pgrouted.OpTx]), ""},
			note,
		})
	}
	return t
}

// progressBar is [#####.....] over width characters.
func progressBar(done float64, width int, color bool) string {
	done = min(max(done, 0), 1)
	n := int(done*float64(width) + 0.5)
	full, empty := "#", "."
	if color {
		full, empty = "█", "░"
	}
	return "[" + strings.Repeat(full, n) + strings.Repeat(empty, width-n) + "]"
}

// renderFrame renders one refresh of the live view.
func renderFrame(f *frame, color bool) string {
	var b strings.Builder
	pct := 0.0
	if f.Duration > 0 {
		pct = float64(f.Elapsed) / float64(f.Duration)
	}
	head := "pgrouted demo"
	if color {
		head = paint(bold, head)
	}
	fmt.Fprintf(&b, "%s  %s %3.0f%%  %s / %s\n", head, progressBar(pct, 30, color), 100*min(pct, 1),
		f.Elapsed.Round(time.Second), f.Duration.Round(time.Second))
	title := f.Title
	if f.Phase > 0 {
		title = fmt.Sprintf("phase %d/%d: %s", f.Phase, f.Phases, f.Title)
	}
	if color {
		title = paint(bold, title)
	}
	b.WriteString(title + "\n")
	if f.What != "" {
		b.WriteString("  " + f.What + "\n")
	}
	b.WriteString("\n")
	b.WriteString(demoTable(f).render(color))
	b.WriteString("\n")
	share := 0.0
	if f.Reads > 0 {
		share = 100 * float64(f.ReplicaReads) / float64(f.Reads)
	}
	var total uint64
	for _, ops := range f.Stats.Statements {
		for _, n := range ops {
			total += n
		}
	}
	stale := fmt.Sprintf("stale reads %d", f.Stale)
	errs := fmt.Sprintf("errors %d", f.Errors)
	if color {
		stale = paint(map[bool]string{true: green, false: red}[f.Stale == 0], stale)
		errs = paint(map[bool]string{true: green, false: red}[f.Errors == 0], errs)
	}
	fmt.Fprintf(&b, "statements %s · reads on replicas %.0f%% · read-your-writes checks %s · %s · %s",
		formatCount(total), share, formatCount(f.Checks), stale, errs)
	if f.Interrupted > 0 {
		fmt.Fprintf(&b, " · interrupted by faults %d", f.Interrupted)
	}
	b.WriteString("\n")
	if fb := formatReasons(reasonCounts(f.Stats.Fallbacks)); fb != "" {
		fmt.Fprintf(&b, "reads that fell back to the primary: %s\n", fb)
	}
	if f.EventsTitle != "" {
		b.WriteString("\n" + f.EventsTitle + "\n")
		for _, e := range f.Events {
			line := "  " + truncate(e.String(), 150)
			if color {
				switch {
				case e.Level == "ERROR" || strings.HasPrefix(e.Message, "STALE"):
					line = paint(red, line)
				case e.Level == "WARN":
					line = paint(yellow, line)
				case e.Source != "pgrouted":
					line = paint(dim, line)
				}
			}
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}
