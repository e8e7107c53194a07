//go:build !unix

package main

import (
	"context"
	"fmt"
	"io"
)

// demoCmd and clusterCmd run PostgreSQL servers as child processes of
// their own (package testcluster: process groups, signals, another user
// id), which only a unix system has: elsewhere they say so. topology and
// explain work everywhere.
func demoCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return unixOnly("demo", stderr)
}

func clusterCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return unixOnly("cluster", stderr)
}

func unixOnly(cmd string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "pgrouted %s runs a local PostgreSQL cluster, which needs a unix system (Linux, macOS, a BSD); topology and explain work here\n", cmd)
	return exitFailure
}
