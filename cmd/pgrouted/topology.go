package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pgrouted/pgrouted"
)

// topologyCmd is `pgrouted topology [--watch] [--json] [--no-color]
// [--timeout d] [DSN]`.
func topologyCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("topology", "topology [--watch] [--json] [--no-color] [--timeout 10s] [DSN]",
		`Start pgrouted's probers on DSN, wait until every host answered its first
probe (or --timeout), and print what pgrouted sees: which host is the primary
and, for each host, its role, circuit breaker, timeline, replay position, lag
in bytes and as a staleness bound, probe round trip, sync state, reads in
flight, pool and last probe error; with pgrouted_topology=patroni, the
Patroni endpoint that answered, the leader it names and its timeline, its
lease and the hosts it lets serve no reads. With --watch, print it again every second
until Ctrl-C. No password is printed.

`+dsnHelp+`

Exit status: 0 when a host answered; 1 when none did; 2 on bad arguments or
an invalid DSN.`, stderr)
	watch := fs.Bool("watch", false, "print the table every second until Ctrl-C")
	asJSON := fs.Bool("json", false, "print the snapshot as JSON (with --watch, one JSON object per line)")
	noColor := fs.Bool("no-color", false, "no colors and no cursor control, even on a terminal")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for the first probes")
	pos, code, ok := parseFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		return usageError(fs, stderr, "want one DSN, got %d arguments", len(pos))
	}
	dsn, src, err := readDSN(strings.Join(pos, ""), len(pos) == 1, stdin)
	if err != nil {
		return usageError(fs, stderr, "want one DSN: %v (set %s, or give - and write the DSN on stdin)", err, envDSN)
	}
	live := !*noColor && !*asJSON && isTerminal(stdout)
	conn, cfg, err := openConnector(dsn)
	// From here on nothing written may hold the password, even by mistake.
	stdout = &redactor{w: stdout, secrets: secretsOf(dsn, cfg)}
	stderr = &redactor{w: stderr, secrets: secretsOf(dsn, cfg)}
	if src == fromArgs {
		fmt.Fprintf(stderr, "pgrouted topology: %s\n", argvWarning)
	}
	if err != nil {
		fmt.Fprintf(stderr, "pgrouted topology: %v\n", err)
		if cfg == nil {
			return exitUsage
		}
		return exitFailure
	}
	defer conn.Close()
	top, all := waitProbed(ctx, conn, *timeout, cfg.ProbeInterval)
	if !all {
		fmt.Fprintf(stderr, "pgrouted topology: not every host answered its first probe within %v\n", *timeout)
	}
	print := func(top pgrouted.Snapshot) {
		if *asJSON {
			b, _ := json.Marshal(top)
			fmt.Fprintf(stdout, "%s\n", b)
			return
		}
		fmt.Fprint(stdout, renderTopology(top, maxLagOf(cfg), live))
	}
	if !*watch {
		print(top)
		return topologyStatus(top)
	}
	lines := 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		if live {
			out := renderTopology(top, maxLagOf(cfg), true)
			fmt.Fprint(stdout, redraw(lines)+out)
			lines = strings.Count(out, "\n")
		} else {
			if !*asJSON {
				fmt.Fprintf(stdout, "%s\n", top.Taken.Format("15:04:05"))
			}
			print(top)
			if !*asJSON {
				fmt.Fprintln(stdout)
			}
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-tick.C:
		}
		top = conn.Topology()
	}
}

// topologyStatus is the exit status of a one-shot topology: 1 when no host
// answered.
func topologyStatus(top pgrouted.Snapshot) int {
	for _, h := range top.Hosts {
		if h.Healthy {
			return exitOK
		}
	}
	return exitFailure
}

// renderTopology is the header line and the table.
func renderTopology(top pgrouted.Snapshot, maxLag time.Duration, color bool) string {
	head := topologyHeader(top)
	if maxLag > 0 {
		head += fmt.Sprintf("; pgrouted_max_lag %v", maxLag)
	}
	if color {
		head = paint(bold, head)
	}
	if pl := providerLine(top); pl != "" {
		head += "\n" + pl
	}
	out := head + "\n" + topologyTable(top, maxLag).render(color)
	if errs := probeErrors(top, color); errs != "" {
		out += "last probe errors:\n" + errs
	}
	return out
}

// redraw returns the ANSI sequence that moves the cursor up over the lines
// printed last and clears them, so the next frame replaces the previous
// one.
func redraw(lines int) string {
	if lines == 0 {
		return ""
	}
	return fmt.Sprintf("\x1b[%dA\r\x1b[J", lines)
}
