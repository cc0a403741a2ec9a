package stack

import (
	"strings"
	"testing"
)

// TestMetricsArgs: HOST:PORT gives the gate PORT, the console PORT+1 and the signer PORT+2; port
// 0 gives each a free port; a bad address is refused with the form to write.
func TestMetricsArgs(t *testing.T) {
	cases := []struct {
		listen, process, want, err string
	}{
		{"", "gate", "", ""},
		{"127.0.0.1:9464", "gate", "-metrics-listen 127.0.0.1:9464", ""},
		{"127.0.0.1:9464", "console", "-metrics-listen 127.0.0.1:9465", ""},
		{"127.0.0.1:9464", "signer", "-metrics-listen 127.0.0.1:9466", ""},
		{"127.0.0.1:0", "signer", "-metrics-listen 127.0.0.1:0", ""},
		{"[::1]:9000", "console", "-metrics-listen [::1]:9001", ""},
		{"9464", "gate", "", "write it as host:port"},
		{"127.0.0.1:65535", "gate", "", "from 0 to 65533"},
		{"127.0.0.1:http", "gate", "", "from 0 to 65533"},
	}
	for _, c := range cases {
		t.Run(c.listen+"/"+c.process, func(t *testing.T) {
			got, err := metricsArgs(c.listen, c.process)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || strings.Join(got, " ") != c.want {
				t.Fatalf("%q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestKeptMetricsArgs: a restart listens on the host lox was given and the port the first start
// took, so that the scrape address stays; a URL without a port leaves the flag as it was.
func TestKeptMetricsArgs(t *testing.T) {
	cases := []struct{ listen, url, want string }{
		{"127.0.0.1:0", "http://127.0.0.1:41234/metrics", "-metrics-listen 127.0.0.1:41234"},
		{"0.0.0.0:0", "http://127.0.0.1:41234/metrics", "-metrics-listen 0.0.0.0:41234"}, // the URL reads 0.0.0.0 as loopback
		{"[::1]:0", "http://[::1]:9001/metrics", "-metrics-listen [::1]:9001"},
		{"127.0.0.1:9464", "http://127.0.0.1:9465/metrics", "-metrics-listen 127.0.0.1:9465"},
		{"127.0.0.1:0", "", ""},
		{"127.0.0.1:0", "http://127.0.0.1/metrics", ""},
	}
	for _, c := range cases {
		t.Run(c.listen+" "+c.url, func(t *testing.T) {
			if got := strings.Join(keptMetricsArgs(c.listen, c.url), " "); got != c.want {
				t.Fatalf("%q, want %q", got, c.want)
			}
		})
	}
}
