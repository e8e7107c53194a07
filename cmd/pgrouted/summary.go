package main

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pgrouted/pgrouted"
)

// Summary is what the demo found, printed at the end (as JSON with
// --json). Field names are stable: tests and scripts read them.
type Summary struct {
	// OK is true when the story ran to its end with no stale read and no
	// error, replicas served reads, and writes resumed on the new primary.
	OK bool `json:"ok"`
	// Completed is false when the demo was interrupted (Ctrl-C) or a step
	// of the story failed; Failure then says why.
	Completed bool   `json:"completed"`
	Failure   string `json:"failure,omitempty"`

	DurationMs      float64 `json:"durationMs"`
	Replicas        int     `json:"replicas"`
	PostgresVersion string  `json:"postgresVersion"`

	// Statements counts every statement pgrouted ran, from Stats, and
	// ByOp splits them by op (read, write, tx, lock).
	Statements uint64            `json:"statements"`
	ByOp       map[string]uint64 `json:"byOp"`
	// Endpoints are the statements per host and op, from Stats.
	Endpoints map[string]map[string]uint64 `json:"endpoints"`
	// Reads are the successful reads (autocommit and in read-only
	// transactions), ReplicaReads those a replica served, ReplicaShare
	// their share.
	Reads        uint64  `json:"reads"`
	ReplicaReads uint64  `json:"replicaReads"`
	ReplicaShare float64 `json:"replicaShare"`
	// Fallbacks are the reads that ran on the primary because no replica
	// could serve them, per reason; RouteErrors the statements that could
	// not run, per reason (from Stats).
	Fallbacks      map[string]uint64 `json:"fallbacks"`
	RouteErrors    map[string]uint64 `json:"routeErrors"`
	ReplicaRetries uint64            `json:"replicaRetries"`

	// Checks are the read-your-writes checks made; StaleReads those that
	// did not see the caller's acknowledged write. It must be 0.
	Checks     uint64 `json:"readYourWritesChecks"`
	StaleReads uint64 `json:"staleReads"`
	// Errors are the failed statements that no fault window explains
	// (see Interrupted); it must be 0. ErrorSamples are the first ones.
	Errors       uint64   `json:"errors"`
	ErrorSamples []string `json:"errorSamples,omitempty"`
	// Interrupted are the writes and transactions cut off by a fault the
	// demo injected: a server went away under them, so nothing could
	// replay them transparently; an application sees such errors in a real
	// failover too. Per window ("node2 killed", "failover").
	Interrupted        uint64            `json:"interrupted"`
	InterruptedWindows map[string]uint64 `json:"interruptedWindows,omitempty"`
	InterruptedSamples []string          `json:"interruptedSamples,omitempty"`

	// Failover is what happened to the writes around the failover; nil
	// when the story did not get that far.
	Failover *FailoverSummary `json:"failover,omitempty"`
	// Failovers counts the changes of primary the Connector saw (Stats).
	Failovers uint64 `json:"failovers"`

	Phases []PhaseSummary `json:"phases"`
	// Events are the lines the driver logged (one per topology event,
	// none per statement) and the story's steps.
	Events []Event `json:"events"`
	// LoggedLines counts the lines the driver logged through
	// Config.Logger.
	LoggedLines int `json:"loggedLines"`
}

// FailoverSummary is what the writes saw of the failover.
type FailoverSummary struct {
	From string `json:"from"`
	To   string `json:"to"`
	// UnavailableMs is the time from the last successful write on the old
	// primary to the first on the new one; -1 when there was none.
	UnavailableMs float64 `json:"unavailableMs"`
	// WritesOnNewPrimary are the successful writes on To after it was
	// promoted.
	WritesOnNewPrimary uint64 `json:"writesOnNewPrimary"`
}

// judge sets s.OK.
func (s *Summary) judge() {
	s.OK = s.Completed && s.StaleReads == 0 && s.Errors == 0 && s.ReplicaReads > 0 &&
		s.Failover != nil && s.Failover.WritesOnNewPrimary > 0
}

// failureInterrupted is Summary.Failure when Ctrl-C or SIGTERM stopped the
// story.
const failureInterrupted = "interrupted"

// stopped reports whether Ctrl-C or SIGTERM stopped the story before its
// end with no stale read and no error so far: the demo's normal end when
// it is not let run to the end (exit status 0).
func (s *Summary) stopped() bool {
	return !s.Completed && s.Failure == failureInterrupted && s.StaleReads == 0 && s.Errors == 0
}

// problems lists why s is not OK.
func (s *Summary) problems() []string {
	var p []string
	if !s.Completed {
		if s.Failure != "" {
			p = append(p, "the demo did not finish: "+s.Failure)
		} else {
			p = append(p, "the demo did not finish")
		}
	}
	if s.StaleReads > 0 {
		p = append(p, fmt.Sprintf("%d stale reads", s.StaleReads))
	}
	if s.Errors > 0 {
		p = append(p, fmt.Sprintf("%d errors", s.Errors))
	}
	if s.ReplicaReads == 0 {
		p = append(p, "no read ran on a replica")
	}
	if s.Completed && (s.Failover == nil || s.Failover.WritesOnNewPrimary == 0) {
		p = append(p, "no write ran on the new primary")
	}
	return p
}

