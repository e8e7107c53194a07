// Package bench compares pgrouted with the alternatives a Go team would
// weigh (pgx's database/sql driver alone, GORM with its dbresolver plugin,
// a time-based pin of reads to the primary after a write) on a real
// PostgreSQL primary with two streaming replicas from testcluster.
//
// It is its own module, so that GORM and dbresolver stay out of the
// library's go.mod. The Go benchmarks (overhead_test.go) are reported with
// benchstat; the workloads (package workload, run by ./cmd/workload) write
// one Markdown table each. `make bench` at the repository root runs both
// and writes RESULTS.md; see run.sh.
package bench
