//go:build unix

package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pgrouted/pgrouted/testcluster"
)

// maxClusterReplicas bounds cluster's --replicas, as the demo's.
const maxClusterReplicas = maxDemoReplicas

// clusterCmd is `pgrouted cluster [--replicas 2]`: a local primary and
// streaming replicas that stay up until Ctrl-C, to try pgrouted from one's
// own code.
func clusterCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("cluster", "cluster [--replicas 2]",
		`Start a local PostgreSQL primary with streaming replicas (from the PostgreSQL
server binaries on this machine, in a temporary directory, on free loopback
ports), print its multi-host DSN on stdout, one line starting with "DSN: ",
and keep it up until Ctrl-C (or SIGTERM), which stops every PostgreSQL
process and removes the directory. Open the DSN with sql.Open("pgrouted",
dsn) from your own code, or put it in PGROUTED_DSN and look at it with
pgrouted topology.

The DSN holds a password: a random one made up at start for this throwaway
cluster (SCRAM authentication on loopback), which protects nothing else and is
printed so that you can connect. It is the only place the command prints it.

Nothing is installed: without PostgreSQL it fails and prints the command that
installs it (make cluster installs it, as make demo does). As root,
PostgreSQL runs as the postgres user, which must be able to enter $TMPDIR.

Exit status: 0 when stopped by Ctrl-C or SIGTERM once the DSN was printed
(its normal end) and the cluster was removed; 1 when the cluster cannot
start (PostgreSQL missing, ...) or cannot be removed; 2 on bad arguments;
130 when interrupted before the cluster was up.`, stderr)
	replicas := fs.Int("replicas", 2, fmt.Sprintf("number of streaming replicas (1 to %d)", maxClusterReplicas))
	pos, code, ok := parseFlags(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	if len(pos) > 0 {
		return usageError(fs, stderr, "unexpected argument %q", pos[0])
	}
	if *replicas < 1 || *replicas > maxClusterReplicas {
		return usageError(fs, stderr, "--replicas %d: want 1 to %d", *replicas, maxClusterReplicas)
	}
	return runCluster(ctx, *replicas, stdout, stderr)
}

// runCluster starts the cluster, prints its DSN and waits for ctx to end.
func runCluster(ctx context.Context, replicas int, stdout, stderr io.Writer) int {
	if err := checkTempDir(); err != nil {
		fmt.Fprintf(stderr, "pgrouted cluster: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stderr, "Starting a local PostgreSQL primary and %d streaming replica(s)...\n", replicas)
	c, err := testcluster.Start(ctx, testcluster.Options{
		Replicas: replicas,
		Password: rand.Text(),
		Logf: func(format string, a ...any) {
			fmt.Fprintf(stderr, "  %s\n", strings.TrimPrefix(fmt.Sprintf(format, a...), "testcluster: "))
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			fmt.Fprintf(stderr, "pgrouted cluster: interrupted before the cluster was up\n")
			return exitInterrupted
		}
		fmt.Fprintf(stderr, "pgrouted cluster: cannot start the local cluster: %v\n", err)
		if errors.Is(err, testcluster.ErrNoPostgres) {
			fmt.Fprintf(stderr, "(from a checkout of pgrouted, `make cluster` installs PostgreSQL when it runs as root, as `make test` does)\n")
		}
		return exitFailure
	}

	names := []string{c.Primary().Name()}
	for _, r := range c.Replicas() {
		names = append(names, r.Name())
	}
	fmt.Fprintf(stdout, "DSN: %s&pgrouted_names=%s\n", c.DSN(), strings.Join(names, ","))
	fmt.Fprintf(stderr, `
%s primary %s and %d streaming replica(s) are up, in %s.
The DSN above (stdout) names them all, primary first; its password is a random
one for this cluster only. Put it in PGROUTED_DSN, then for example:
  go run ./cmd/pgrouted topology
  go run ./cmd/pgrouted explain "SELECT 1"
or open it from your own code: sql.Open("pgrouted", dsn).
Ctrl-C stops the cluster and removes its directory.
`, strings.Replace(c.Version(), "postgres (PostgreSQL)", "PostgreSQL", 1), c.Primary().Name(), replicas, c.Dir())

	<-ctx.Done()
	fmt.Fprintf(stderr, "Stopping the cluster...\n")
	if err := c.Close(); err != nil {
		fmt.Fprintf(stderr, "pgrouted cluster: %v\n", err)
		return exitFailure
	}
	fmt.Fprintf(stderr, "Stopped; %s removed.\n", c.Dir())
	return exitOK
}

// checkTempDir fails, as root, when the user PostgreSQL runs as cannot
// enter the directory the cluster goes in ($TMPDIR): every directory on its
// path must let others search it. initdb's own error would not say why.
func checkTempDir() error {
	if os.Geteuid() != 0 {
		return nil
	}
	tmp, err := filepath.Abs(os.TempDir())
	if err != nil {
		return err
	}
	for d := tmp; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("TMPDIR %s: %w", tmp, err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("running as root, PostgreSQL runs as the postgres user, which cannot enter %s (mode %v) on the way to the temporary directory %s; "+
				"set TMPDIR to a directory it can reach, for example: TMPDIR=$(mktemp -d /tmp/pgrouted.XXXXXX) && chmod 1777 \"$TMPDIR\"", d, fi.Mode().Perm(), tmp)
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
