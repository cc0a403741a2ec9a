// Command soak holds many agent connections open through a whole lox run stack for a long time
// and samples the gate's memory and goroutines, to show that they stay flat: keep-alive HTTPS
// through the decrypting gate to a local origin, with a share of the connections held on ASKs
// that nobody answers (each retried as it comes back E_PENDING).
//
//	CGO_ENABLED=0 go build -o BIN/ ./cmd/... && go -C bench run ./soak -bin "$PWD/BIN" [-conns 1000] [-d 10m]
//
// (bench/ is a module of its own: -C bench runs it from there, so BIN is given whole.)
//
// It prints one tab-separated line per sample and a summary; bench/RESULTS.md keeps the figures.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const host = "soak.test"

func main() {
	bin := flag.String("bin", "bin", "the directory with the built lox, gate, console and signer")
	conns := flag.Int("conns", 1000, "agent connections, each one keep-alive tunnel")
	askShare := flag.Float64("ask-share", 0.04, "share of the connections that send a request that asks (held, never answered)")
	sources := flag.Int("sources", 8, "source addresses the connections come from (127.0.0.2 on), as containers would")
	dur := flag.Duration("d", 10*time.Minute, "how long to run")
	every := flag.Duration("sample", 10*time.Second, "how often to sample")
	pace := flag.Duration("pace", time.Second, "each connection's pause between requests")
	flag.Parse()
	if err := run(*bin, *conns, *askShare, *sources, *dur, *every, *pace); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run(bin string, conns int, askShare float64, sources int, dur, every, pace time.Duration) error {
	work, err := os.MkdirTemp("", "lockhttp-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	origin, originCA, err := startOrigin(work)
	if err != nil {
		return err
	}
	defer origin.Close()
	port := origin.Addr().(*net.TCPAddr).Port
	pol := fmt.Sprintf(`version = 1
trusted = [%[1]q]

[[rule]]
name = "uploads-ask"
hosts = [%[1]q]
methods = ["POST"]
verdict = "ask"

[floor]
allow_cidrs = ["127.0.0.1/32"]
allow_ports = [%[2]d]

[floor.hosts]
%[1]q = "127.0.0.1"

[sources]
local = ["127.0.0.0/8"]

[settings]
hold = "20s"
max_pending = 1000
`, host, port)
	polPath := filepath.Join(work, "policy.toml")
	if err := os.WriteFile(polPath, []byte(pol), 0o600); err != nil {
		return err
	}
	state := filepath.Join(work, "state")
	lox := exec.Command(filepath.Join(bin, "lox"), "run", "--headless", "--state", state, "--policy", polPath,
		"--listen", "127.0.0.1:0", "--hub-listen", "127.0.0.1:0", "--roots", originCA)
	lox.Stdout, lox.Stderr = io.Discard, io.Discard
	if err := lox.Start(); err != nil {
		return err
	}
	defer func() { lox.Process.Signal(os.Interrupt); lox.Wait() }()
	up, err := waitUp(state, 60*time.Second)
	if err != nil {
		return err
	}
	gateURL, _ := url.Parse(up.Gate)
	roots := x509.NewCertPool()
	for _, f := range []string{originCA, up.CACert} {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		roots.AppendCertsFromPEM(data)
	}
	admin := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", up.GateSocket)
	}}, Timeout: 5 * time.Second}

	var stats stats
	ctx, cancel := context.WithTimeout(context.Background(), dur)
	defer cancel()
	asks := int(float64(conns) * askShare)
	var wg sync.WaitGroup
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			worker(ctx, &stats, i, i < asks, gateURL, roots, port, sources, pace)
		}(i)
	}
	fmt.Printf("# %d connections (%d held on ASKs) from %d sources for %s; gate pid %d\n", conns, asks, sources, dur, up.PIDs["gate"])
	fmt.Println("elapsed_s\trequests\terrors\trss_gate_mib\trss_stack_mib\tgoroutines\ttunnels")
	start := time.Now()
	var rows [][3]float64
	t := time.NewTicker(every)
	defer t.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
		}
		st := gateStatus(admin)
		gate := rssMiB(up.PIDs["gate"])
		stack := 0.0
		for _, pid := range up.PIDs {
			stack += rssMiB(pid)
		}
		fmt.Printf("%.0f\t%d\t%d\t%.1f\t%.1f\t%d\t%d\n", time.Since(start).Seconds(), stats.ok.Load(), stats.errs.Load(), gate, stack, st.Goroutines, st.Tunnels)
		rows = append(rows, [3]float64{gate, stack, float64(st.Goroutines)})
	}
	// Each process at the end, while the connections are still open.
	fmt.Printf("# last sample per process, MiB:")
	for _, name := range []string{"gate", "console", "signer", "lox"} {
		if pid, ok := up.PIDs[name]; ok {
			fmt.Printf(" %s %s;", name, rssParts(pid))
		}
	}
	fmt.Println()
	cancel()
	wg.Wait()
	summarize(rows, &stats, dur)
	return nil
}

