//go:build unix

package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pgrouted/pgrouted"
	"github.com/pgrouted/pgrouted/dsn"
)

func u64(v uint64) *uint64               { return &v }
func dur(v time.Duration) *time.Duration { return &v }

// sampleTopology is a primary, a replica over a 2s budget and a dead host.
func sampleTopology() pgrouted.Snapshot {
	return pgrouted.Snapshot{
		Primary: "node0", Epoch: 2, LeaseRemaining: 4200 * time.Millisecond, Taken: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Hosts: []pgrouted.HostInfo{
			{Name: "node0", Address: "127.0.0.1:5432", Role: "primary", Healthy: true, Circuit: "closed", RTT: 420 * time.Microsecond, Timeline: 2,
				Pool: pgrouted.PoolInfo{MaxConns: 8}},
			{Name: "node1", Address: "127.0.0.1:5433", Role: "standby", Healthy: true, Circuit: "closed", RTT: 12500 * time.Microsecond, Timeline: 2,
				ReplayLSN: "0/3000060", ByteLag: u64(3 * 1024 * 1024), LagBound: dur(3700 * time.Millisecond), SyncState: "async", InflightReads: 2,
				Pool: pgrouted.PoolInfo{TotalConns: 3, IdleConns: 1, AcquiredConns: 2, MaxConns: 8}},
			{Name: "node2", Address: "127.0.0.1:5434", Role: "standby", Circuit: "open", LastError: "dial tcp 127.0.0.1:5434: connect: connection refused"},
		},
	}
}

func TestTopologyTableRendering(t *testing.T) {
	got := renderTopology(sampleTopology(), 2*time.Second, false)
	want := `primary: node0 (epoch 2, lease 4.20s); pgrouted_max_lag 2s
HOST   ADDRESS         ROLE     CIRCUIT  TIMELINE  REPLAY LSN     LAG  LAG BOUND    RTT  SYNC   READS NOW  POOL
node0  127.0.0.1:5432  primary  closed          2  -                -          -  0.4ms  -              0  0/0/8
node1  127.0.0.1:5433  replica  closed          2  0/3000060   3.0 MB      3.70s   12ms  async          2  2/3/8
node2  127.0.0.1:5434  down     open            -  -                -          -      -  -              0  0/0/0
last probe errors:
node2: dial tcp 127.0.0.1:5434: connect: connection refused
`
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	colored := renderTopology(sampleTopology(), 2*time.Second, true)
	if !strings.Contains(colored, paint(yellow, "3.70s")) || !strings.Contains(colored, paint(red, "open")) {
		t.Fatalf("colors:\n%q", colored)
	}
	if plain := stripANSI(colored); plain != got {
		t.Fatalf("colors change the layout:\n%s\nvs\n%s", plain, got)
	}
}

// stripANSI removes color sequences.
func stripANSI(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == 0x1b {
			for i < len(s) && s[i] != 'm' {
				i++
			}
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func TestRoleCell(t *testing.T) {
	top := sampleTopology()
	for _, tc := range []struct {
		h    pgrouted.HostInfo
		want string
	}{
		{top.Hosts[0], "primary"},
		{top.Hosts[1], "replica"},
		{top.Hosts[2], "down"},
		{pgrouted.HostInfo{Name: "x", Role: "primary"}, "down (was primary)"},
		{pgrouted.HostInfo{Name: "x", Role: "primary", Healthy: true}, "primary (not trusted)"},
		{pgrouted.HostInfo{Name: "x", Role: "unknown"}, "probing"},
	} {
		if got := roleCell(tc.h, top).text; got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.h, got, tc.want)
		}
	}
}

