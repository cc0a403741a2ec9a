package metrics

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// The process's families, read from /proc/self at each scrape (Linux).
var (
	procCPU     = newDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", Counter)
	procOpenFDs = newDesc("process_open_fds", "Number of open file descriptors.", Gauge)
	procMaxFDs  = newDesc("process_max_fds", "Maximum number of open file descriptors.", Gauge)
	procVirtual = newDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.", Gauge)
	procVirtMax = newDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", Gauge)
	procRSS     = newDesc("process_resident_memory_bytes", "Resident memory size in bytes.", Gauge)
	procStart   = newDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", Gauge)
)

var processNames = []string{procCPU.name, procOpenFDs.name, procMaxFDs.name, procVirtual.name, procVirtMax.name, procRSS.name, procStart.name}

// userHZ is the kernel's clock tick for /proc's times (USER_HZ, 100 on every Linux Go runs on).
const userHZ = 100

// bootTime is /proc/stat's btime, read once.
var bootTime = sync.OnceValue(func() float64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1
	}
	for _, line := range bytes.Split(data, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			if v, err := strconv.ParseFloat(string(bytes.TrimSpace(rest)), 64); err == nil {
				return v
			}
		}
	}
	return -1
})

// collectProcess adds the families it can read; one it cannot is left out, not an error.
func collectProcess(out []Family) []Family {
	one := func(d desc, x float64) {
		f := d.family(1)
		f.Series = append(f.Series, Series{Value: x})
		out = append(out, f)
	}
	if st, ok := readStat(); ok {
		one(procCPU, float64(st.utime+st.stime)/userHZ)
		one(procVirtual, float64(st.vsize))
		one(procRSS, float64(st.rss*int64(os.Getpagesize())))
		if bt := bootTime(); bt >= 0 {
			one(procStart, bt+float64(st.starttime)/userHZ)
		}
	}
	if n, ok := openFDs(); ok {
		one(procOpenFDs, float64(n))
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		one(procMaxFDs, float64(lim.Cur))
	}
	if syscall.Getrlimit(syscall.RLIMIT_AS, &lim) == nil {
		one(procVirtMax, float64(lim.Cur)) // RLIM_INFINITY as the client writes it: 2^64-1
	}
	return out
}

type procStat struct {
	utime, stime, starttime uint64
	vsize                   uint64
	rss                     int64
}

// readStat reads /proc/self/stat: after the command's name in parentheses, field 3 (state) on;
// utime is field 14, stime 15, starttime 22, vsize 23, rss 24 (proc(5)).
func readStat() (procStat, bool) {
	data, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 22 {
		return procStat{}, false
	}
	field := func(n int) uint64 {
		v, _ := strconv.ParseUint(string(f[n-3]), 10, 64)
		return v
	}
	rss, _ := strconv.ParseInt(string(f[24-3]), 10, 64)
	return procStat{utime: field(14), stime: field(15), starttime: field(22), vsize: field(23), rss: rss}, true
}

// openFDs counts /proc/self/fd's entries (the directory's own descriptor among them, as the
// Prometheus client counts it).
func openFDs() (int, bool) {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return 0, false
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(256)
		n += len(names)
		if err != nil || len(names) == 0 {
			return n, true
		}
	}
}
