package audit

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkWriteParallel measures Write from many goroutines, as the gate calls it: wall time
// per record (ns/op), process CPU per record (cpu-ns/op, the gate's budget is ~40-50 µs per
// request in all) and how many records each write+fsync carried (records/fsync; records/write
// without fsync).
func BenchmarkWriteParallel(b *testing.B) {
	for _, bc := range []struct {
		name        string
		noSync      bool
		parallelism int  // goroutines per GOMAXPROCS
		signed      bool // with an audit key: each batch signed, a signed head after it
	}{
		{"fsync/conc=1x", false, 1, false},
		{"fsync/conc=8x", false, 8, false},
		{"fsync/conc=64x", false, 64, false},
		{"nosync/conc=1x", true, 1, false},
		{"nosync/conc=64x", true, 64, false},
		{"signed/fsync/conc=1x", false, 1, true},
		{"signed/fsync/conc=64x", false, 64, true},
		{"signed/nosync/conc=1x", true, 1, true},
		{"signed/nosync/conc=64x", true, 64, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			o := Options{Dir: b.TempDir(), NoSync: bc.noSync}
			if bc.signed {
				o.KeyFile, o.CreateKey = filepath.Join(o.Dir, KeyFileName), true
			}
			w, err := Open(o)
			if err != nil {
				b.Fatal(err)
			}
			r := Record{
				Event: "request", ID: "01JDXQ3Z5K8M2N4P6R8T0V2X4Z", Container: "agent-1", Agent: "claude",
				Method: "GET", URL: "https://api.github.com/repos/lockhttp/lockhttp/issues?per_page=100",
				Verdict: "FREE", Rule: "reads", Reason: "read of a trusted host", Policy: "9f86d081884c7d65",
				Status: 200, BytesOut: 48213, Duration: 182 * time.Millisecond,
			}
			b.ReportAllocs()
			b.SetParallelism(bc.parallelism)
			cpu0 := cpuTime(b)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				rec := r
				for pb.Next() {
					rec.Time = time.Now()
					if err := w.Write(ctx, &rec); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			cpu := cpuTime(b) - cpu0
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			if w.batches > 0 {
				unit := "records/fsync"
				if bc.noSync {
					unit = "records/write"
				}
				b.ReportMetric(float64(w.records)/float64(w.batches), unit)
			}
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkAppendParallel is what the gate pays per forwarded request: the record written
// before the answer's last byte, its fsync shared and later.
func BenchmarkAppendParallel(b *testing.B) {
	for _, parallelism := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("conc=%dx", parallelism), func(b *testing.B) {
			w, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			r := Record{
				Event: "request", ID: "01JDXQ3Z5K8M2N4P6R8T0V2X4Z", Container: "agent-1", Agent: "claude",
				Method: "GET", URL: "https://api.github.com/repos/lockhttp/lockhttp/issues?per_page=100",
				Verdict: "FREE", Rule: "reads", Status: 200, BytesOut: 48213, Duration: 182 * time.Millisecond,
			}
			b.ReportAllocs()
			b.SetParallelism(parallelism)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				rec := r
				for pb.Next() {
					rec.Time = time.Now()
					if err := w.Append(ctx, &rec); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
			if w.batches > 0 {
				b.ReportMetric(float64(w.records)/float64(w.batches), "records/write")
			}
		})
	}
}
