package workload

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Table is one benchmark's result, written as a Markdown table: a title,
// a paragraph saying what was measured, the rows, and notes after it.
// Every scenario returns its results as Tables; Write renders them all the
// same way.
type Table struct {
	Title  string
	Intro  string
	Header []string
	Rows   [][]string
	Notes  []string
}

// Add appends a row; each cell is formatted with Cell.
func (t *Table) Add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = Cell(c)
	}
	t.Rows = append(t.Rows, row)
}

// Cell formats a value for a table: durations rounded to what a reader
// compares, floats with one decimal.
func Cell(v any) string {
	switch x := v.(type) {
	case time.Duration:
		return Dur(x)
	case float64:
		return fmt.Sprintf("%.1f", x)
	case string:
		return x
	}
	return fmt.Sprint(v)
}

// Dur formats d with three significant digits.
func Dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	}
	return fmt.Sprintf("%.0f µs", float64(d)/1e3)
}

// Pct formats a share of 1 as a percentage.
func Pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// Write renders the tables in Markdown.
func Write(w io.Writer, tables []Table) {
	for _, t := range tables {
		fmt.Fprintf(w, "### %s\n\n", t.Title)
		if t.Intro != "" {
			fmt.Fprintf(w, "%s\n\n", t.Intro)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(t.Header, " | "))
		seps := make([]string, len(t.Header))
		for i := range seps {
			seps[i] = "---"
		}
		fmt.Fprintf(w, "|%s|\n", strings.Join(seps, "|"))
		for _, r := range t.Rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
		}
		fmt.Fprintln(w)
		for _, n := range t.Notes {
			fmt.Fprintf(w, "%s\n\n", n)
		}
	}
}
