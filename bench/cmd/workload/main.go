// Command workload runs the workload benchmarks of package workload on a
// local testcluster (1 primary, 2 replicas) and writes RESULTS.md: the
// machine, the versions, the Go benchmarks' benchstat output (from a file
// run.sh made), one table per workload, and the project's targets with what
// was measured.
//
//	go run ./cmd/workload -out RESULTS.md -benchstat benchstat.txt -raw bench.txt
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pgrouted/pgrouted/bench/workload"
	"github.com/pgrouted/pgrouted/testcluster"
)

func main() {
	out := flag.String("out", "RESULTS.md", "file to write")
	statFile := flag.String("benchstat", "", "benchstat output of the Go benchmarks")
	rawFile := flag.String("raw", "", "the Go benchmarks' filtered output (for the targets)")
	runRe := flag.String("run", ".", "regexp of the scenarios to run")
	dur := flag.Duration("duration", 5*time.Second, "length of each steady workload run")
	command := flag.String("command", "make bench", "the command to quote in the results")
	note := flag.String("note", "", "a note on the conditions of the run")
	since := flag.Int64("since", 0, "when the whole run began (Unix seconds), to report its length")
	flag.Parse()
	began := time.Now()
	if *since > 0 {
		began = time.Unix(*since, 0)
	}
	if err := run(*out, *statFile, *rawFile, *runRe, *dur, *command, *note, began); err != nil {
		fmt.Fprintln(os.Stderr, "workload:", err)
		os.Exit(1)
	}
}

func run(out, statFile, rawFile, runRe string, dur time.Duration, command, note string, began time.Time) error {
	re, err := regexp.Compile(runRe)
	if err != nil {
		return err
	}
	logf := func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	ctx := context.Background()
	started := time.Now()
	c, err := testcluster.Start(ctx, testcluster.Options{Replicas: 2, Conf: []string{"max_connections = 400"}, Logf: logf})
	if err != nil {
		return err
	}
	defer c.Close()
	env := &workload.Env{Cluster: c, Duration: dur, Logf: logf, Facts: map[string]float64{}}
	var tables []workload.Table
	for _, s := range workload.Scenarios {
		if !re.MatchString(s.Name) {
			continue
		}
		ts, err := s.Run(ctx, env)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		tables = append(tables, ts...)
	}

	var b bytes.Buffer
	fmt.Fprintf(&b, "# pgrouted benchmarks\n\n")
	fmt.Fprintf(&b, "Written by `%s` (bench/run.sh: the Go benchmarks with `go test -bench`, compared with benchstat, then `go run ./cmd/workload`); do not edit by hand, except the *Analysis* section at the end.\n\n", command)
	fmt.Fprintf(&b, "| | |\n|---|---|\n")
	fmt.Fprintf(&b, "| date | %s |\n", started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "| machine | %s, %d CPUs (GOMAXPROCS %d), %s |\n", cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), memTotal())
	fmt.Fprintf(&b, "| OS | %s/%s, %s |\n", runtime.GOOS, runtime.GOARCH, kernel())
	fmt.Fprintf(&b, "| Go | %s |\n", runtime.Version())
	fmt.Fprintf(&b, "| PostgreSQL | %s (testcluster: 1 primary, 2 asynchronous streaming replicas on loopback, each behind a TCP fault point) |\n", c.Version())
	fmt.Fprintf(&b, "| load average before the workloads | %s |\n", loadAvg())
	fmt.Fprintf(&b, "| length of the run | %s (Go benchmarks and workloads, cluster starts included) |\n", time.Since(began).Round(time.Second))
	if note != "" {
		fmt.Fprintf(&b, "| conditions | %s |\n", note)
	}
	fmt.Fprintln(&b)

	raw := map[string][]benchLine{}
	if rawFile != "" {
		if raw, err = readRaw(rawFile); err != nil {
			return err
		}
	}
	writeTargets(&b, env.Facts, raw)

	if statFile != "" {
		stat, err := os.ReadFile(statFile)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "## Go benchmarks: overhead and the routing decision\n\n")
		fmt.Fprintf(&b, "bench/overhead_test.go: a one-row `SELECT` by primary key and a one-row `INSERT`, serial and with 32 goroutines, through "+
			"pgx's database/sql driver straight to the primary (`pgx`) and, for the SELECT, straight to a replica (`pgx-replica`, the baseline of a read on a replica), "+
			"pgrouted on the cluster with reads on the replicas (`pgrouted`), "+
			"and pgrouted with every statement routed to the primary (`pgrouted-primary`, the same server as `pgx`); and pgrouted's routing "+
			"decision alone (`Connector.Explain`: classification of the text and choice of the endpoint). benchstat, the columns by driver, "+
			"the percentages against `pgx`:\n\n```\n%s```\n\n", stat)
	}
	fmt.Fprintf(&b, "## Workloads\n\n")
	workload.Write(&b, tables)
	if prev, err := os.ReadFile(out); err == nil {
		if i := bytes.Index(prev, []byte(analysisHeading)); i >= 0 {
			b.Write(prev[i:])
		}
	}
	return os.WriteFile(out, b.Bytes(), 0o644)
}

