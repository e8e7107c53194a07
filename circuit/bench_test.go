package circuit

import (
	"math"
	"testing"
)

// The routing hot path: one Allow per read.
func BenchmarkAllow(b *testing.B) {
	br, _ := New("db2", Config{})
	b.ReportAllocs()
	var n int
	for b.Loop() {
		if br.Allow() {
			n++
		}
	}
	_ = n
}

func BenchmarkState(b *testing.B) {
	br, _ := New("db2", Config{})
	b.ReportAllocs()
	var n int
	for b.Loop() {
		if br.State() == Open {
			n++
		}
	}
	_ = n
}

// Many readers at once.
func BenchmarkAllowParallel(b *testing.B) {
	br, _ := New("db2", Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var n int
		for pb.Next() {
			if br.Allow() {
				n++
			}
		}
		_ = n
	})
}

// Many readers while a reporter keeps opening and closing the circuit, the
// worst case for the readers' cache line.
func BenchmarkAllowParallelWhileFlapping(b *testing.B) {
	br, _ := New("db2", Config{Failures: 1})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			br.ReportFailure()
			br.ReportProbe(nil)
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var n int
		for pb.Next() {
			if br.Allow() {
				n++
			}
		}
		_ = n
	})
	b.StopTimer()
	close(stop)
	<-done
}

// A data-path success on a healthy endpoint, reported after every read.
func BenchmarkReportSuccess(b *testing.B) {
	br, _ := New("db2", Config{})
	b.ReportAllocs()
	for b.Loop() {
		br.ReportSuccess()
	}
}

func BenchmarkReportSuccessParallel(b *testing.B) {
	br, _ := New("db2", Config{})
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			br.ReportSuccess()
		}
	})
}

// A counted data-path failure (the circuit never reaches its threshold).
func BenchmarkReportFailure(b *testing.B) {
	br, _ := New("db2", Config{Failures: math.MaxInt})
	b.ReportAllocs()
	for b.Loop() {
		br.ReportFailure()
	}
}

// A failed probe of an open circuit: doubling and capping the backoff.
func BenchmarkReportProbeFailureOpen(b *testing.B) {
	br, _ := New("db2", Config{Failures: 1, Jitter: 0.2})
	br.ReportFailure()
	b.ReportAllocs()
	for b.Loop() {
		br.ReportProbe(errProbe)
	}
}
