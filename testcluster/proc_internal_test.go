//go:build unix

package testcluster

import (
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// TestKillTreeKillsWhatWorksInTheDataDirectory: killTree kills the
// postmaster, its children, and a process of the server that is neither (a
// backend the listing missed, or one whose parent died first), found by
// its working directory, the data directory; and returns once all are
// reaped. Without the last, the stray backend keeps the server's shared
// memory and the server cannot start again.
func TestKillTreeKillsWhatWorksInTheDataDirectory(t *testing.T) {
	dir := t.TempDir()
	start := func() *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go cmd.Wait() // reaped once killed, as the postmaster's children are by init
		return cmd
	}
	postmaster, stray := start(), start()
	other := exec.Command("sleep", "60") // elsewhere: left alone
	other.Dir = t.TempDir()
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := killTree(ctx, postmaster.Process.Pid, dir); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*exec.Cmd{postmaster, stray} {
		if syscall.Kill(c.Process.Pid, 0) == nil {
			t.Errorf("process %d, working in the data directory, is still there", c.Process.Pid)
		}
	}
	if err := syscall.Kill(other.Process.Pid, 0); err != nil {
		t.Errorf("process %d, working elsewhere, was killed: %v", other.Process.Pid, err)
	}
}
