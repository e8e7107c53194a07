package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// envDSN is the environment variable topology and explain read the DSN
// from when none is given as an argument.
const envDSN = "PGROUTED_DSN"

// maxStdinDSN is the most a DSN read from stdin may hold.
const maxStdinDSN = 1 << 20

// dsnHelp is the paragraph of topology's and explain's help on where the
// DSN comes from.
const dsnHelp = `The DSN comes from the environment variable ` + envDSN + `, or from stdin
when the DSN argument is "-" (one DSN, surrounding space ignored):
  ` + envDSN + `="$(cat dsn.txt)" pgrouted topology
  pgrouted topology - < dsn.txt
A DSN given as an argument still works, but other users of the machine can
read it (ps, /proc/PID/cmdline) and the shell keeps it in its history: the
command then prints a warning on stderr.`

// argvWarning is the warning printed when the DSN is an argument.
const argvWarning = "warning: the DSN is an argument, which other users of this machine can read (ps, /proc) and the shell keeps in its history; set " + envDSN + ", or give - and write the DSN on stdin"

// dsnSource is where a command found its DSN.
type dsnSource int

const (
	fromEnv dsnSource = iota
	fromStdin
	fromArgs
)

// readDSN returns the DSN of arg: arg itself, or stdin's content when arg
// is "-". With no arg (given false) it returns $PGROUTED_DSN, or an error
// when that is empty.
func readDSN(arg string, given bool, stdin io.Reader) (string, dsnSource, error) {
	switch {
	case !given:
		if v := os.Getenv(envDSN); strings.TrimSpace(v) != "" {
			return v, fromEnv, nil
		}
		return "", fromEnv, errors.New(envDSN + " is not set")
	case arg == "-":
		if stdin == nil {
			return "", fromStdin, errors.New("no stdin to read the DSN from")
		}
		b, err := io.ReadAll(io.LimitReader(stdin, maxStdinDSN+1))
		if err != nil {
			return "", fromStdin, fmt.Errorf("reading the DSN from stdin: %w", err)
		}
		if len(b) > maxStdinDSN {
			return "", fromStdin, fmt.Errorf("the DSN on stdin is longer than %d bytes", maxStdinDSN)
		}
		dsn := strings.TrimSpace(string(b))
		if dsn == "" {
			return "", fromStdin, errors.New("stdin holds no DSN")
		}
		return dsn, fromStdin, nil
	}
	return arg, fromArgs, nil
}