// analysisHeading starts the hand-written section that a new run keeps.
const analysisHeading = "## Analysis"

type benchLine struct {
	nsPerOp, allocs float64
}

// readRaw reads `go test -bench` output: per benchmark name (without the
// -N suffix), its runs.
func readRaw(path string) (map[string][]benchLine, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := map[string][]benchLine{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 4 || !strings.HasPrefix(fs[0], "Benchmark") {
			continue
		}
		name := fs[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		var l benchLine
		for i := 2; i+1 < len(fs); i += 2 {
			v, _ := strconv.ParseFloat(fs[i], 64)
			switch fs[i+1] {
			case "ns/op":
				l.nsPerOp = v
			case "allocs/op":
				l.allocs = v
			}
		}
		m[name] = append(m[name], l)
	}
	return m, sc.Err()
}

func median(ls []benchLine, f func(benchLine) float64) float64 {
	if len(ls) == 0 {
		return 0
	}
	vs := make([]float64, len(ls))
	for i, l := range ls {
		vs[i] = f(l)
	}
	sort.Float64s(vs)
	return vs[len(vs)/2]
}

func writeTargets(b *bytes.Buffer, facts map[string]float64, raw map[string][]benchLine) {
	fmt.Fprintf(b, "## Targets\n\nThe project's performance targets, with what this run measured (computed from the tables below; medians for the Go benchmarks).\n\n")
	fmt.Fprintf(b, "| target | measured | |\n|---|---|---|\n")
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	ns := func(name string) float64 { return median(raw[name], func(l benchLine) float64 { return l.nsPerOp }) }
	if pgx, forced := ns("BenchmarkSelect/mode=serial/driver=pgx"), ns("BenchmarkSelect/mode=serial/driver=pgrouted-primary"); pgx > 0 && forced > 0 {
		d := forced/pgx - 1
		fmt.Fprintf(b, "| pgrouted forced to the primary ≤ 3%% slower than pgx's driver, serial SELECT (Go benchmark, medians of the rounds' means) | %+.1f%% (%.0f µs vs %.0f µs) | %s |\n", 100*d, forced/1e3, pgx/1e3, verdict(d <= 0.03))
	}
	// The interleaved wall times: the median over the sets of
	// connections of a stack's p50 over its baseline's (Overhead).
	if d, text, ok := wallRatio(facts, "overhead/pgrouted, forced to the primary"); ok {
		fmt.Fprintf(b, "| … the same, the interleaved statements (workload *Overhead, interleaved*: median of the sets' p50 ratios) | %s | %s |\n", text, verdict(d <= 0.03))
	}
	if d, text, ok := wallRatio(facts, "overhead/pgrouted.Pool, forced to the primary"); ok {
		fmt.Fprintf(b, "| pgrouted.Pool forced to the primary ≤ 3%% slower than pgxpool, serial SELECT (workload *Overhead, interleaved*: median of the sets' p50 ratios) | %s | %s |\n", text, verdict(d <= 0.03))
	}
	if l := raw["BenchmarkDecision/stmt=read/driver=pgrouted"]; len(l) > 0 {
		n := ns("BenchmarkDecision/stmt=read/driver=pgrouted")
		a := median(l, func(l benchLine) float64 { return l.allocs })
		fmt.Fprintf(b, "| routing decision < 200 ns and 0 allocs (a read) | %.0f ns, %.0f allocs | %s |\n", n, a, verdict(n < 200 && a == 0))
	}
	if l := raw["BenchmarkDecision/stmt=read-user-objects/driver=pgrouted"]; len(l) > 0 {
		n := ns("BenchmarkDecision/stmt=read-user-objects/driver=pgrouted")
		a := median(l, func(l benchLine) float64 { return l.allocs })
		fmt.Fprintf(b, "| routing decision < 400 ns and 0 allocs (a read naming user objects whose code is resolved from the catalog cache: a view, a function, an operator, a cast to a domain with a CHECK) | %.0f ns, %.0f allocs | %s |\n", n, a, verdict(n < 400 && a == 0))
	}
	if l := raw["BenchmarkDecision/stmt=write/driver=pgrouted"]; len(l) > 0 {
		n := ns("BenchmarkDecision/stmt=write/driver=pgrouted")
		fmt.Fprintf(b, "| routing decision < 200 ns (a write) | %.0f ns | %s |\n", n, verdict(n < 200))
	}
	writeCostTargets(b, facts, raw, verdict)
	stale, runs := sumFacts(facts, "ryw/pgrouted", "/stale", "eventual")
	if runs > 0 {
		fmt.Fprintf(b, "| 0 stale reads for pgrouted (read-your-writes modes) in every run | %.0f stale reads in %d runs | %s |\n", stale, runs, verdict(stale == 0))
	}
	for _, sys := range []string{"pgrouted session", "pgrouted session + replica_wait=10ms"} {
		for _, d := range []time.Duration{0, time.Millisecond} {
			v, ok := facts[fmt.Sprintf("ryw/%s/%v/share", sys, d)]
			switch {
			case !ok:
			case d > 0 && sys == "pgrouted session":
				// Without a wait (the DSN's default, pgrouted_replica_wait=0),
				// a read-back sent right after its write reaches a replica
				// before the replica has replayed it, whenever replay takes
				// longer than the round trip: it runs on the primary. The
				// share the replicas can take there is the wait's to buy
				// (the row with replica_wait).
				fmt.Fprintf(b, "| (information, not a target) at %v replication delay, the share of all reads on replicas without a replica wait (%s, the DSN's default: a read-back reaches a replica before its write's replay and runs on the primary; the 90%% target is the replica wait's, next rows) | %.1f%% | — |\n", d, sys, 100*v)
			default:
				fmt.Fprintf(b, "| at %v replication delay replicas serve ≥ 90%% of all reads (%s) | %.1f%% | %s |\n", d, sys, 100*v, verdict(v >= 0.9))
			}
		}
	}
	if v, ok := facts["ryw/pgrouted session + replica_wait=10ms/5ms/share"]; ok {
		p99 := facts["ryw/pgrouted session + replica_wait=10ms/5ms/p99_ms"]
		rtt := facts["rtt_ms"]
		fmt.Fprintf(b, "| replica_wait=10ms at 5 ms delay: replicas serve ≥ 90%% of reads | %.1f%% | %s |\n", 100*v, verdict(v >= 0.9))
		fmt.Fprintf(b, "| … and p99 read latency < the wait + one round trip (%.2f ms) | %.2f ms | %s |\n", 10+rtt, p99, verdict(p99 < 10+rtt))
	}
	if gMiss, gRuns := sumFacts(facts, "global/pgrouted global", "/misses", ""); gRuns > 0 {
		fmt.Fprintf(b, "| global consistency: 0 reads miss a row another process committed before they began, in every run | %.0f misses in %d runs | %s |\n", gMiss, gRuns, verdict(gMiss == 0))
	}
	for _, d := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond} {
		if v, ok := facts[fmt.Sprintf("global/pgrouted global + replica_wait=10ms/%v/fetches_per_read", d)]; ok {
			fmt.Fprintf(b, "| 32 concurrent global readers: position fetches ≤ 1/5 of the reads (%v delay) | %.3f per read | %s |\n", d, v, verdict(v <= 0.2))
		}
	}
	writeServiceTargets(b, facts, verdict)
	writeStormTargets(b, facts, verdict)
	for _, how := range []string{"stopped", "frozen"} {
		for _, iv := range []time.Duration{250 * time.Millisecond, time.Second} {
			if v, ok := facts[fmt.Sprintf("failover/%s/%v/unavail_ms", how, iv)]; ok {
				limit := float64(iv+time.Second) / 1e6
				fmt.Fprintf(b, "| failover write unavailability ≤ probe interval + 1 s (primary %s, %v) | %.0f ms | %s |\n", how, iv, v, verdict(v <= limit))
			}
		}
	}
	fmt.Fprintln(b)
}

