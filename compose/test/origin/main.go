// Command origin plays "the internet" in the compose end-to-end test: HTTP on :80 and HTTPS on
// :443 with the certificate it is given, answering what it saw (on /key: a hash of the x-api-key
// header it received, never the value). Every request is logged with the address it came from
// ("hit ADDR METHOD PATH"): the test counts the hits that did not come from the gate.
package main

import (
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
)

func main() {
	cert := flag.String("cert", "/origin/cert.pem", "TLS certificate")
	key := flag.String("key", "/origin/key.pem", "TLS key")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		log.Printf("hit %s %s %s", host, r.Method, r.URL.Path)
		if r.URL.Path == "/key" {
			fmt.Fprintf(w, "origin saw x-api-key sha256:%x", sha256.Sum256([]byte(r.Header.Get("x-api-key"))))
			return
		}
		fmt.Fprintf(w, "origin saw %s %s (%d bytes)", r.Method, r.URL.RequestURI(), len(body))
	})
	go func() { log.Fatal(http.ListenAndServe(":80", h)) }()
	log.Fatal(http.ListenAndServeTLS(":443", *cert, *key, h))
}
