package workload

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"github.com/pgrouted/pgrouted/testcluster"
)

// The overhead workload times one statement of about 50-100 µs at a time,
// on loopback, with the client and the servers on the same few CPUs. Left
// to the scheduler, a server process may wake on the client's CPU or on
// another one, and that placement, which a connection keeps for its life,
// moves a stack's p50 by more than the differences measured (two
// connections of pgx's driver to the same replica, the same code, differed
// by up to 17%). So the overhead workload runs the servers on every CPU
// but the first and this process on the first (pinCPUs): each statement's
// wake-ups cross CPUs the same way for every stack, as they cross machines
// in production, and what differs between stacks is their own work.

// cpuMask is a CPU set as sched_setaffinity(2) takes it.
type cpuMask [16]uint64 // 1 024 CPUs

func (m *cpuMask) set(cpu int)      { m[cpu/64] |= 1 << (cpu % 64) }
func (m *cpuMask) has(cpu int) bool { return m[cpu/64]&(1<<(cpu%64)) != 0 }

// cpus lists the CPUs of m.
func (m *cpuMask) cpus() []int {
	var out []int
	for c := range len(m) * 64 {
		if m.has(c) {
			out = append(out, c)
		}
	}
	return out
}

func getAffinity(pid int) (cpuMask, error) {
	var m cpuMask
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_GETAFFINITY, uintptr(pid), unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	if e != 0 {
		return m, fmt.Errorf("sched_getaffinity %d: %w", pid, e)
	}
	return m, nil
}

func setAffinity(pid int, m cpuMask) error {
	_, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, uintptr(pid), unsafe.Sizeof(m), uintptr(unsafe.Pointer(&m)))
	if e != 0 {
		return fmt.Errorf("sched_setaffinity %d: %w", pid, e)
	}
	return nil
}

// setOwnAffinity sets the CPUs of every thread of this process (a thread
// it starts later inherits its creator's).
func setOwnAffinity(m cpuMask) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	var errs []error
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := setAffinity(tid, m); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pinCPUs runs the servers of c (each postmaster, and the processes it
// starts from now on with it, and the ones it started) on every CPU this
// process may use but the first, and this process on the first. It
// reports false, and changes nothing, on a machine with fewer than 2 of
// them. unpin gives the servers and this process every CPU again.
func pinCPUs(c *testcluster.Cluster) (unpin func() error, client int, servers []int, ok bool, err error) {
	all, err := getAffinity(0)
	if err != nil {
		return nil, 0, nil, false, err
	}
	cpus := all.cpus()
	if len(cpus) < 2 {
		return func() error { return nil }, 0, nil, false, nil
	}
	var own, rest cpuMask
	own.set(cpus[0])
	for _, cpu := range cpus[1:] {
		rest.set(cpu)
	}
	each := func(m cpuMask) error {
		var errs []error
		for _, n := range c.Nodes() {
			pm := n.PostmasterPID()
			if pm == 0 {
				errs = append(errs, fmt.Errorf("%s: not running", n.Name()))
				continue
			}
			for _, pid := range append([]int{pm}, n.ServerProcesses()...) {
				if err := setAffinity(pid, m); err != nil && !errors.Is(err, syscall.ESRCH) {
					errs = append(errs, fmt.Errorf("%s: %w", n.Name(), err))
				}
			}
		}
		return errors.Join(errs...)
	}
	unpin = func() error {
		// Twice for this process: a thread started meanwhile by one not
		// yet changed would keep the one CPU.
		return errors.Join(each(all), setOwnAffinity(all), setOwnAffinity(all))
	}
	if err := errors.Join(each(rest), setOwnAffinity(own), setOwnAffinity(own)); err != nil {
		return nil, 0, nil, false, errors.Join(err, unpin())
	}
	return unpin, cpus[0], cpus[1:], true, nil
}
