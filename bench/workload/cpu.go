package workload

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgrouted/pgrouted/testcluster"
)

// This file reads the CPU time a PostgreSQL server has used, from /proc:
// the whole server, not only the backends of the connections measured, so
// that the work a statement causes elsewhere (the WAL writer, the
// walsenders streaming its WAL, the startup process replaying it on a
// replica) counts too.
//
// A server's CPU time is the sum, over its postmaster and the postmaster's
// live children, of the time each has run (the first field of
// /proc/<pid>/schedstat, in nanoseconds; utime+stime of /proc/<pid>/stat,
// in clock ticks, where schedstat is missing), plus the postmaster's
// cutime+cstime (the CPU time of the children it has reaped: backends of
// closed connections, autovacuum workers). Clock ticks are converted with
// CLK_TCK (getconf, else Linux's USER_HZ, 100).

// clockTick is the length of one clock tick of /proc/<pid>/stat.
var clockTick = func() time.Duration {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(out))); err == nil && n > 0 {
			return time.Second / time.Duration(n)
		}
	}
	return 10 * time.Millisecond
}()

// procStat is what the CPU reading needs of /proc/<pid>/stat.
type procStat struct {
	ppid                         int
	utime, stime, cutime, cstime uint64 // clock ticks
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields from the state (field 3) on follow its last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fs := strings.Fields(s[i+1:])
	if len(fs) < 15 {
		return procStat{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fs))
	}
	num := func(k int) uint64 { // field k (1-based) of the file
		v, _ := strconv.ParseUint(fs[k-3], 10, 64)
		return v
	}
	return procStat{ppid: int(num(4)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, nil
}

// runTime is the CPU time process pid has used itself (not its children).
func runTime(pid int, st procStat) time.Duration {
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				return time.Duration(ns)
			}
		}
	}
	return time.Duration(st.utime+st.stime) * clockTick
}

// serverCPU is the CPU time node's server has used (see the file
// comment): in all, and in its client backends (kind tells them from the
// server's own processes).
func serverCPU(node *testcluster.Node, kind, skip func(pid int) bool) (total, backends time.Duration, err error) {
	pm := node.PostmasterPID()
	if pm == 0 {
		return 0, 0, fmt.Errorf("%s: not running", node.Name())
	}
	st, err := readProcStat(pm)
	if err != nil {
		return 0, 0, err
	}
	total = runTime(pm, st) + time.Duration(st.cutime+st.cstime)*clockTick
	for _, pid := range node.ServerProcesses() {
		cs, err := readProcStat(pid)
		if err != nil || cs.ppid != pm || skip(pid) {
			continue // gone meanwhile, or left out
		}
		d := runTime(pid, cs)
		total += d
		if kind(pid) {
			backends += d
		}
	}
	return total, backends, nil
}

// auxTitles start the process titles of a PostgreSQL server's own
// processes, after "postgres: " and the cluster name; every other child
// of the postmaster is a client backend.
var auxTitles = []string{"checkpointer", "background writer", "walwriter", "autovacuum", "logical replication",
	"archiver", "stats collector", "startup", "walreceiver", "walsender", "parallel worker", "io worker"}

// isBackend reports whether process pid is a client backend, from its
// title (/proc/<pid>/cmdline).
func isBackend(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	title := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
	title, ok := strings.CutPrefix(title, "postgres: ")
	if !ok {
		return false
	}
	if i := strings.Index(title, ": "); i >= 0 && !strings.Contains(title[:i], " ") {
		title = title[i+2:] // the cluster name
	}
	for _, a := range auxTitles {
		if strings.HasPrefix(title, a) {
			return false
		}
	}
	return true
}

// cpuMeter reads the CPU time of each server of a cluster: the primary
// and the replicas.
type cpuMeter struct {
	c       *testcluster.Cluster
	backend map[int]bool
	// probes are the backends of pgrouted's probe connections, left out
	// once skipProbes found them: their work is per second, not per
	// statement (measured apart: ServerCost's idle connector).
	probes map[int]bool
}

func newCPUMeter(c *testcluster.Cluster) (*cpuMeter, error) {
	for _, n := range c.Nodes() {
		if n.PostmasterPID() == 0 {
			return nil, fmt.Errorf("%s: not running", n.Name())
		}
	}
	return &cpuMeter{c: c, backend: map[int]bool{}, probes: map[int]bool{}}, nil
}

// isBackend is isBackend, remembered per process.
func (m *cpuMeter) isBackend(pid int) bool {
	b, ok := m.backend[pid]
	if !ok {
		b = isBackend(pid)
		m.backend[pid] = b
	}
	return b
}

// skipProbes leaves out, from the samples taken after it, the backends
// of the probe connections (application_name pgrouted-probe) open on the
// cluster's servers now. It queries the servers: call it outside the
// windows measured.
func (m *cpuMeter) skipProbes(ctx context.Context) error {
	for _, n := range m.c.Nodes() {
		conn, err := n.Connect(ctx)
		if err != nil {
			return err
		}
		rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgrouted-probe'")
		if err == nil {
			var pids []int32
			pids, err = pgx.CollectRows(rows, pgx.RowTo[int32])
			for _, pid := range pids {
				m.probes[int(pid)] = true
			}
		}
		conn.Close(context.Background())
		if err != nil {
			return err
		}
	}
	return nil
}

// cpuSample is the CPU time used so far by the primary and by the
// replicas together, in all and in their client backends, read at one
// moment.
type cpuSample struct {
	at                   time.Time
	primary, replicas    time.Duration
	primaryBE, replicaBE time.Duration
}

func (m *cpuMeter) sample() (cpuSample, error) {
	s := cpuSample{at: time.Now()}
	var err error
	skip := func(pid int) bool { return m.probes[pid] }
	if s.primary, s.primaryBE, err = serverCPU(m.c.Primary(), m.isBackend, skip); err != nil {
		return s, err
	}
	for _, r := range m.c.Replicas() {
		d, be, err := serverCPU(r, m.isBackend, skip)
		if err != nil {
			return s, err
		}
		s.replicas += d
		s.replicaBE += be
	}
	return s, nil
}

// cpuDelta is the CPU time the servers used between two samples, and the
// wall time between them.
type cpuDelta struct {
	wall, primary, replicas, primaryBE, replicaBE time.Duration
}

// plus is d and o together: two spans' CPU and wall time summed.
func (d cpuDelta) plus(o cpuDelta) cpuDelta {
	return cpuDelta{wall: d.wall + o.wall, primary: d.primary + o.primary, replicas: d.replicas + o.replicas,
		primaryBE: d.primaryBE + o.primaryBE, replicaBE: d.replicaBE + o.replicaBE}
}

func (s cpuSample) since(before cpuSample) cpuDelta {
	return cpuDelta{wall: s.at.Sub(before.at), primary: s.primary - before.primary, replicas: s.replicas - before.replicas,
		primaryBE: s.primaryBE - before.primaryBE, replicaBE: s.replicaBE - before.replicaBE}
}