// sumFacts sums the facts whose names begin with prefix and end with
// suffix (and do not contain except, when it is not empty), and counts
// them.
func sumFacts(facts map[string]float64, prefix, suffix, except string) (sum float64, n int) {
	for k, v := range facts {
		if strings.HasPrefix(k, prefix) && strings.HasSuffix(k, suffix) && (except == "" || !strings.Contains(k, except)) {
			sum += v
			n++
		}
	}
	return sum, n
}

// writeServiceTargets writes the targets of the service workload (issue
// 41): the mixed-tables service with the DSN's defaults, global reads with
// a replica paused, and no stale read in any of its rows.
func writeServiceTargets(b *bytes.Buffer, facts map[string]float64, verdict func(bool) string) {
	const k = "service/mixed/"
	if v, ok := facts[k+"share"]; ok {
		stale, errs := facts[k+"stale"], facts[k+"errors"]
		fmt.Fprintf(b, "| mixed-tables service, the DSN's defaults, replicas 15 and 40 ms behind: ≥ 75%% of reads on replicas, 0 stale, 0 errors | %.1f%%, %.0f stale, %.0f errors | %s |\n",
			100*v, stale, errs, verdict(v >= 0.75 && stale == 0 && errs == 0))
	}
	const g = "service/global-paused/"
	if v, ok := facts[g+"share"]; ok {
		stale := facts[g+"stale"]
		fmt.Fprintf(b, "| global (`replica_wait=100ms`), replicas 15 and 40 ms behind, one's replay paused 1.5 s in 8 s: ≥ 90%% of reads on replicas, 0 stale | %.1f%%, %.0f stale | %s |\n",
			100*v, stale, verdict(v >= 0.9 && stale == 0))
	}
	if stale, rows := sumFacts(facts, "service/", "/stale", ""); rows > 0 {
		fmt.Fprintf(b, "| service workload: 0 stale reads in every row | %.0f stale reads in %d rows | %s |\n", stale, rows, verdict(stale == 0))
	}
}

