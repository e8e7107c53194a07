//go:build unix

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Freeze stops every process of the node (SIGSTOP to the postmaster, then
// to each of its children), as a stalled virtual machine or a hung storage
// layer would: its sockets stay open, the kernel still accepts connections
// on its port (they are never answered), and nothing it has sent or been
// sent is lost. It returns when every process is stopped. [Node.Thaw] wakes
// it; [Cluster.Restore] and [Cluster.Close] thaw every node first.
func (n *Node) Freeze(ctx context.Context) error {
	pid := postmasterPID(n.dataDir)
	if pid == 0 || !processAlive(pid) {
		return fmt.Errorf("testcluster: freeze %s: not running", n.name)
	}
	// The postmaster first, so that it starts no new child meanwhile.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return fmt.Errorf("testcluster: freeze %s: %w", n.name, err)
	}
	pids := []int{pid}
	for {
		// A child it started just before its stop is found on a later
		// pass; once every process listed is stopped, no other can appear.
		added := false
		for _, k := range childrenOf(pid) {
			if !containsPID(pids, k) {
				if err := syscall.Kill(k, syscall.SIGSTOP); err != nil && !errors.Is(err, syscall.ESRCH) {
					return fmt.Errorf("testcluster: freeze %s: %w", n.name, err)
				}
				pids = append(pids, k)
				added = true
			}
		}
		if !added && allStopped(pids) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testcluster: %s: processes %v not all stopped: %w", n.name, pids, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	n.c.opts.Logf("testcluster: %s frozen (%d processes)", n.name, len(pids))
	return nil
}

// Thaw wakes the node's processes (SIGCONT) after [Node.Freeze]. It does
// nothing to a node that is not frozen.
func (n *Node) Thaw() error {
	pid := postmasterPID(n.dataDir)
	if pid == 0 {
		return nil
	}
	stopped := false
	for _, p := range append(childrenOf(pid), pid) {
		if processStopped(p) {
			stopped = true
		}
		if err := syscall.Kill(p, syscall.SIGCONT); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("testcluster: thaw %s: %w", n.name, err)
		}
	}
	if stopped {
		n.c.opts.Logf("testcluster: %s thawed", n.name)
	}
	return nil
}

func containsPID(pids []int, p int) bool {
	for _, q := range pids {
		if q == p {
			return true
		}
	}
	return false
}

// allStopped reports whether every process of pids is stopped or gone.
func allStopped(pids []int) bool {
	for _, p := range pids {
		if processAlive(p) && !processStopped(p) {
			return false
		}
	}
	return true
}

// processStopped reports whether a process is stopped by a signal (state
// T in /proc/pid/stat).
func processStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}
