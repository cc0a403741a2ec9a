package stack

import (
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/lockhttp/lockhttp/internal/signerapi"
)

// The processes' metrics listeners, from Options.MetricsListen HOST:PORT: the gate listens on
// PORT, the console on PORT+1 and the signer on PORT+2; with port 0 each takes a free port at
// the first start and keeps it when lox restarts it (keptMetricsArgs), so that a scrape
// configuration written from up.json stays right. up.json's "metrics" names each URL either way.
var metricsOffset = map[string]int{"gate": 0, "console": 1, "signer": 2}

// metricsArgs is the -metrics-listen flag of process for listen ("": none).
func metricsArgs(listen, process string) ([]string, error) {
	if listen == "" {
		return nil, nil
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen %q: write it as host:port, such as 127.0.0.1:9464 (the gate takes that port, the console the next, the signer the one after)", listen)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535-2 {
		return nil, fmt.Errorf("--metrics-listen %q: the port must be a number from 0 to 65533", listen)
	}
	if p != 0 {
		p += metricsOffset[process]
	}
	return []string{"-metrics-listen", net.JoinHostPort(host, strconv.Itoa(p))}, nil
}

// keptMetricsArgs is the -metrics-listen flag of a restart of a process whose first start
// serves its metrics at url: listen's host with the port it took. Nil when url names no port
// (the flag stays as it was).
func keptMetricsArgs(listen, rawURL string) []string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil
	}
	u, err := url.Parse(rawURL)
	if err != nil || u.Port() == "" || u.Port() == "0" {
		return nil
	}
	return []string{"-metrics-listen", net.JoinHostPort(host, u.Port())}
}

// signerMetrics is the URL the signer serves its metrics at, from its /health.
func signerMetrics(socket string) string {
	var h signerapi.Health
	if getJSON(socket, "/health", &h) != nil {
		return ""
	}
	return h.Metrics
}