// writeStormTargets writes the targets of the lag storm (issue 52), with
// pgrouted_primary_read_limit.
func writeStormTargets(b *bytes.Buffer, facts map[string]float64, verdict func(bool) string) {
	const k = "storm/pgrouted_primary_read_limit=2/"
	r, ok := facts[k+"write_p99_ratio"]
	if !ok {
		return
	}
	fmt.Fprintf(b, "| lag storm (both replicas paused 5 s, 8 writers, 16 readers) with `pgrouted_primary_read_limit=2`: write p99 during ≤ 1.5× before | %.2f× | %s |\n", r, verdict(r <= 1.5))
	stale := facts[k+"stale"] + facts["storm/no limit (default)/stale"]
	fmt.Fprintf(b, "| lag storm: 0 reads served stale (both rows) | %.0f | %s |\n", stale, verdict(stale == 0))
	back := facts[k+"back_ms"]
	fmt.Fprintf(b, "| lag storm: ≥ 90%% of reads back on replicas ≤ 1 s after replay resumed (with the limit) | %s | %s |\n", backText(back), verdict(back >= 0 && back <= 1000))
	ch := facts[k+"changes_max"]
	fmt.Fprintf(b, "| lag storm: budget state changes per replica ≤ 2 (with the limit) | %.0f | %s |\n", ch, verdict(ch <= 2))
}

