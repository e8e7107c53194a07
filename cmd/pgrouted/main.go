package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Exit codes; see the package documentation.
const (
	exitOK          = 0   // success; for cluster and demo, also stopped by Ctrl-C or SIGTERM once their cluster was up (their normal end)
	exitFailure     = 1   // the command ran and failed: unreachable cluster, stale reads or errors in the demo, PostgreSQL missing
	exitUsage       = 2   // bad arguments, unknown subcommand, invalid DSN
	exitInterrupted = 130 // demo or cluster stopped by Ctrl-C (SIGINT) or SIGTERM before their cluster was up
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal the command cleans up; a second one
		// kills it the default way (the demo cluster's watchdog then
		// stops PostgreSQL).
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args (without the program name) and returns
// the exit code. ctx ends on Ctrl-C. stdin is read only for a DSN given as
// "-".
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "demo":
		return demoCmd(ctx, rest, stdout, stderr)
	case "cluster":
		return clusterCmd(ctx, rest, stdout, stderr)
	case "topology":
		return topologyCmd(ctx, rest, stdin, stdout, stderr)
	case "explain":
		return explainCmd(ctx, rest, stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			// pgrouted help demo: the subcommand's own help.
			return run(ctx, []string{rest[0], "--help"}, stdin, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "pgrouted: unknown command %q\n\n", cmd)
		usage(stderr)
		return exitUsage
	}
}

func usage(w io.Writer) {
	fmt.Fprint(w, `pgrouted: see where a pgrouted DSN sends each statement, and watch it work.

Usage:
  pgrouted demo [--duration 20s] [--replicas 2] [--no-color] [--json]
      Boot a local PostgreSQL primary with streaming replicas, run a mixed
      workload through pgrouted, and walk through a replica falling behind,
      a replica crash and a failover, with a live table and a summary.
  pgrouted cluster [--replicas 2]
      Start a local PostgreSQL primary with streaming replicas, print its
      DSN (with the random password made up for it) and keep it up until
      Ctrl-C, to try pgrouted from your own code (make cluster does too).
  pgrouted topology [--watch] [--json] [--no-color] [--timeout 10s] [DSN]
      Probe a cluster and print what pgrouted sees of each host.
  pgrouted explain [--json] [--timeout 10s] [DSN] QUERY
      Print where QUERY would run now, and why, without running it.
  pgrouted help [COMMAND]
      This text, or a command's flags.

DSN is a pgrouted connection string: any string pgx accepts (URL or
key=value, several hosts) plus pgrouted_ keys, e.g.
  "postgres://app:secret@db1,db2,db3/app?pgrouted_max_lag=2s"
topology and explain read it from the environment variable PGROUTED_DSN,
or from stdin when the DSN argument is "-". A DSN given as an argument
works, with a warning: other users of the machine can read the arguments
of a process (ps), and the shell keeps them in its history. No password is
ever printed.

Exit codes: 0 success (demo, cluster: also stopped by Ctrl-C once their
cluster was up); 1 failure (cluster unreachable, demo found stale reads or
errors, PostgreSQL missing); 2 usage error or invalid DSN; 130 demo or
cluster interrupted by Ctrl-C before their cluster was up.
`)
}

// newFlags returns a FlagSet for a subcommand whose usage line is line
// (after "pgrouted ") and whose description is about.
func newFlags(name, line, about string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: pgrouted %s\n\n%s\n", line, about)
		if hasFlags(fs) {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// parseFlags parses args with fs, allowing flags after positional
// arguments (pgrouted topology DSN --watch), and returns the positional
// arguments. "--" ends the flags. On --help it prints the usage on stdout
// and returns ok false with code exitOK; on a bad flag it prints the error
// and the usage on stderr and returns ok false with code exitUsage.
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	// The flag package would print the usage itself, on its output: it
	// prints nothing, and this function prints where it belongs.
	fs.SetOutput(io.Discard)
	for len(args) > 0 {
		if args[0] == "--" {
			return append(pos, args[1:]...), exitOK, true
		}
		if !strings.HasPrefix(args[0], "-") || args[0] == "-" {
			pos = append(pos, args[0])
			args = args[1:]
			continue
		}
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil, exitOK, false
		}
		if err != nil {
			return nil, usageError(fs, stderr, "%v", err), false
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			// fs.Parse consumed the "--" that ends the flags.
			return append(pos, rest...), exitOK, true
		}
		args = rest
	}
	return pos, exitOK, true
}

// usageError prints msg and the subcommand's usage on stderr and returns
// exitUsage.
func usageError(fs *flag.FlagSet, stderr io.Writer, format string, a ...any) int {
	fmt.Fprintf(stderr, "pgrouted %s: %s\n\n", fs.Name(), fmt.Sprintf(format, a...))
	fs.SetOutput(stderr)
	fs.Usage()
	return exitUsage
}

// oneLine makes s fit on one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
