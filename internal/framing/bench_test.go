package framing

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// smallRequests returns n small keep-alive requests as a client sends them through the proxy:
// three GETs in four, the fourth a POST with a short body, every eighth one chunked.
func smallRequests(n int) []byte {
	var sb strings.Builder
	for i := range n {
		switch {
		case i%8 == 7:
			fmt.Fprintf(&sb, "POST http://example.com/api/items HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench/1.0\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nd\r\n{\"id\":%6d}\r\n0\r\n\r\n", i)
		case i%4 == 3:
			fmt.Fprintf(&sb, "POST http://example.com/api/items HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench/1.0\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"id\":%6d}", i)
		default:
			fmt.Fprintf(&sb, "GET http://example.com/api/items/%d?expand=true HTTP/1.1\r\nHost: example.com\r\nUser-Agent: bench/1.0\r\nAccept: application/json\r\nAccept-Encoding: gzip\r\n\r\n", i)
		}
	}
	return []byte(sb.String())
}

// readRequests reads n requests and their bodies off br, as net/http's server would.
func readRequests(b *testing.B, br *bufio.Reader, n int) {
	for range n {
		r, err := http.ReadRequest(br)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConn1000 carries 1,000 small keep-alive requests over loopback TCP, read with
// http.ReadRequest straight off the socket ("bare") or through a Conn ("framing"). One op is
// 1,000 requests; ns/req is per request.
func BenchmarkConn1000(b *testing.B) {
	const n = 1000
	blob := smallRequests(n)
	for _, framed := range []bool{false, true} {
		name := "bare"
		if framed {
			name = "framing"
		}
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Close()
			client, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			server, err := ln.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer server.Close()
			var rd io.Reader = server
			if framed {
				rd = NewConn(server, Options{Token: testToken})
			}
			br := bufio.NewReader(rd)
			go func() {
				for {
					if _, err := client.Write(blob); err != nil {
						return
					}
				}
			}()
			b.SetBytes(int64(len(blob)))
			b.ReportAllocs()
			for b.Loop() {
				readRequests(b, br, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/req")
		})
	}
}

// BenchmarkConnMemory is BenchmarkConn1000 without the sockets: the CPU a Conn adds per request.
func BenchmarkConnMemory(b *testing.B) {
	const n = 1000
	blob := smallRequests(n)
	for _, framed := range []bool{false, true} {
		name := "bare"
		if framed {
			name = "framing"
		}
		b.Run(name, func(b *testing.B) {
			var rd io.Reader = &loopConn{data: blob}
			if framed {
				rd = NewConn(&loopConn{data: blob}, Options{Token: testToken})
			}
			br := bufio.NewReader(rd)
			b.SetBytes(int64(len(blob)))
			b.ReportAllocs()
			for b.Loop() {
				readRequests(b, br, n)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/req")
		})
	}
}

func BenchmarkParseHead(b *testing.B) {
	for _, f := range loadFixtures(b, "clients") {
		if f.name != "npm-get" && f.name != "curl-origin" && f.name != "go-connect" {
			continue
		}
		in, _ := splitHead(f.data)
		b.Run(f.name, func(b *testing.B) {
			var h head
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			for b.Loop() {
				if e := parse(in, false, &h); e != nil {
					b.Fatal(e)
				}
			}
		})
	}
}

func BenchmarkChunkedScan(b *testing.B) {
	var sb strings.Builder
	for range 64 {
		sb.WriteString("400\r\n" + strings.Repeat("x", 0x400) + "\r\n")
	}
	sb.WriteString("0\r\n\r\n")
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var c Chunked
		if _, done, e := c.Scan(body); !done || e != nil {
			b.Fatal(done, e)
		}
	}
}