func TestDemoFrameRendering(t *testing.T) {
	f := &frame{
		Elapsed: 15 * time.Second, Duration: 45 * time.Second,
		Phase: 2, Phases: 7, Title: "replay paused on node1", What: "node1 applies no WAL",
		Top: sampleTopology(),
		Stats: pgrouted.Stats{
			Statements: map[string]map[string]uint64{"node0": {"write": 1200, "tx": 300, "read": 50}, "node1": {"read": 4000}},
			Fallbacks:  map[pgrouted.Reason]uint64{"behind": 12, "unhealthy": 3},
		},
		Notes:  map[string]string{"node1": "replay paused"},
		MaxLag: 2 * time.Second,
		Reads:  4050, ReplicaReads: 4000, Checks: 900, Interrupted: 2,
		EventsTitle: "recent events",
		Events: []Event{
			{AtMs: 9100, Source: "demo", Message: "phase 2/7: replay paused on node1"},
			{AtMs: 9900, Source: "pgrouted", Level: "WARN", Message: "pgrouted: topology", Attrs: map[string]string{"event": "host-down", "host": "node2", "error": "conn closed", "epoch": "1"}},
		},
	}
	got := renderFrame(f, false)
	want := `pgrouted demo  [##########....................]  33%  15s / 45s
phase 2/7: replay paused on node1
  node1 applies no WAL

ENDPOINT  ROLE     CIRCUIT     LAG  LAG BOUND    RTT  READS  WRITES   TX  NOTE
node0     primary  closed        -          -  0.4ms     50   1,200  300
node1     replica  closed   3.0 MB      3.70s   12ms  4,000       0    0  replay paused; behind: over 2s, no reads
node2     down     open          -          -      -      0       0    0

statements 5,550 · reads on replicas 99% · read-your-writes checks 900 · stale reads 0 · errors 0 · interrupted by faults 2
reads that fell back to the primary: behind 12, unhealthy 3

recent events
    +9.1s demo     phase 2/7: replay paused on node1
    +9.9s pgrouted WARN  pgrouted: topology event=host-down host=node2 epoch=1 error="conn closed"
`
	if got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	if c := renderFrame(f, true); !strings.Contains(c, "█") || strings.Count(stripANSI(c), "\n") != strings.Count(got, "\n") {
		t.Fatalf("colored frame:\n%s", c)
	}
}

func sampleSummary() *Summary {
	s := &Summary{
		Completed: true, DurationMs: 45000, Replicas: 2, PostgresVersion: "PostgreSQL 16.4",
		Statements: 30000, ByOp: map[string]uint64{"read": 20000, "write": 7000, "tx": 3000},
		Endpoints: map[string]map[string]uint64{"node0": {"write": 7000}},
		Reads:     20000, ReplicaReads: 16000, ReplicaShare: 0.8,
		Fallbacks: map[string]uint64{"behind": 3500, "unhealthy": 500}, RouteErrors: map[string]uint64{},
		Checks: 9000, Interrupted: 4, InterruptedWindows: map[string]uint64{"failover": 4},
		Failover:  &FailoverSummary{From: "node0", To: "node1", UnavailableMs: 1234, WritesOnNewPrimary: 2500},
		Failovers: 1, Phases: []PhaseSummary{{Title: "normal routing"}},
		Events:      []Event{{AtMs: 1, Source: "pgrouted", Level: "INFO", Message: "pgrouted: topology", Attrs: map[string]string{"event": "host-up"}}},
		LoggedLines: 1,
	}
	s.judge()
	return s
}

