// Command tlsload drives HTTPS requests through a proxy (CONNECT, then TLS to the gate's
// certificate) for the benchmarks: new connections or keep-alive, several workers, a duration.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	proxy := flag.String("proxy", "", "proxy URL (empty: direct)")
	caFile := flag.String("ca", "", "PEM roots the client trusts")
	target := flag.String("url", "", "URL to GET; %d in it is replaced by a counter (distinct hosts)")
	workers := flag.Int("c", 8, "concurrent workers")
	dur := flag.Duration("d", 10*time.Second, "duration")
	newConn := flag.Bool("new", false, "a new connection for every request")
	serverName := flag.String("sni", "", "TLS server name override (direct runs)")
	rate := flag.Float64("rate", 0, "at most this many requests a second in all (0: as fast as possible)")
	flag.Parse()
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: *serverName},
		DisableKeepAlives: *newConn, MaxIdleConnsPerHost: *workers}
	if *proxy != "" {
		u, _ := url.Parse(*proxy)
		tr.Proxy = http.ProxyURL(u)
	}
	c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var ok, bad, n atomic.Int64
	deadline := time.Now().Add(*dur)
	var tick <-chan time.Time
	if *rate > 0 {
		t := time.NewTicker(time.Duration(float64(time.Second) / *rate))
		defer t.Stop()
		tick = t.C
	}
	var wg sync.WaitGroup
	for w := 0; w < *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if tick != nil {
					<-tick
				}
				u := *target
				if containsVerb(u) {
					u = fmt.Sprintf(u, n.Add(1))
				}
				resp, err := c.Get(u)
				if err != nil {
					bad.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				} else {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%d %d %.1f\n", ok.Load(), bad.Load(), float64(ok.Load())/dur.Seconds())
}

func containsVerb(s string) bool {
	for i := 0; i+1 < len(s); i++ {
		if s[i] == '%' && s[i+1] == 'd' {
			return true
		}
	}
	return false
}
