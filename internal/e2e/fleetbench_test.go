package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

// BenchmarkPolicyFanOut: N gate processes, each with its own certificate, poll the console over
// mutual TLS (every 2 s, the default); each iteration changes the policy file and waits until
// the console has seen every gate fetch the new version. Reported: the time from the console
// serving a version to the last gate fetching it (max-ms), the median gate's (p50-ms), and, with
// the gates idle (every poll a 304), the console's CPU and resident memory, and a gate's.
//
//	go test -run '^$' -bench PolicyFanOut -benchtime 5x ./internal/e2e/
func BenchmarkPolicyFanOut(b *testing.B) {
	for _, n := range []int{3, 10, 25} {
		b.Run(fmt.Sprintf("gates=%d", n), func(b *testing.B) { benchFanOut(b, n) })
	}
}

func benchFanOut(b *testing.B, n int) {
	o := httptest.NewServer(&originRecorder{})
	b.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	policy := fmt.Sprintf(askPolicy, port, "30s")
	r := startTLSFleet(b, policy)
	for i := range n {
		name := fmt.Sprintf("g%02d", i)
		r.issue("gate", name)
		r.gate(name)
	}
	all := func(version string) bool {
		st, err := r.consoleStatus()
		if err != nil || len(st.Gates) != n {
			return false
		}
		for _, g := range st.Gates {
			if g.Version != version {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(b, time.Minute, "every gate's first policy", func() bool { return all(r.mustStatus().Version) })

	// Idle: every gate polls, every poll a 304.
	cpu0, at0 := procCPU(b, r.console.cmd.Process.Pid), time.Now()
	time.Sleep(10 * time.Second)
	cpu := (procCPU(b, r.console.cmd.Process.Pid) - cpu0).Seconds() / time.Since(at0).Seconds()
	consoleRSS, gateRSS := procRSS(b, r.console.cmd.Process.Pid), procRSS(b, r.gates[0].p.cmd.Process.Pid)

	var fans []time.Duration
	var maxes []time.Duration
	b.ResetTimer()
	var denied []string // each round denies one host more: a tightening, served without review
	for i := range b.N {
		// A change comes at any point of the gates' polls.
		time.Sleep(time.Duration(rand.Int64N(int64(gatePoll))))
		denied = append(denied, fmt.Sprintf("%q", fmt.Sprintf("round-%d.example", i)))
		text := strings.Replace(policy, "version = 1\n", "version = 1\ndeny = ["+strings.Join(denied, ", ")+"]\n", 1)
		prev := r.mustStatus().Version
		if err := os.WriteFile(r.policy, []byte(text), 0o600); err != nil {
			b.Fatal(err)
		}
		var version string
		testkit.WaitFor(b, 10*time.Second, "the new policy served", func() bool {
			version = r.mustStatus().Version
			return version != prev
		})
		testkit.WaitFor(b, time.Minute, "every gate to fetch it", func() bool { return all(version) })
		st := r.mustStatus()
		var worst time.Duration
		for _, g := range st.Gates {
			d := g.Since.Sub(st.LoadedAt)
			fans = append(fans, d)
			worst = max(worst, d)
		}
		maxes = append(maxes, worst)
	}
	b.StopTimer()
	slices.Sort(fans)
	b.ReportMetric(float64(fans[len(fans)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(slices.Max(maxes).Milliseconds()), "max-ms")
	b.ReportMetric(cpu*100, "console-cpu-%")
	b.ReportMetric(float64(consoleRSS)/(1<<20), "console-rss-MiB")
	b.ReportMetric(float64(gateRSS)/(1<<20), "gate-rss-MiB")
}

// procCPU is a process's user and system time so far.
func procCPU(tb testing.TB, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ
}

// procRSS is a process's resident memory in bytes.
func procRSS(tb testing.TB, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