// backText is a time to return to the replicas in ms, negative for never.
func backText(ms float64) string {
	if ms < 0 {
		return "never"
	}
	return fmt.Sprintf("≤ %.0f ms", ms)
}

// writeCostTargets writes the targets of what pgrouted costs the servers
// and the client (CPU per statement, allocations, heap, wall time), each
// with the figures it compares.
func writeCostTargets(b *bytes.Buffer, facts map[string]float64, raw map[string][]benchLine, verdict func(bool) string) {
	// The ratios are the workload's paired ones (the median of the rounds'
	// ratios, with their interquartile range), not a ratio of the medians.
	// measured is the figure of a paired ratio: stack's over base's in
	// the workload's work what, on column col.
	measured := func(what, stack, base, col string) (string, float64, bool) {
		key := "servercost/" + what + "/" + stack + "/"
		r, okr := facts[key+"ratio"]
		v, okv := facts[key+col+"_us"]
		w, okw := facts["servercost/"+what+"/"+base+"/"+col+"_us"]
		if !okr || !okv || !okw {
			return "", 0, false
		}
		return fmt.Sprintf("%.2f× (IQR %.2f–%.2f; medians %.1f µs vs %.1f µs)", r, facts[key+"ratio_lo"], facts[key+"ratio_hi"], v, w), r, true
	}
	ratio := func(target, what, stack, base, col string, limit float64) {
		if m, r, ok := measured(what, stack, base, col); ok {
			fmt.Fprintf(b, "| %s ≤ %.2f× %s's (workload *Server cost*, %s) | %s | %s |\n", target, limit, base, stack, m, verdict(r <= limit))
		}
	}
	for _, s := range [][2]string{{"pgrouted", "pgx"}, {"pgrouted.Pool", "pgxpool"}} {
		ratio("primary CPU per autocommit INSERT", "insert", s[0], s[1], "primary", 1.15)
		ratio("primary CPU per INSERT … RETURNING", "returning", s[0], s[1], "primary", 1.10)
		ratio("primary CPU per 3-write transaction", "tx3", s[0], s[1], "primary", 1.10)
	}
	// The replica read, like for like: pgrouted opened on the primary and
	// one replica against pgx straight to that replica. Round-robin over
	// two replicas is compared with pgx alternating over the same two, for
	// information: spreading reads costs pgx too, and the target is about
	// what pgrouted adds.
	for _, s := range [][3]string{{"pgrouted", "pgx", "pgx's database/sql driver"}, {"pgrouted.Pool", "pgxpool", "pgxpool"}} {
		if m, r, ok := measured("read", s[0]+", 1 replica", s[1]+" → replica", "cluster"); ok {
			fmt.Fprintf(b, "| server CPU per replica read, no recent write ≤ 1.10× pgx's straight to a replica: %s opened on the primary and one replica, "+
				"against %s straight to that replica (workload *Server cost*, whole cluster's CPU) | %s | %s |\n", s[0], s[2], m, verdict(r <= 1.10))
		}
	}
	for _, s := range [][3]string{{"pgrouted", "pgx", "pgx's database/sql driver"}, {"pgrouted.Pool", "pgxpool", "pgxpool"}} {
		if m, _, ok := measured("read", s[0]+", 2 replicas", s[1]+" → 2 replicas, alternating", "cluster"); ok {
			fmt.Fprintf(b, "| (information, not a target) server CPU per replica read: %s on the whole cluster, round-robin over its 2 replicas, "+
				"against %s alternating over the same 2 (workload *Server cost*) | %s | — |\n", s[0], s[2], m)
		}
	}
	// The read-back: pgrouted's read right after its write against pgx's
	// on the primary right after the same write (the pair less the write,
	// each), the read in the same place.
	for _, s := range [][2]string{{"pgrouted", "pgx"}, {"pgrouted.Pool", "pgxpool"}} {
		key, base := "servercost/readback-alone/"+s[0]+"/", "servercost/readback-alone/"+s[1]+"/"
		r, ok := facts[key+"backends_ratio"]
		if !ok {
			continue
		}
		fmt.Fprintf(b, "| a read-back right after a write costs the cluster ≤ 1.5× a pgx read on the primary (%s's read right after its write against %s's, "+
			"on the primary right after the same write; the servers' client backends, which leave out the noise of the write's replay) | "+
			"%.2f× (IQR %.2f–%.2f; medians %.1f µs vs %.1f µs; whole servers: %.1f µs vs %.1f µs) | %s |\n",
			s[0], s[1], r, facts[key+"backends_ratio_lo"], facts[key+"backends_ratio_hi"], facts[key+"backends_us"], facts[base+"backends_us"],
			facts[key+"cluster_us"], facts[base+"cluster_us"], verdict(r <= 1.5))
	}
	allocs := func(name string) (float64, bool) {
		l, ok := raw[name]
		return median(l, func(l benchLine) float64 { return l.allocs }), ok && len(l) > 0
	}
	for _, c := range []struct {
		target, routed, base string
		extra                float64
	}{
		{"allocations per replica read ≤ pgx straight to a replica + 6 (Go benchmark, serial)",
			"BenchmarkSelect/mode=serial/driver=pgrouted", "BenchmarkSelect/mode=serial/driver=pgx-replica", 6},
		{"allocations per autocommit INSERT ≤ pgx + 10 (Go benchmark, serial)",
			"BenchmarkInsert/mode=serial/driver=pgrouted", "BenchmarkInsert/mode=serial/driver=pgx", 10},
		{"allocations per replica read ≤ pgxpool straight to a replica + 6: pgrouted.Pool (Go benchmark, serial)",
			"BenchmarkPoolSelect/mode=serial/driver=pgrouted-pool", "BenchmarkPoolSelect/mode=serial/driver=pgxpool-replica", 6},
		{"allocations per autocommit INSERT ≤ pgxpool + 10: pgrouted.Pool (Go benchmark, serial)",
			"BenchmarkPoolInsert/mode=serial/driver=pgrouted-pool", "BenchmarkPoolInsert/mode=serial/driver=pgxpool", 10},
	} {
		r, ok1 := allocs(c.routed)
		p, ok2 := allocs(c.base)
		if ok1 && ok2 {
			fmt.Fprintf(b, "| %s | %.0f vs %.0f (%+.0f) | %s |\n", c.target, r, p, r-p, verdict(r-p <= c.extra))
		}
	}
	if r, p := facts["memory/pgrouted/heap_mib"], facts["memory/pgx stdlib/heap_mib"]; r > 0 && p > 0 {
		fmt.Fprintf(b, "| heap for 100 idle connections ≤ 1.5× pgx's (workload *Memory*) | %.2f× (%.1f MiB vs %.1f MiB) | %s |\n", r/p, r, p, verdict(r/p <= 1.5))
	}
	// The wall-time targets: a statement's interleaved p50 through
	// pgrouted (routed) against pgx's, at most limit more (ratio).
	for _, w := range []struct {
		target, routed string
		limit          float64
	}{
		{"serial INSERT wall time ≤ +10% vs pgx (p50, interleaved)", "overhead-insert/pgrouted", 0.10},
		{"replica read wall time ≤ +5% vs pgx straight to a replica (p50, interleaved): pgrouted opened on the primary and one replica, " +
			"against pgx's database/sql driver straight to that replica", "overhead/pgrouted, 1 replica", 0.05},
		{"serial INSERT wall time ≤ +10% vs pgxpool: pgrouted.Pool (p50, interleaved)", "overhead-insert/pgrouted.Pool", 0.10},
		{"replica read wall time ≤ +5% vs pgxpool straight to a replica (p50, interleaved): pgrouted.Pool opened on the primary and one replica, " +
			"against pgxpool straight to that replica", "overhead/pgrouted.Pool, 1 replica", 0.05},
	} {
		if d, text, ok := wallRatio(facts, w.routed); ok {
			fmt.Fprintf(b, "| %s | %s | %s |\n", w.target, text, verdict(d <= w.limit))
		}
	}
	// The same, left to the scheduler (workload Overhead): for
	// information, with its resolution (an A/A pair).
	for _, w := range []struct{ what, routed string }{
		{"serial INSERT, pgrouted", "overhead-insert/pgrouted"},
		{"pgrouted forced to the primary", "overhead/pgrouted, forced to the primary"},
		{"replica read, pgrouted", "overhead/pgrouted, 1 replica"},
		{"pgrouted.Pool forced to the primary", "overhead/pgrouted.Pool, forced to the primary"},
		{"serial INSERT, pgrouted.Pool", "overhead-insert/pgrouted.Pool"},
		{"replica read, pgrouted.Pool", "overhead/pgrouted.Pool, 1 replica"},
		{"the measure's resolution: pgx's driver straight to a replica on a second connection, against the first", "overhead/pgx straight to a replica, a second connection"},
	} {
		if _, text, ok := wallRatio(facts, "unpinned/"+w.routed); ok {
			fmt.Fprintf(b, "| (information, not a target) unpinned (*Overhead, interleaved, unpinned*: client and servers left to the scheduler): %s | %s | — |\n", w.what, text)
		}
	}
	if _, text, ok := wallRatio(facts, "overhead/pgrouted, 2 replicas (round-robin)"); ok {
		fmt.Fprintf(b, "| (information, not a target) replica read wall time (p50, interleaved): pgrouted on the whole cluster, round-robin over its 2 replicas, "+
			"against pgx's database/sql driver alternating over the same 2 | %s | — |\n", text)
	}
	if _, text, ok := wallRatio(facts, "overhead/pgx straight to a replica, a second connection"); ok {
		fmt.Fprintf(b, "| (information, not a target) the measure's resolution: pgx's driver straight to a replica on a second connection, against the first | %s | — |\n", text)
	}
}

