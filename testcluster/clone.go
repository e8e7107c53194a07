//go:build unix

package testcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// This file clones a standby without pg_basebackup, which the npm packages
// of PostgreSQL do not ship: a copy of the primary's data directory taken
// while the primary is in a non-exclusive base backup (the low-level backup
// API), as PostgreSQL's documentation describes ("Making a Base Backup
// Using the Low Level API"). The primary keeps serving; full-page writes
// are forced during the backup, so WAL replay from the backup's checkpoint
// repairs whatever the copy caught half-written. The standby streams that
// WAL from the primary, which keeps it (wal_keep_size).

// forceCopy makes clones copy even where pg_basebackup is there (the
// package's internal tests run the copy on every version with it).
var forceCopy = false

// hasBasebackup reports whether standbys are cloned with pg_basebackup.
func (c *Cluster) hasBasebackup() bool {
	if forceCopy {
		return false
	}
	fi, err := os.Stat(filepath.Join(c.bin, "pg_basebackup"))
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// copyFrom fills n's (absent) data directory with a base backup of primary
// and makes it a standby whose primary_conninfo is conninfo, as
// pg_basebackup -R would: backup start on a session of its own, which stays
// open while the files are copied (a non-exclusive backup ends with its
// session), backup stop, whose backup_label goes into the copy, then
// standby.signal and primary_conninfo.
func (n *Node) copyFrom(ctx context.Context, primary *Node, conninfo string) error {
	conn, err := primary.connect(ctx, "postgres")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	start, stop := backupSQL(n.c.Major())
	if _, err := conn.Exec(ctx, start, "testcluster "+n.name); err != nil {
		return fmt.Errorf("testcluster: %s: start a base backup for %s: %w", primary.name, n.name, err)
	}
	if err := n.c.copyDataDir(primary.dataDir, n.dataDir); err != nil {
		return err
	}
	var label, spcmap string
	if err := conn.QueryRow(ctx, stop).Scan(&label, &spcmap); err != nil {
		return fmt.Errorf("testcluster: %s: stop the base backup for %s: %w", primary.name, n.name, err)
	}
	files := map[string]string{"backup_label": label, "standby.signal": ""}
	if spcmap != "" {
		files["tablespace_map"] = spcmap
	}
	for name, text := range files {
		if err := n.c.run.writeFile(filepath.Join(n.dataDir, name), []byte(text), 0o600); err != nil {
			return fmt.Errorf("testcluster: %w", err)
		}
	}
	// Later lines win: this one overrides a primary_conninfo the primary
	// kept from when it was a standby itself.
	line := "\n# testcluster: standby of " + primary.name + "\nprimary_conninfo = " + quoteLiteral(conninfo) + "\n"
	if err := appendFile(filepath.Join(n.dataDir, "postgresql.auto.conf"), line); err != nil {
		return fmt.Errorf("testcluster: %w", err)
	}
	return nil
}

// copyExcluded are the entries of a data directory that a base backup
// leaves out (as pg_basebackup does): the running server's files, and
// every file of the directories whose contents are the server's private,
// temporary state or WAL (the directories themselves are copied empty).
var (
	copyExcludedFiles = map[string]bool{
		"postmaster.pid": true, "postmaster.opts": true, "current_logfiles": true,
		"backup_label": true, "backup_label.old": true, "tablespace_map": true, "backup_manifest": true,
		"standby.signal": true, "recovery.signal": true,
	}
	copyEmptiedDirs = map[string]bool{
		"pg_wal": true, "pg_dynshmem": true, "pg_notify": true, "pg_serial": true,
		"pg_snapshots": true, "pg_stat_tmp": true, "pg_subtrans": true, "pg_replslot": true,
	}
)

// copyDataDir copies the data directory src of a running server to dst,
// owned by the user PostgreSQL runs as, leaving out what copyExcluded
// names, relation cache init files (pg_internal.init) and temporary files
// (pgsql_tmp*). A file that disappears during the copy is left out too:
// the server removed it, and WAL replay does not need it.
func (c *Cluster) copyDataDir(src, dst string) error {
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != src {
				return nil
			}
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		top, _, nested := strings.Cut(filepath.ToSlash(rel), "/")
		name := d.Name()
		switch {
		case rel == ".":
		case !nested && copyExcludedFiles[name]:
			return nil
		case name == "pg_internal.init" || strings.HasPrefix(name, "pgsql_tmp"):
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		case nested && copyEmptiedDirs[top] && !(top == "pg_wal" && d.IsDir()):
			// pg_wal keeps its subdirectories (archive_status, summaries).
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		} else if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := os.Mkdir(target, info.Mode().Perm()); err != nil {
				return err
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			if err := os.Symlink(link, target); err != nil {
				return err
			}
		case d.Type().IsRegular():
			if err := copyFile(path, target, info.Mode().Perm()); errors.Is(err, fs.ErrNotExist) {
				return nil
			} else if err != nil {
				return err
			}
		default:
			return nil
		}
		return c.run.own(target)
	})
	if err != nil {
		return fmt.Errorf("testcluster: copy %s to %s: %w", src, dst, err)
	}
	return nil
}

// copyFile copies the regular file src to the new file dst, as much of it
// as there is when it is read.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
