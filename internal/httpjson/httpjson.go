// Package httpjson writes the JSON answers of the hub, the signer and the phone page's API.
package httpjson

import (
	"encoding/json"
	"net/http"
)

// Write answers v as JSON, one line, with status: Content-Type application/json (JSON is UTF-8;
// the type has no charset parameter) and Cache-Control no-store (tickets, decisions,
// certificates and sessions are never cached). A v that does not encode is a bug of the caller:
// the answer is then a 500 with {"error": …}.
func Write(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":"the answer could not be encoded as JSON"}`)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
