// Command connectfwd carries each connection it accepts into a CONNECT tunnel through a proxy,
// for load tools that speak no proxy protocol (h2load): the client's bytes, TLS included, pass
// as they are once the proxy has answered 200.
package main

import (
	"bufio"
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
	proxy := flag.String("proxy", "", "the proxy's address, host:port")
	target := flag.String("target", "", "the CONNECT target, host:port")
	flag.Parse()
	l, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, l.Addr().String())
	for {
		c, err := l.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go carry(c, *proxy, *target)
	}
}

func carry(c net.Conn, proxy, target string) {
	defer c.Close()
	p, err := net.Dial("tcp", proxy)
	if err != nil {
		return
	}
	defer p.Close()
	fmt.Fprintf(p, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(p)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		return
	}
	done := make(chan struct{}, 2)
	go func() { io.Copy(p, c); done <- struct{}{} }()
	go func() { io.Copy(c, br); done <- struct{}{} }()
	<-done
}