type stats struct {
	ok, errs, pending atomic.Int64
	mu                sync.Mutex
	lat               []time.Duration // guarded by mu: a sample of the FREE requests' latencies
}

// worker is one agent connection: GET after GET on one keep-alive tunnel, or (ask) a POST that
// waits on its ticket, again and again.
func worker(ctx context.Context, s *stats, i int, ask bool, gate *url.URL, roots *x509.CertPool, port, sources int, pace time.Duration) {
	src := net.IPv4(127, 0, 0, byte(2+i%sources))
	tr := &http.Transport{Proxy: http.ProxyURL(gate), TLSClientConfig: &tls.Config{RootCAs: roots}, MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: src}}).DialContext}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	target := fmt.Sprintf("https://%s:%d/", host, port)
	for n := 0; ctx.Err() == nil; n++ {
		t0 := time.Now()
		var resp *http.Response
		var err error
		if ask {
			req, _ := http.NewRequestWithContext(ctx, "POST", target+"upload/"+strconv.Itoa(i), strings.NewReader("held"))
			resp, err = c.Do(req)
		} else {
			req, _ := http.NewRequestWithContext(ctx, "GET", target, nil)
			resp, err = c.Do(req)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.errs.Add(1)
			}
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case ask && resp.Header.Get("X-Lockhttp-Code") == "E_PENDING":
			s.pending.Add(1)
		case !ask && resp.StatusCode == 200:
			s.ok.Add(1)
			if n%10 == 0 {
				s.mu.Lock()
				s.lat = append(s.lat, time.Since(t0))
				s.mu.Unlock()
			}
		default:
			s.errs.Add(1)
		}
		if !ask {
			select {
			case <-ctx.Done():
			case <-time.After(pace):
			}
		}
	}
}

func summarize(rows [][3]float64, s *stats, dur time.Duration) {
	if len(rows) == 0 {
		return
	}
	first, last := rows[0], rows[len(rows)-1]
	var peak [3]float64
	for _, r := range rows {
		for k := range peak {
			peak[k] = max(peak[k], r[k])
		}
	}
	s.mu.Lock()
	lat := append([]time.Duration(nil), s.lat...)
	s.mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	p := func(q float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(q*float64(len(lat)-1))]
	}
	fmt.Printf("# summary: %d FREE requests (%.0f/s), %d E_PENDING answers, %d errors; p50 %s p99 %s\n",
		s.ok.Load(), float64(s.ok.Load())/dur.Seconds(), s.pending.Load(), s.errs.Load(), p(0.5).Round(time.Millisecond), p(0.99).Round(time.Millisecond))
	fmt.Printf("# gate RSS MiB first %.1f last %.1f peak %.1f; stack RSS MiB first %.1f last %.1f peak %.1f; goroutines first %.0f last %.0f peak %.0f\n",
		first[0], last[0], peak[0], first[1], last[1], peak[1], first[2], last[2], peak[2])
}

type gateState struct {
	Goroutines int `json:"goroutines"`
	Tunnels    int `json:"tunnels"`
}

func gateStatus(c *http.Client) gateState {
	var st gateState
	resp, err := c.Get("http://gate/status")
	if err != nil {
		return st
	}
	defer resp.Body.Close()
	json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&st)
	return st
}

// rssParts is a process's VmRSS, and of it the anonymous memory and the mapped files.
func rssParts(pid int) string {
	return fmt.Sprintf("%.1f (anon %.1f, file %.1f)", statusMiB(pid, "VmRSS:"), statusMiB(pid, "RssAnon:"), statusMiB(pid, "RssFile:"))
}

func rssMiB(pid int) float64 { return statusMiB(pid, "VmRSS:") }

// statusMiB is the field key (in kB) of /proc/pid/status, in MiB.
func statusMiB(pid int, key string) float64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			kb, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return float64(kb) / 1024
		}
	}
	return 0
}

type upFile struct {
	Gate       string         `json:"gate"`
	GateSocket string         `json:"gate_socket"`
	CACert     string         `json:"ca_cert"`
	PIDs       map[string]int `json:"pids"`
}

func waitUp(state string, limit time.Duration) (*upFile, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(filepath.Join(state, "up.json")); err == nil {
			var up upFile
			if json.Unmarshal(data, &up) == nil && up.Gate != "" {
				return &up, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("no up.json in %s after %s: see %s/logs", state, limit, state)
}

// startOrigin serves GET / (1 KiB) over HTTPS on loopback with a certificate for host from a CA
// of its own, written to dir/origin-ca.pem.
func startOrigin(dir string) (net.Listener, string, error) {
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "soak origin CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, "", err
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		return nil, "", err
	}
	caPath := filepath.Join(dir, "origin-ca.pem")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		return nil, "", err
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}})
	if err != nil {
		return nil, "", err
	}
	body := strings.Repeat("s", 1024)
	go http.Serve(l, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, body)
	}))
	return l, caPath, nil
}
