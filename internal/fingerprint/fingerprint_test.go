package fingerprint

import (
	"net/http"
	"testing"
)

func base() *Request {
	return &Request{Container: "agent", Method: "POST", URL: "https://api.example.com:443/v1/items?x=1",
		MediaType: "application/json", Header: http.Header{"Content-Type": {"application/json"}, "X-A": {"1", "2"}},
		Body: []byte(`{"a": 1, "b": [1, 2]}`)}
}

func TestSameAndDifferent(t *testing.T) {
	want := Of(base())
	same := []struct {
		name string
		edit func(r *Request)
	}{
		{"header name case", func(r *Request) { r.Header = http.Header{"content-type": {"application/json"}, "x-a": {"1", "2"}} }},
		{"header order of names", func(r *Request) { r.Header = http.Header{"X-A": {"1", "2"}, "Content-Type": {"application/json"}} }},
	}
	for _, c := range same {
		t.Run("same: "+c.name, func(t *testing.T) {
			r := base()
			c.edit(r)
			if got := Of(r); got != want {
				t.Errorf("fingerprint changed")
			}
		})
	}
	different := []struct {
		name string
		edit func(r *Request)
	}{
		{"container", func(r *Request) { r.Container = "other" }},
		// The approval binds the bytes that go out: JSON that reads the same with other white
		// space, or with a duplicate key a lenient parser drops, is another request.
		{"JSON white space", func(r *Request) { r.Body = []byte("{\"a\":1,\n \"b\":[1,2]}") }},
		{"JSON duplicate key", func(r *Request) { r.Body = []byte(`{"a": 1, "b": [1, 2], "a": 1}`) }},
		{"method", func(r *Request) { r.Method = "PUT" }},
		{"URL query", func(r *Request) { r.URL = "https://api.example.com:443/v1/items?x=2" }},
		{"URL path", func(r *Request) { r.URL = "https://api.example.com:443/v1/item" }},
		{"media type", func(r *Request) { r.MediaType = "text/plain" }},
		{"header value", func(r *Request) { r.Header.Set("X-A", "1") }},
		{"header value order", func(r *Request) { r.Header["X-A"] = []string{"2", "1"} }},
		{"extra header", func(r *Request) { r.Header.Set("X-Request-Id", "abc") }},
		{"body", func(r *Request) { r.Body = []byte(`{"a":2,"b":[1,2]}`) }},
		{"JSON key order", func(r *Request) { r.Body = []byte(`{"b":[1,2],"a":1}`) }},
		{"JSON duplicate key", func(r *Request) { r.Body = []byte(`{"a":1,"a":1,"b":[1,2]}`) }},
		{"field boundary", func(r *Request) { r.Container, r.Method = "agentP", "OST" }},
	}
	for _, c := range different {
		t.Run("different: "+c.name, func(t *testing.T) {
			r := base()
			c.edit(r)
			if got := Of(r); got == want {
				t.Errorf("fingerprint did not change")
			}
		})
	}
}

func FuzzOf(f *testing.F) {
	f.Add("agent", "POST", "https://a.example/x", "application/json", []byte(`{"a":1}`))
	f.Fuzz(func(t *testing.T, c, m, u, mt string, body []byte) {
		a := Of(&Request{Container: c, Method: m, URL: u, MediaType: mt, Body: body})
		b := Of(&Request{Container: c, Method: m, URL: u, MediaType: mt, Body: append([]byte(nil), body...)})
		if a != b || len(a) != len(Prefix)+64 {
			t.Fatalf("unstable or malformed: %q %q", a, b)
		}
	})
}
