package transport

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/framing"
)

// TestHeldRequestKeepsNoReader: while a request waits for a human (Watch, its body read) its
// connection keeps neither the server's reader nor the framing check's buffer; the hold ends when
// the client closes its connection (the context's cause says so), and a hold that ends otherwise
// (an answer) leaves the connection serving its next request.
func TestHeldRequestKeepsNoReader(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type held struct {
		reader bool // kept during the hold
		ended  error
	}
	holds := make(chan held, 2)
	watching := make(chan struct{}, 2)
	answer := make(chan struct{}, 2)
	cfg := &H1Config{Log: slog.New(slog.DiscardHandler)}
	go func() {
		for {
			nc, err := l.Accept()
			if err != nil {
				return
			}
			fc := framing.NewConn(nc, framing.Options{Token: NewToken(), Lean: true})
			var hc *H1Conn
			hc = NewH1Conn(cfg, fc, context.Background(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if r.Method != "POST" {
					io.WriteString(w, "next")
					return
				}
				ctx, stop := hc.Watch(r.Context())
				h := held{reader: hc.br != nil}
				watching <- struct{}{}
				select {
				case <-ctx.Done():
					h.ended = context.Cause(ctx)
				case <-answer:
				}
				stop()
				holds <- h
				io.WriteString(w, "answered")
			}), nil, func() {})
			hc.Serve()
		}
	}()
	post := "POST /upload HTTP/1.1\r\nHost: a.test\r\nContent-Length: 4\r\n\r\nheld"
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c, bufio.NewReader(c)
	}
	held1 := func() {
		t.Helper()
		select {
		case <-watching:
		case <-time.After(10 * time.Second):
			t.Fatal("the request was never held")
		}
	}
	wait := func() held {
		t.Helper()
		select {
		case h := <-holds:
			return h
		case <-time.After(10 * time.Second):
			t.Fatal("the hold did not end")
		}
		return held{}
	}

	// Answered: the connection then serves its next request.
	c, br := dial()
	defer c.Close()
	io.WriteString(c, post)
	held1()
	answer <- struct{}{}
	if h := wait(); h.reader || h.ended != nil {
		t.Fatalf("answered hold: %+v; want no reader kept, not ended by the client", h)
	}
	for _, want := range []string{"answered", "next"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != want {
			t.Fatalf("got %q, want %q", b, want)
		}
		if want == "answered" {
			fmt.Fprintf(c, "GET /next HTTP/1.1\r\nHost: a.test\r\n\r\n")
		}
	}

	// The client leaves: the hold ends with errClientGone.
	c2, _ := dial()
	io.WriteString(c2, post)
	held1()
	c2.Close()
	if h := wait(); h.reader || !errors.Is(h.ended, errClientGone) {
		t.Fatalf("hold of a client that left: %+v; want no reader kept, ended by %v", h, errClientGone)
	}
}
