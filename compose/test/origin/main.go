// Command origin plays "the internet" in the compose end-to-end test: HTTP on :80 and HTTPS on
// :443 with the certificate it is given, answering what it saw.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
)

func main() {
	cert := flag.String("cert", "/origin/cert.pem", "TLS certificate")
	key := flag.String("key", "/origin/key.pem", "TLS key")
	flag.Parse()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		fmt.Fprintf(w, "origin saw %s %s (%d bytes)", r.Method, r.URL.RequestURI(), len(body))
	})
	go func() { log.Fatal(http.ListenAndServe(":80", h)) }()
	log.Fatal(http.ListenAndServeTLS(":443", *cert, *key, h))
}
