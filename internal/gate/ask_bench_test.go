package gate

import (
	"fmt"
	"net/http"
	"runtime"
	"sort"
	"testing"
	"time"
)

// BenchmarkHold1000 holds 1,000 requests at once (one connection each) in a gate with a real
// hub on loopback, reports the goroutines and heap per held request (client side included: the
// clients run in this process), then approves the tickets one by one and reports the time from
// each approval to its request's answer.
func BenchmarkHold1000(b *testing.B) {
	const n = 1000
	for it := 0; it < b.N; it++ {
		tg, h, _, _, _, stop := askGate(b, "120s")
		runtime.GC()
		var m0 runtime.MemStats
		runtime.ReadMemStats(&m0)
		g0 := runtime.NumGoroutine()
		tr := &http.Transport{Proxy: tg.client().Transport.(*http.Transport).Proxy, MaxConnsPerHost: 0, MaxIdleConnsPerHost: n}
		c := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
		done := make(map[string]chan time.Time, n)
		ids := make(chan string, n)
		for i := 0; i < n; i++ {
			path := fmt.Sprintf("/held/%d", i)
			ch := make(chan time.Time, 1)
			done[path] = ch
			go func() {
				req, _ := http.NewRequest("DELETE", tg.url(path), nil)
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				ch <- time.Now()
			}()
		}
		deadline := time.Now().Add(2 * time.Minute)
		for len(h.Pending()) < n {
			if time.Now().After(deadline) {
				answered := 0
				for _, ch := range done {
					if len(ch) > 0 {
						answered++
					}
				}
				b.Fatalf("only %d tickets (%d requests already answered)", len(h.Pending()), answered)
			}
			time.Sleep(50 * time.Millisecond)
		}
		runtime.GC()
		var m1 runtime.MemStats
		runtime.ReadMemStats(&m1)
		g1 := runtime.NumGoroutine()
		b.ReportMetric(float64(g1-g0)/n, "goroutines/held")
		b.ReportMetric(float64(m1.HeapInuse-m0.HeapInuse)/n, "heap-B/held")
		close(ids)
		var lat []time.Duration
		for _, t := range h.Pending() {
			path := t.URL[len(t.URL)-len("/held/")-3:]
			for p := range done {
				if len(t.URL) >= len(p) && t.URL[len(t.URL)-len(p):] == p {
					path = p
				}
			}
			start := time.Now()
			if _, err := h.Decide(t.ID, t.Fingerprint, true, "terminal:bench", ""); err != nil {
				b.Fatal(err)
			}
			end := <-done[path]
			lat = append(lat, end.Sub(start))
		}
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "release-p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "release-p99-µs")
		stop()
	}
}
