package metrics

import (
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// The Go runtime's families, read from runtime/metrics at each scrape: it does not stop the
// world, as runtime.ReadMemStats does. Their names, help and types are those of the Prometheus
// Go client's collector, so that dashboards and alerts written for it read them.
var (
	goGoroutines   = newDesc("go_goroutines", "Number of goroutines that currently exist.", Gauge)
	goThreads      = newDesc("go_threads", "Number of OS threads the Go runtime owns.", Gauge)
	goInfo         = newDesc("go_info", "Information about the Go environment.", Gauge, "version")
	goGCDuration   = newDesc("go_gc_duration_seconds", "A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.", Summary)
	goGOGC         = newDesc("go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", Gauge)
	goMemLimit     = newDesc("go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", Gauge)
	goHeapAlloc    = newDesc("go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, equals to /memory/classes/heap/objects:bytes.", Gauge)
	goHeapInuse    = newDesc("go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use, equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes.", Gauge)
	goHeapIdle     = newDesc("go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used, equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", Gauge)
	goHeapReleased = newDesc("go_memstats_heap_released_bytes", "Number of heap bytes released to OS, equals to /memory/classes/heap/released:bytes.", Gauge)
	goHeapSys      = newDesc("go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system, equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", Gauge)
	goStackInuse   = newDesc("go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator, equals to /memory/classes/heap/stacks:bytes.", Gauge)
	goSys          = newDesc("go_memstats_sys_bytes", "Number of bytes obtained from system, equals to /memory/classes/total:bytes.", Gauge)
	goNextGC       = newDesc("go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place, equals to /gc/heap/goal:bytes.", Gauge)
	goAlloc        = newDesc("go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", Gauge)
	goAllocTotal   = newDesc("go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", Counter)
	goHeapObjects  = newDesc("go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", Gauge)
	goMallocs      = newDesc("go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", Counter)
	goFrees        = newDesc("go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", Counter)
	goStackSys     = newDesc("go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", Gauge)
	goMaxProcs     = newDesc("go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", Gauge)
)

// The runtime/metrics samples the Go families read, in this order.
var goSamples = []string{
	"/sched/goroutines:goroutines",
	"/sched/threads/total:threads",
	"/gc/gogc:percent",
	"/gc/gomemlimit:bytes",
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/heap/free:bytes",
	"/memory/classes/heap/released:bytes",
	"/memory/classes/heap/stacks:bytes",
	"/memory/classes/total:bytes",
	"/gc/heap/goal:bytes",
	"/gc/heap/allocs:bytes",
	"/gc/heap/objects:objects",
	"/gc/heap/allocs:objects",
	"/gc/heap/tiny/allocs:objects",
	"/gc/heap/frees:objects",
	"/memory/classes/os-stacks:bytes",
	"/sched/gomaxprocs:threads",
}

// registerRuntime registers the go_* and process_* families in r.
func registerRuntime(r *Registry) {
	descs := []desc{goGoroutines, goThreads, goInfo, goGCDuration, goGOGC, goMemLimit, goHeapAlloc, goHeapInuse, goHeapIdle,
		goHeapReleased, goHeapSys, goStackInuse, goSys, goNextGC, goAlloc, goAllocTotal, goHeapObjects, goMallocs, goFrees, goStackSys,
		goMaxProcs}
	var names []string
	for _, d := range descs {
		names = append(names, d.name)
	}
	r.register(names, collectFunc(collectGo))
	r.register(processNames, collectFunc(collectProcess))
}

// gcQuantiles are go_gc_duration_seconds' quantiles.
var gcQuantiles = []float64{0, 0.25, 0.5, 0.75, 1}

func collectGo(out []Family) []Family {
	samples := make([]rtmetrics.Sample, len(goSamples))
	for i, n := range goSamples {
		samples[i].Name = n
	}
	rtmetrics.Read(samples)
	v := func(i int) float64 {
		switch s := samples[i].Value; s.Kind() {
		case rtmetrics.KindUint64:
			return float64(s.Uint64())
		case rtmetrics.KindFloat64:
			return s.Float64()
		}
		return 0 // a sample this runtime does not have
	}
	one := func(d desc, x float64) {
		f := d.family(1)
		f.Series = append(f.Series, Series{Value: x})
		out = append(out, f)
	}
	objects, unused, free, released := v(4), v(5), v(6), v(7)
	one(goGoroutines, v(0))
	one(goThreads, v(1))
	one(goGOGC, v(2))
	one(goMemLimit, v(3))
	one(goHeapAlloc, objects)
	one(goHeapInuse, objects+unused)
	one(goHeapIdle, free+released)
	one(goHeapReleased, released)
	one(goHeapSys, objects+unused+free+released)
	one(goStackInuse, v(8))
	one(goSys, v(9))
	one(goNextGC, v(10))
	one(goAlloc, objects)
	one(goAllocTotal, v(11))
	one(goHeapObjects, v(12))
	tiny := v(14)
	one(goMallocs, v(13)+tiny)
	one(goFrees, v(15)+tiny)
	one(goStackSys, v(8)+v(16))
	one(goMaxProcs, v(17))

	info := goInfo.family(1)
	info.Series = append(info.Series, Series{Labels: goInfo.labelsOf([]string{runtime.Version()}), Value: 1})
	out = append(out, info)

	// The GC's pauses: the last 256 at most, read under the heap's lock, without stopping the
	// world.
	var st debug.GCStats
	st.PauseQuantiles = make([]time.Duration, len(gcQuantiles))
	debug.ReadGCStats(&st)
	gc := goGCDuration.family(1)
	s := Series{Count: uint64(st.NumGC), Sum: st.PauseTotal.Seconds(), Buckets: make([]Bucket, len(gcQuantiles))}
	for i, q := range gcQuantiles {
		s.Buckets[i] = Bucket{Bound: q, Value: st.PauseQuantiles[i].Seconds()}
	}
	gc.Series = append(gc.Series, s)
	return append(out, gc)
}
