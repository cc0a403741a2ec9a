// Command origin is the benchmark origin: it answers every request with a small fixed body, on
// plain HTTP, or on HTTPS with -tls-cert and -tls-key.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "listen address")
	size := flag.Int("size", 64, "body size in bytes")
	certFile := flag.String("tls-cert", "", "serve HTTPS with this certificate (PEM)")
	keyFile := flag.String("tls-key", "", "the certificate's key (PEM)")
	http1 := flag.Bool("http1", false, "HTTPS speaks HTTP/1.1 only (no h2 in ALPN), as the anchors' origin")
	flag.Parse()
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, l.Addr().String())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/plain")
		w.Write(body)
	})
	if *certFile != "" {
		srv := &http.Server{Handler: h}
		if *http1 {
			srv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
		}
		log.Fatal(srv.ServeTLS(l, *certFile, *keyFile))
	}
	log.Fatal(http.Serve(l, h))
}
