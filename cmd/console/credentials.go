package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/hub"
)

// maxUnbindBody bounds the body of an unbind request.
const maxUnbindBody = 4 << 10

// mountCredentials serves lox's commands on the Claude credentials humans bound to containers
// by approving (console.(*Console).Bind), to the CLI facade:
//
//	GET  /v1/credentials         the bindings, oldest first (console.Binding each)
//	POST /v1/credentials/unbind  {"container","hash","by"} → the console.Binding removed; 404 for none
func mountCredentials(mux *http.ServeMux, callers hub.Callers, c *console.Console) {
	mux.Handle("GET /v1/credentials", hub.FacadeOnly(callers, func(w http.ResponseWriter, r *http.Request) {
		bs := c.Bindings()
		if bs == nil {
			bs = []console.Binding{}
		}
		httpjson.Write(w, http.StatusOK, bs)
	}))
	mux.Handle("POST /v1/credentials/unbind", hub.FacadeOnly(callers, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Container string `json:"container"`
			Hash      string `json:"hash"`
			By        string `json:"by"`
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, maxUnbindBody+1))
		if err == nil && len(data) > maxUnbindBody {
			err = errors.New("the body is larger than 4 KiB")
		}
		if err == nil {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			err = dec.Decode(&req)
		}
		if err != nil {
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": "bad unbind request: " + err.Error() + `; send {"container":"NAME","hash":"HEX","by":"NAME"}`})
			return
		}
		by := hub.FacadeOf(r)
		if n := hub.CleanName(req.By); n != "" {
			by += ":" + n
		}
		b, err := c.Unbind(req.Container, req.Hash, by)
		if err != nil {
			httpjson.Write(w, http.StatusNotFound, map[string]string{"error": err.Error()})
			return
		}
		httpjson.Write(w, http.StatusOK, b)
	}))
}
