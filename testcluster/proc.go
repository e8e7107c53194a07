//go:build unix

package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// runner runs PostgreSQL programs, as an unprivileged user when the process
// is root (PostgreSQL refuses to run as root).
type runner struct {
	bin  string
	dir  string // working directory, the cluster's base directory
	cred *syscall.Credential
	uid  int
	gid  int
	env  []string
}

func newRunner(bin, base, osUser string) (*runner, error) {
	r := &runner{bin: bin, dir: base, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(osUser)
		if err != nil {
			return nil, fmt.Errorf("testcluster: running as root, and PostgreSQL refuses to run as root, but the unprivileged user %q to run it as does not exist (create it with `useradd --system %s`, or set Options.OSUser): %w", osUser, osUser, err)
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("testcluster: user %q has a non-numeric uid/gid", osUser)
		}
		if uid == 0 {
			return nil, fmt.Errorf("testcluster: Options.OSUser %q is root; PostgreSQL needs an unprivileged user", osUser)
		}
		r.uid, r.gid = uid, gid
		r.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	// A clean environment: no PG* variable of the caller leaks into initdb,
	// pg_ctl or pg_basebackup.
	r.env = []string{
		"PATH=" + bin + string(os.PathListSeparator) + "/usr/local/bin:/usr/bin:/bin",
		"HOME=" + base,
		"LC_ALL=C",
		"LANG=C",
		"TZ=UTC",
		"PGPASSFILE=" + filepath.Join(base, "pgpass"),
	}
	return r, nil
}

// command prepares a PostgreSQL program, in its own process group so that a
// Ctrl-C meant for the test does not reach it first.
func (r *runner) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(r.bin, name), args...)
	cmd.Dir = r.dir
	cmd.Env = r.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: r.cred}
	// When ctx ends, kill the program's whole process group (pg_basebackup
	// forks a WAL streaming child that holds its output open), and do not
	// wait for the output for ever. A postmaster started by pg_ctl has
	// its own session and is not in the group.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// run runs a PostgreSQL program and returns an error holding its output.
func (r *runner) run(ctx context.Context, name string, args ...string) error {
	cmd := r.command(ctx, name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg != "" {
			return fmt.Errorf("testcluster: %s %s: %w: %s", name, strings.Join(args, " "), err, msg)
		}
		return fmt.Errorf("testcluster: %s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// own gives path to the user PostgreSQL runs as.
func (r *runner) own(path string) error {
	if r.cred == nil {
		return nil
	}
	return os.Lchown(path, r.uid, r.gid)
}

// writeFile writes a file that PostgreSQL programs may read, owned by
// the user they run as.
func (r *runner) writeFile(path string, data []byte, perm os.FileMode) error {
	if err := os.WriteFile(path, data, perm); err != nil {
		return err
	}
	return r.own(path)
}

// appendFile appends to a file of a data directory.
func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// watchdogScript runs in its own process, as the PostgreSQL user, with the
// read end of a pipe as stdin whose write end only the test process holds.
// When the test process ends for whatever reason (return, panic, os.Exit,
// SIGKILL) the read returns, and the script stops every PgBouncer and
// postmaster of the cluster and removes its base directory. After a normal Close it finds
// nothing left to do.
const watchdogScript = `base="$1"
cat >/dev/null
alive() { for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
for f in "$base"/*/pgbouncer.pid; do
	[ -f "$f" ] || continue
	p=$(head -n 1 "$f")
	case "$p" in ''|*[!0-9]*) continue;; esac
	kill -KILL "$p" 2>/dev/null
done
pids=""
for f in "$base"/*/postmaster.pid; do
	[ -f "$f" ] || continue
	p=$(head -n 1 "$f")
	case "$p" in ''|*[!0-9]*) continue;; esac
	# A frozen node (Node.Freeze) is woken first, so that it can stop.
	kill -CONT "$p" 2>/dev/null
	pkill -CONT -P "$p" 2>/dev/null
	kill -QUIT "$p" 2>/dev/null && pids="$pids $p"
done
i=0
while [ -n "$pids" ] && alive $pids && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -n "$pids" ] && kill -KILL $pids 2>/dev/null
rm -rf "$base"
`

// startWatchdog starts the watchdog process for base and returns the write
// end of its pipe: closing it (or the death of this process) triggers the
// cleanup.
func (r *runner) startWatchdog(base string) (*exec.Cmd, *os.File, error) {
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "testcluster-watchdog", base)
	cmd.Dir = "/"
	cmd.Env = r.env
	cmd.Stdin = pr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: r.cred}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return nil, nil, fmt.Errorf("testcluster: start watchdog: %w", err)
	}
	pr.Close()
	return cmd, pw, nil
}

// postmasterPID reads the postmaster's pid from a data directory, or 0.
func postmasterPID(dataDir string) int {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// processAlive reports whether a process exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return syscall.Kill(pid, 0) == nil
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// processes returns the processes for which keep, given a process's /proc
// directory, is true.
func processes(keep func(dir string) bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		if p, err := strconv.Atoi(e.Name()); err == nil && keep("/proc/"+e.Name()) {
			out = append(out, p)
		}
	}
	return out
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	return processes(func(dir string) bool {
		b, err := os.ReadFile(dir + "/stat")
		if err != nil {
			return false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			return false
		}
		f := strings.Fields(s[i+1:])
		pp := 0
		if len(f) > 2 {
			pp, _ = strconv.Atoi(f[1])
		}
		return pp == pid
	})
}

// killTree sends SIGKILL to pid, a postmaster, to its children and to any
// other process of the server in dataDir, and waits until all are gone, as
// a machine crash would leave them. Gone means reaped, not only dead: a new
// postmaster takes a zombie's pid in postmaster.pid for a running server.
//
// A server process left alive stays attached to the server's shared memory,
// and the server cannot start again ("pre-existing shared memory block is
// still in use"). So pid is stopped (SIGSTOP), and killTree waits until it
// is, before its children are listed: a postmaster that forked a backend for
// a new connection meanwhile would leave that backend out. And every
// process whose working directory is dataDir is killed too (a server
// process works in its data directory): one the listing missed, or whose
// parent died first, is found that way.
func killTree(ctx context.Context, pid int, dataDir string) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("testcluster: stop %d: %w", pid, err)
	}
	for deadline := time.Now().Add(time.Second); processAlive(pid) && !processStopped(pid) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	pids := append(childrenOf(pid), pid)
	dir := dataDir
	if d, err := filepath.EvalSymlinks(dataDir); err == nil {
		dir = d
	}
	killed := 0 // pids[:killed] were sent SIGKILL (once: a pid reaped may be reused)
	for {
		for _, p := range processesIn(dir) {
			if !slices.Contains(pids, p) {
				pids = append(pids, p)
			}
		}
		for ; killed < len(pids); killed++ {
			if err := syscall.Kill(pids[killed], syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("testcluster: kill %d: %w", pids[killed], err)
			}
		}
		alive := false
		for _, p := range pids {
			// A zombie is still there until its parent reaps it.
			if syscall.Kill(p, 0) == nil {
				alive = true
			}
		}
		if !alive {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: processes %v still alive after SIGKILL: %w", pids, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// processesIn returns the processes whose working directory is dir.
func processesIn(dir string) []int {
	return processes(func(pdir string) bool {
		cwd, err := os.Readlink(pdir + "/cwd")
		return err == nil && cwd == dir
	})
}