func TestSummaryJSON(t *testing.T) {
	s := sampleSummary()
	if !s.OK {
		t.Fatalf("a clean run is not OK: %v", s.problems())
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"ok":true`, `"staleReads":0`, `"errors":0`, `"replicaShare":0.8`, `"readYourWritesChecks":9000`,
		`"failover":{"from":"node0","to":"node1","unavailableMs":1234,"writesOnNewPrimary":2500}`, `"interruptedWindows":{"failover":4}`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}
	var back Summary
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, s) {
		t.Fatalf("round trip:\n%+v\n%+v", back, *s)
	}

	for name, spoil := range map[string]func(*Summary){
		"stale":       func(s *Summary) { s.StaleReads = 1 },
		"errors":      func(s *Summary) { s.Errors = 2 },
		"no replica":  func(s *Summary) { s.ReplicaReads = 0 },
		"no failover": func(s *Summary) { s.Failover.WritesOnNewPrimary = 0 },
		"interrupted": func(s *Summary) { s.Completed = false; s.Failure = "interrupted" },
	} {
		s := sampleSummary()
		spoil(s)
		s.judge()
		if s.OK || len(s.problems()) == 0 {
			t.Errorf("%s: OK %v, problems %v", name, s.OK, s.problems())
		}
	}
}

func TestSummaryText(t *testing.T) {
	got := renderSummary(sampleSummary(), false)
	for _, want := range []string{
		"pgrouted demo: 45.00s with a primary and 2 replica(s) (PostgreSQL 16.4)",
		"statements             30,000  (reads 20,000, writes 7,000, transaction statements 3,000)",
		"reads on replicas      80.0%  (16,000 of 20,000 reads); fell back to the primary: behind 3,500, unhealthy 500",
		"read-your-writes       0 stale reads in 9,000 read-your-writes checks",
		"errors                 0\n",
		"interrupted            4 writes/transactions cut off by the injected faults (failover 4)",
		"failover               node0 -> node1: writes unavailable for 1.23s; 2,500 writes on node1 since",
		"OK: 0 stale reads, 0 errors",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	s := sampleSummary()
	s.StaleReads, s.Errors, s.ErrorSamples = 3, 1, []string{"read: boom"}
	s.judge()
	got = renderSummary(s, false)
	if !strings.Contains(got, "FAILED: 3 stale reads; 1 errors") || !strings.Contains(got, "read: boom") {
		t.Errorf("failed summary:\n%s", got)
	}
	// Ctrl-C: a normal end, unless it found stale reads or errors so far.
	s = sampleSummary()
	s.Completed, s.Failure = false, failureInterrupted
	s.judge()
	if got := renderSummary(s, false); !strings.Contains(got, "STOPPED before the end of the story (Ctrl-C): 0 stale reads, 0 errors so far.") || strings.Contains(got, "FAILED") {
		t.Errorf("summary stopped by Ctrl-C:\n%s", got)
	}
	s.Errors = 1
	s.judge()
	if got := renderSummary(s, false); !strings.Contains(got, "FAILED: the demo did not finish: interrupted; 1 errors") {
		t.Errorf("summary stopped by Ctrl-C after an error:\n%s", got)
	}
}

func TestSecretsAndRedactor(t *testing.T) {
	for _, tc := range []struct {
		dsn  string
		want []string
	}{
		{"postgres://app:s3cret@db1,db2/app", []string{"s3cret"}},
		{"postgres://app:p%40ss%2Fw@db1/app", []string{"p%40ss%2Fw", "p@ss/w"}},
		{"host=db1 password=kv-secret dbname=x", []string{"kv-secret"}},
		{"host=db1 password = 'quoted secret' dbname=x", []string{"'quoted secret'"}},
		{"postgres://app@db1/app", nil},
		{"postgres://app:ab@db1/app", nil}, // too short to mask
	} {
		got := secretsOf(tc.dsn, nil)
		for _, w := range tc.want {
			found := false
			for _, g := range got {
				found = found || g == w || (strings.HasPrefix(w, "'") && g == strings.Trim(w, "'"))
			}
			if !found {
				t.Errorf("%q: secrets %q lack %q", tc.dsn, got, w)
			}
		}
		if tc.want == nil && len(got) != 0 {
			t.Errorf("%q: secrets %q", tc.dsn, got)
		}
	}
	cfg, err := pgrouted.ParseConfig("postgres://app:from-config@db1/app")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r := &redactor{w: &b, secrets: secretsOf("host=db1", cfg)}
	r.Write([]byte("error: password from-config was refused\n"))
	if strings.Contains(b.String(), "from-config") || !strings.Contains(b.String(), "xxxxx") {
		t.Fatalf("redacted: %q", b.String())
	}
}

func TestFormatters(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{formatBytes(40), "40 B"},
		{formatBytes(1536), "1.5 KB"},
		{formatBytes(16 << 20), "16.0 MB"},
		{formatBytes(3 << 30), "3.0 GB"},
		{formatMs(0.42), "0.4ms"},
		{formatMs(12.5), "12ms"},
		{formatMs(1234), "1.23s"},
		{formatMs(185000), "3m5s"},
		{formatCount(0), "0"},
		{formatCount(999), "999"},
		{formatCount(1000), "1,000"},
		{formatCount(1234567), "1,234,567"},
		{truncate("abcdef", 4), "abc…"},
		{truncate("abc", 4), "abc"},
		{progressBar(0.5, 10, false), "[#####.....]"},
		{progressBar(2, 4, false), "[####]"},
		{redraw(0), ""},
		{redraw(3), "\x1b[3A\r\x1b[J"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestProviderLineRendering(t *testing.T) {
	top := sampleTopology()
	if got := providerLine(top); got != "" {
		t.Fatalf("a provider line without a provider: %q", got)
	}
	top.Provider = &pgrouted.ProviderInfo{Name: "patroni", Endpoint: "http://patroni:xxxxx@pg-a:8008", Leader: "node0", LeaderTimeline: 2, LeaseRemaining: 9100 * time.Millisecond}
	top.Hosts[2].NoReads = true
	got := renderTopology(top, 0, false)
	want := "primary: node0 (epoch 2, lease 4.20s)\nprovider: patroni via http://patroni:xxxxx@pg-a:8008 (leader node0, timeline 2, lease 9.10s); no reads on node2\nHOST"
	if !strings.HasPrefix(got, want) {
		t.Fatalf("got:\n%s\nwant it to begin with:\n%s", got, want)
	}
	top.Provider = &pgrouted.ProviderInfo{Name: "patroni", Conflict: true, LastError: "patroni: no endpoint answered:\nhttp://pg-a:8008: HTTP 503"}
	if got, want := providerLine(top), "provider: patroni (two running leaders: no primary, lease expired); no reads on node2; last error: patroni: no endpoint answered: http://pg-a:8008: HTTP 503"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// TestTopologyOddNames: names and texts that could break or reorder a
// terminal line (an escape sequence, a direction override, a line break,
// a byte that is not UTF-8) are printed through dsn.Printable: as escapes.
func TestTopologyOddNames(t *testing.T) {
	top := sampleTopology()
	top.Hosts[0].Name = "ev\x1b[2Jil"
	top.Primary = top.Hosts[0].Name
	top.Hosts[1].Address = "10.0.0.2\u202e:5432"
	top.Hosts[2].LastError = "refused\xff by \x1b[31mserver"
	top.Hosts[2].NoReads = true
	top.Hosts[2].Name = "no\u2028reads"
	top.Provider = &pgrouted.ProviderInfo{Name: "patroni", Leader: "ev\x1b[2Jil", LastError: "bad\x07", BadMember: "member 3 of the view (10.0.0.9:5432): its name: byte 2 is U+001B, a control character"}
	got := renderTopology(top, 2*time.Second, false)
	for _, want := range []string{`ev\u001b[2Jil`, `10.0.0.2\u202e:5432`, `refused\xff by \u001b[31mserver`, `no\u2028reads`, `leader ev\u001b[2Jil`, `last error: bad\u0007`, "refused from its answer: member 3"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if dsn.Printable(got) != strings.ReplaceAll(got, "\n", `\u000a`) {
		t.Errorf("output holds a raw control or format character:\n%q", got)
	}
}
