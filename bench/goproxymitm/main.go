// Command goproxymitm is bare goproxy decrypting every CONNECT, for the benchmarks to compare the
// gate with: the same CA, certificates cached, upstream connections pooled, nothing decided.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync"

	"github.com/elazarl/goproxy"
)

// certCache is a goproxy.CertStorage that keeps every certificate it made.
type certCache struct {
	mu sync.Mutex
	m  map[string]*tls.Certificate
}

func (c *certCache) Fetch(host string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cert, ok := c.m[host]; ok {
		return cert, nil
	}
	cert, err := gen()
	if err == nil {
		c.m[host] = cert
	}
	return cert, err
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	caCert := flag.String("ca-cert", "", "CA certificate (PEM)")
	caKey := flag.String("ca-key", "", "CA key (PEM)")
	roots := flag.String("roots", "", "roots for origins (PEM)")
	hosts := flag.String("map", "", "every name resolves to this address")
	flag.Parse()
	ca, err := tls.LoadX509KeyPair(*caCert, *caKey)
	if err != nil {
		log.Fatal(err)
	}
	pem, err := os.ReadFile(*roots)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	p := goproxy.NewProxyHttpServer()
	p.Logger = log.New(os.Stderr, "", 0)
	p.CertStore = &certCache{m: map[string]*tls.Certificate{}}
	action := &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: goproxy.TLSConfigFromCA(&ca)}
	p.OnRequest().HandleConnect(goproxy.FuncHttpsHandler(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return action, host
	}))
	dial := func(network, addr string) (net.Conn, error) {
		_, port, _ := net.SplitHostPort(addr)
		return net.Dial(network, net.JoinHostPort(*hosts, port))
	}
	p.Tr = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil, MaxIdleConnsPerHost: 32,
		Dial: dial}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Addr().String())
	log.Fatal(http.Serve(l, p))
}
