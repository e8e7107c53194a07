package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"
)

// ANSI colors, used only when the output is a terminal and colors are on.
const (
	red    = "31"
	green  = "32"
	yellow = "33"
	dim    = "2"
	bold   = "1"
)

// cell is one table cell: its text and, optionally, an ANSI color.
type cell struct {
	text  string
	color string
}

// table is rows of cells under a header; render aligns the columns.
type table struct {
	header []string
	rows   [][]cell
	right  map[int]bool // right-aligned columns (numbers)
}

// render writes the table with two spaces between columns; colors are
// applied when color is true (after padding, so alignment holds).
func (t *table) render(color bool) string {
	width := make([]int, len(t.header))
	for i, h := range t.header {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			if i < len(width) {
				width[i] = max(width[i], utf8.RuneCountInString(c.text))
			}
		}
	}
	var b strings.Builder
	line := func(cells []cell) {
		var sb strings.Builder
		for i, c := range cells {
			if i >= len(width) {
				break
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c.text))
			text := c.text
			if color && c.color != "" {
				text = paint(c.color, text)
			}
			if t.right[i] {
				text = pad + text
			} else if i < len(cells)-1 {
				text += pad
			}
			if i > 0 {
				sb.WriteString("  ")
			}
			sb.WriteString(text)
		}
		b.WriteString(strings.TrimRight(sb.String(), " "))
		b.WriteByte('\n')
	}
	hdr := make([]cell, len(t.header))
	for i, h := range t.header {
		hdr[i] = cell{text: h, color: bold}
	}
	line(hdr)
	for _, r := range t.rows {
		line(r)
	}
	return b.String()
}

func paint(color, s string) string {
	if color == "" || s == "" {
		return s
	}
	return "\x1b[" + color + "m" + s + "\x1b[0m"
}

// isTerminal reports whether w is a terminal on which ANSI cursor control
// and colors make sense (not when NO_COLOR is set or TERM is dumb).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	if os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		return false
	}
	return true
}

// formatBytes prints a byte count in B, KB, MB or GB (1024-based, as the
// DSN's sizes).
func formatBytes(n uint64) string {
	switch {
	case n < 1024:
		return fmt.Sprintf("%d B", n)
	case n < 1024*1024:
		return fmt.Sprintf("%.1f KB", float64(n)/1024)
	case n < 1024*1024*1024:
		return fmt.Sprintf("%.1f MB", float64(n)/(1024*1024))
	}
	return fmt.Sprintf("%.1f GB", float64(n)/(1024*1024*1024))
}

// formatMs prints a duration given in milliseconds: 0.4ms, 12ms, 1.25s,
// 3m5s.
// formatDuration is formatMs for a duration.
func formatDuration(d time.Duration) string {
	return formatMs(float64(d) / float64(time.Millisecond))
}

func formatMs(ms float64) string {
	switch {
	case ms < 10:
		return fmt.Sprintf("%.1fms", ms)
	case ms < 1000:
		return fmt.Sprintf("%.0fms", ms)
	case ms < 60_000:
		return fmt.Sprintf("%.2fs", ms/1000)
	}
	return (time.Duration(ms) * time.Millisecond).Round(time.Second).String()
}

// formatCount prints n with thousands separators: 12,345.
func formatCount(n uint64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// truncate shortens s to n runes, with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
