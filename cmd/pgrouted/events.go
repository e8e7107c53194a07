package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"
)

// Event is one line of the demo's "recent events": a line the driver
// logged through Config.Logger (source "pgrouted"), a step of the story
// ("demo") or of the test cluster ("cluster").
type Event struct {
	// AtMs is when it happened, in milliseconds since the workload started
	// (negative: before it).
	AtMs float64 `json:"atMs"`
	// Source is "pgrouted", "demo" or "cluster".
	Source string `json:"source"`
	// Level is the slog level of a driver line (INFO, WARN, ...).
	Level   string `json:"level,omitempty"`
	Message string `json:"message"`
	// Attrs are a driver line's attributes (event, host, epoch, ...).
	Attrs map[string]string `json:"attrs,omitempty"`

	at time.Time
}

// String is the event on one line: "+12.3s pgrouted WARN pgrouted:
// circuit open host=node2 source=probe".
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%+6.1fs %-8s", e.AtMs/1000, e.Source)
	if e.Level != "" {
		fmt.Fprintf(&b, " %-5s", e.Level)
	}
	b.WriteString(" " + e.Message)
	keys := make([]string, 0, len(e.Attrs))
	for k := range e.Attrs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return attrOrder(keys[i]) < attrOrder(keys[j]) || attrOrder(keys[i]) == attrOrder(keys[j]) && keys[i] < keys[j]
	})
	for _, k := range keys {
		v := e.Attrs[k]
		if strings.ContainsAny(v, " =\"") {
			v = fmt.Sprintf("%q", v)
		}
		fmt.Fprintf(&b, " %s=%s", k, v)
	}
	return b.String()
}

// attrOrder puts the telling attributes first.
func attrOrder(k string) int {
	switch k {
	case "event":
		return 0
	case "host":
		return 1
	case "previous":
		return 2
	case "epoch":
		return 3
	}
	return 4
}

// maxEvents bounds the events kept: the driver logs topology events, not
// statements, so a demo sees a few dozen; more are counted, not kept.
const maxEvents = 1000

// eventLog collects the demo's events. It is safe for concurrent use.
type eventLog struct {
	mu      sync.Mutex
	start   time.Time // the workload's start; zero until it starts
	created time.Time
	events  []Event
	dropped int
	tee     io.Writer // when set, every event is also written there, one line each
}

func newEventLog(tee io.Writer) *eventLog {
	return &eventLog{created: time.Now(), tee: tee}
}

// started sets the time events are measured from.
func (l *eventLog) started(t time.Time) {
	l.mu.Lock()
	l.start = t
	l.mu.Unlock()
}

// setTee sets (or, with nil, stops) the writer every new event is also
// written to.
func (l *eventLog) setTee(w io.Writer) {
	l.mu.Lock()
	l.tee = w
	l.mu.Unlock()
}

func (l *eventLog) add(e Event, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e.at = at
	if len(l.events) >= maxEvents {
		l.dropped++
	} else {
		l.events = append(l.events, e)
	}
	if l.tee != nil {
		fmt.Fprintln(l.tee, l.stamp(e).String())
	}
}

// stamp sets e.AtMs from the workload's start (before it starts: from the
// log's creation). l.mu is held.
func (l *eventLog) stamp(e Event) Event {
	origin := l.start
	if origin.IsZero() {
		origin = l.created
	}
	e.AtMs = float64(e.at.Sub(origin)) / float64(time.Millisecond)
	return e
}

func (l *eventLog) stamped(events []Event) []Event {
	out := make([]Event, len(events))
	for i, e := range events {
		out[i] = l.stamp(e)
	}
	return out
}

// note records a step of the story or of the cluster.
func (l *eventLog) note(source, format string, a ...any) {
	l.add(Event{Source: source, Message: fmt.Sprintf(format, a...)}, time.Now())
}

// all returns a copy of the events.
func (l *eventLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stamped(l.events)
}

// last returns the n most recent events.
func (l *eventLog) last(n int) []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := max(0, len(l.events)-n)
	return l.stamped(l.events[i:])
}

// since returns the events from index i on, and the next index.
func (l *eventLog) since(i int) ([]Event, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i = min(i, len(l.events))
	return l.stamped(l.events[i:]), len(l.events)
}

// logger returns a *slog.Logger whose lines become events of source
// "pgrouted", for Config.Logger.
func (l *eventLog) logger() *slog.Logger {
	return slog.New(&eventHandler{log: l})
}

// eventHandler is a slog.Handler feeding an eventLog.
type eventHandler struct {
	log    *eventLog
	attrs  []slog.Attr
	prefix string // group prefix, "g." for WithGroup("g")
}

// Enabled implements slog.Handler: Info and above.
func (h *eventHandler) Enabled(_ context.Context, level slog.Level) bool {
	return level >= slog.LevelInfo
}

// Handle implements slog.Handler.
func (h *eventHandler) Handle(_ context.Context, r slog.Record) error {
	e := Event{Source: "pgrouted", Level: r.Level.String(), Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		addAttr(e.Attrs, "", a)
	}
	r.Attrs(func(a slog.Attr) bool {
		addAttr(e.Attrs, h.prefix, a)
		return true
	})
	if len(e.Attrs) == 0 {
		e.Attrs = nil
	}
	at := r.Time
	if at.IsZero() {
		at = time.Now()
	}
	h.log.add(e, at)
	return nil
}

func addAttr(m map[string]string, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		for _, g := range v.Group() {
			addAttr(m, prefix+a.Key+".", g)
		}
		return
	}
	if a.Key == "" {
		return
	}
	m[prefix+a.Key] = v.String()
}

// WithAttrs implements slog.Handler.
func (h *eventHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(append([]slog.Attr(nil), h.attrs...), prefixed(h.prefix, attrs)...)
	return &c
}

func prefixed(prefix string, attrs []slog.Attr) []slog.Attr {
	if prefix == "" {
		return attrs
	}
	out := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		out[i] = slog.Attr{Key: prefix + a.Key, Value: a.Value}
	}
	return out
}

// WithGroup implements slog.Handler.
func (h *eventHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	c := *h
	c.prefix = h.prefix + name + "."
	return &c
}
