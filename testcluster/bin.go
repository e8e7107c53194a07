package testcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// EnvBinDir names the environment variable that, when set, is the directory
// holding the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup,
// postgres). It takes precedence over PATH and pg_config.
const EnvBinDir = "PGROUTED_PG_BIN"

// InstallCommand is the command that installs the PostgreSQL server binaries
// on Debian and Ubuntu. It is part of the error returned when none are found.
const InstallCommand = "apt-get install -y postgresql"

// ErrNoPostgres is returned (wrapped) by [Start] and [FindBinDir] when no
// PostgreSQL server binaries are found. Its text says how to install them.
var ErrNoPostgres = errors.New("testcluster: PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup, postgres) not found; " +
	"install them with `" + InstallCommand + "` (as root, or with sudo), or set " + EnvBinDir + " to the directory that holds initdb")

// requiredBins are the programs a cluster cannot start without.
var requiredBins = []string{"initdb", "pg_ctl", "pg_basebackup", "postgres"}

// FindBinDir returns the directory of the PostgreSQL server binaries. It looks,
// in order, at $PGROUTED_PG_BIN, at PATH, at `pg_config --bindir`, and at
// /usr/lib/postgresql/*/bin (newest major version first). The error wraps
// [ErrNoPostgres] and lists where it looked.
func FindBinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if missing := missingBins(dir); len(missing) > 0 {
			return "", fmt.Errorf("%w: %s=%s lacks %s", ErrNoPostgres, EnvBinDir, dir, strings.Join(missing, ", "))
		}
		return dir, nil
	}
	var looked []string
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if len(missingBins(dir)) == 0 {
			return dir, nil
		}
		looked = append(looked, dir+" (from PATH, incomplete)")
	} else {
		looked = append(looked, "PATH")
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dir := strings.TrimSpace(string(out))
		if len(missingBins(dir)) == 0 {
			return dir, nil
		}
		looked = append(looked, dir+" (from pg_config)")
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, dir := range dirs {
		if len(missingBins(dir)) == 0 {
			return dir, nil
		}
	}
	looked = append(looked, "/usr/lib/postgresql/*/bin")
	return "", fmt.Errorf("%w (looked in %s)", ErrNoPostgres, strings.Join(looked, ", "))
}

func missingBins(dir string) []string {
	var missing []string
	for _, b := range requiredBins {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	return missing
}

var majorRe = regexp.MustCompile(`/postgresql/(\d+(?:\.\d+)?)/bin$`)

// majorOf extracts the version from /usr/lib/postgresql/<version>/bin.
func majorOf(dir string) float64 {
	m := majorRe.FindStringSubmatch(dir)
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

var versionRe = regexp.MustCompile(`(\d+)(?:\.(\d+))?`)

// serverVersion runs `postgres --version` and returns the version as
// PostgreSQL's server_version_num would (15.4 -> 150004).
func serverVersion(bin string) (int, string, error) {
	out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return 0, "", fmt.Errorf("testcluster: %s --version: %w", filepath.Join(bin, "postgres"), err)
	}
	s := strings.TrimSpace(string(out))
	m := versionRe.FindStringSubmatch(s)
	if m == nil {
		return 0, s, fmt.Errorf("testcluster: cannot read a version from %q", s)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major*10000 + minor, s, nil
}
