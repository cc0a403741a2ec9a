// Command agent is the compose end-to-end test's agent: it tries what an agent would, through the
// proxy and around it, and prints what happened.
//
//	agent sleep                 stay up
//	agent get URL               GET through HTTP(S)_PROXY, trusting SSL_CERT_FILE
//	agent post URL BODY         POST through the proxy
//	agent delete URL            DELETE through the proxy
//	agent key URL               GET through the proxy with x-api-key: $ANTHROPIC_API_KEY
//	agent tcp HOST:PORT         a direct TCP connection
//	agent dns NAME              a DNS lookup
//	agent noproxy URL [METHOD [BODY]]  a request that ignores the proxy variables (GET by
//	                            default): its name resolved by the container's resolver
//	agent listen PORT           serve TCP on PORT (another agent tries to reach it)
//	agent spoof ADDR HOST:PORT  try to send as ADDR, another container's address: a raw socket,
//	                            then a connection from ADDR bound with IP_FREEBIND
//	agent metrics URL [PREFIX]... a Prometheus scrape, ignoring the proxy variables: the status,
//	                            how many lockhttp families, and the lockhttp_build_info line;
//	                            then the page's lines that start with a PREFIX ("": all)
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Println("usage: agent sleep|get|post|delete|key|tcp|dns|noproxy|metrics ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "sleep":
		// Block until stopped (an empty select with nothing else running would be a deadlock).
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
		<-ch
	case "get", "post", "delete":
		request(strings.ToUpper(os.Args[1]), os.Args[2], strings.Join(os.Args[3:], " "), "", true)
	case "key":
		request("GET", os.Args[2], "", os.Getenv("ANTHROPIC_API_KEY"), true)
	case "noproxy":
		method, body := "GET", ""
		if len(os.Args) > 3 {
			method, body = os.Args[3], strings.Join(os.Args[4:], " ")
		}
		request(method, os.Args[2], body, "", false)
	case "metrics":
		scrape(os.Args[2], os.Args[3:])
	case "tcp":
		c, err := net.DialTimeout("tcp", os.Args[2], 3*time.Second)
		if err != nil {
			fmt.Println("failed:", err)
			return
		}
		c.Close()
		fmt.Println("connected")
	case "listen":
		l, err := net.Listen("tcp", ":"+os.Args[2])
		if err != nil {
			fmt.Println("failed:", err)
			os.Exit(1)
		}
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "reached")
			c.Close()
		}
	case "spoof":
		spoof(os.Args[2], os.Args[3])
	case "dns":
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		addrs, err := net.DefaultResolver.LookupHost(ctx, os.Args[2])
		if err != nil {
			fmt.Println("failed:", err)
			return
		}
		fmt.Println("resolved:", addrs)
	}
}

func request(method, url, body, apiKey string, proxy bool) {
	pool := x509.NewCertPool()
	if pem, err := os.ReadFile(os.Getenv("SSL_CERT_FILE")); err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	if proxy {
		tr.Proxy = http.ProxyFromEnvironment
	}
	timeout := 20 * time.Second
	if !proxy {
		timeout = 5 * time.Second // the probe that must fail: do not wait long
	}
	c := &http.Client{Transport: tr, Timeout: timeout}
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if apiKey != "" {
		req.Header.Set("x-api-key", apiKey)
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println("failed:", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Printf("status=%d code=%s ticket=%s body=%s\n", resp.StatusCode, resp.Header.Get("X-Lockhttp-Code"), resp.Header.Get("X-Lockhttp-Ticket"), strings.SplitN(string(b), "\n", 2)[0])
}

// scrape GETs a metrics page, sums it up in one line, then prints its lines that start with one
// of prefixes.
func scrape(url string, prefixes []string) {
	c := &http.Client{Transport: &http.Transport{}, Timeout: 5 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Println("failed:", err)
		return
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	families, info := 0, ""
	var shown []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "# TYPE lockhttp_") {
			families++
		}
		if strings.HasPrefix(l, "lockhttp_build_info{") {
			info = l
		}
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				shown = append(shown, l)
				break
			}
		}
	}
	fmt.Printf("status=%d families=%d %s\n", resp.StatusCode, families, info)
	for _, l := range shown {
		fmt.Println(l)
	}
}

// spoof tries to send packets with addr as their source: a raw socket (NET_RAW), then a TCP
// connection to target from addr, bound with IP_FREEBIND (no capability needed to bind; the
// kernel refuses to send from an address that is not the container's).
func spoof(addr, target string) {
	fd, rawErr := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_RAW)
	if rawErr == nil {
		syscall.Close(fd)
		fmt.Println("spoofed: a raw socket, which sends with any address")
		return
	}
	d := net.Dialer{Timeout: 3 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)},
		Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1) })
			return err
		}}
	c, err := d.Dial("tcp", target)
	if err == nil {
		c.Close()
		fmt.Println("spoofed: connected from", addr)
		return
	}
	fmt.Printf("failed: raw socket: %v; from %s: %v\n", rawErr, addr, err)
}