// wallRatio is a stack's interleaved wall time against its baseline's
// (workload Overhead): the median over the sets of connections of the
// ratio of their p50s, less 1, and its text with the quartiles and the
// p50s of all statements; ok is false when the run did not measure it.
func wallRatio(facts map[string]float64, stack string) (d float64, text string, ok bool) {
	r := facts[stack+"/ratio"]
	if r <= 0 {
		return 0, "", false
	}
	return r - 1, fmt.Sprintf("%+.1f%% (IQR %+.1f%% – %+.1f%%; p50 of all statements %.0f µs vs %.0f µs)",
		100*(r-1), 100*(facts[stack+"/ratio_lo"]-1), 100*(facts[stack+"/ratio_hi"]-1), facts[stack+"/p50_us"], facts[stack+"/base_p50_us"]), true
}

func cpuModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "memory unknown"
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "MemTotal:") {
			fs := strings.Fields(l)
			if len(fs) >= 2 {
				kb, _ := strconv.ParseFloat(fs[1], 64)
				return fmt.Sprintf("%.1f GiB RAM", kb/(1<<20))
			}
		}
	}
	return "memory unknown"
}

func kernel() string {
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		return "kernel unknown"
	}
	return "Linux " + strings.TrimSpace(string(out))
}

func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	fs := strings.Fields(string(data))
	if len(fs) < 3 {
		return "unknown"
	}
	return strings.Join(fs[:3], " ") + " (1, 5, 15 min)"
}