// renderSummary is the summary for a person.
func renderSummary(s *Summary, color bool) string {
	var b strings.Builder
	title := fmt.Sprintf("pgrouted demo: %s with a primary and %d replica(s)", formatMs(s.DurationMs), s.Replicas)
	if s.PostgresVersion != "" {
		title += " (" + s.PostgresVersion + ")"
	}
	if color {
		title = paint(bold, title)
	}
	b.WriteString(title + "\n\n")
	row := func(k, v string) { fmt.Fprintf(&b, "  %-22s %s\n", k, v) }

	var ops []string
	for _, op := range []string{"read", "write", "tx", "lock"} {
		if n := s.ByOp[op]; n > 0 {
			ops = append(ops, fmt.Sprintf("%s %s", opLabel[op], formatCount(n)))
		}
	}
	row("statements", fmt.Sprintf("%s  (%s)", formatCount(s.Statements), strings.Join(ops, ", ")))
	share := fmt.Sprintf("%.1f%%  (%s of %s reads)", 100*s.ReplicaShare, formatCount(s.ReplicaReads), formatCount(s.Reads))
	if fb := formatReasons(s.Fallbacks); fb != "" {
		share += "; fell back to the primary: " + fb
	}
	row("reads on replicas", share)
	stale := fmt.Sprintf("%s stale reads in %s read-your-writes checks", formatCount(s.StaleReads), formatCount(s.Checks))
	if color {
		if s.StaleReads == 0 {
			stale = paint(green, stale)
		} else {
			stale = paint(red, stale)
		}
	}
	row("read-your-writes", stale)
	errs := formatCount(s.Errors)
	if color {
		if s.Errors == 0 {
			errs = paint(green, errs)
		} else {
			errs = paint(red, errs)
		}
	}
	row("errors", errs)
	for _, e := range s.ErrorSamples {
		row("", truncate(e, 160))
	}
	if s.Interrupted > 0 {
		var parts []string
		for _, k := range sortedNames(s.InterruptedWindows) {
			parts = append(parts, fmt.Sprintf("%s %d", k, s.InterruptedWindows[k]))
		}
		row("interrupted", fmt.Sprintf("%d writes/transactions cut off by the injected faults (%s): a server went away under them",
			s.Interrupted, strings.Join(parts, ", ")))
	}
	if s.ReplicaRetries > 0 {
		row("replica retries", fmt.Sprintf("%d reads ran elsewhere after their replica's connection failed", s.ReplicaRetries))
	}
	if f := s.Failover; f != nil {
		v := fmt.Sprintf("%s -> %s: ", f.From, f.To)
		if f.UnavailableMs >= 0 {
			v += fmt.Sprintf("writes unavailable for %s; ", formatMs(f.UnavailableMs))
		}
		v += fmt.Sprintf("%s writes on %s since", formatCount(f.WritesOnNewPrimary), f.To)
		row("failover", v)
	}
	if re := formatReasons(s.RouteErrors); re != "" {
		row("route errors", re)
	}
	row("topology log", fmt.Sprintf("%d lines from Config.Logger (one per topology event, none per statement)", s.LoggedLines))
	b.WriteString("\n")
	if s.OK {
		verdict := "OK: 0 stale reads, 0 errors; writes resumed on the new primary."
		if color {
			verdict = paint(green, verdict)
		}
		b.WriteString(verdict + "\n")
	} else if s.stopped() {
		verdict := "STOPPED before the end of the story (Ctrl-C): 0 stale reads, 0 errors so far."
		if color {
			verdict = paint(green, verdict)
		}
		b.WriteString(verdict + "\n")
	} else {
		verdict := "FAILED: " + strings.Join(s.problems(), "; ")
		if color {
			verdict = paint(red, verdict)
		}
		b.WriteString(verdict + "\n")
	}
	return b.String()
}

var opLabel = map[string]string{"read": "reads", "write": "writes", "tx": "transaction statements", "lock": "locks"}

// reasonCounts is m keyed by the reasons' text.
func reasonCounts(m map[pgrouted.Reason]uint64) map[string]uint64 {
	out := make(map[string]uint64, len(m))
	for r, n := range m {
		out[string(r)] = n
	}
	return out
}

// formatReasons prints counts per reason, largest first: "behind 12,
// unhealthy 3".
func formatReasons(m map[string]uint64) string {
	keys := sortedNames(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	var parts []string
	for _, k := range keys {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", k, formatCount(m[k])))
		}
	}
	return strings.Join(parts, ", ")
}

func sortedNames[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// PhaseSummary is a step of the story in the summary.
type PhaseSummary struct {
	Title string `json:"title"`
	// StartMs is when it started, in milliseconds since the workload
	// started; TookMs is how long its action took (stopping a server,
	// promoting one, ...).
	StartMs float64 `json:"startMs"`
	TookMs  float64 `json:"tookMs"`
}
