package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/display"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/phone"
)

// maxUnpairBody bounds the body of an unpair request: {"by": a name}.
const maxUnpairBody = 4 << 10

// errNoPhone is unpair's answer for an id no paired phone has.
var errNoPhone = errors.New("no paired phone has this id; lox phones (or :phones) lists them")

// mountPhones serves lox's phone commands to the CLI facade, beside the pairing link:
//
//	GET  /v1/phones              the paired phones, oldest first (phone.Session each)
//	POST /v1/phones/{id}/unpair  {"by"} → the phone.Session it revoked; 404 for an unknown id
func (hs *hubServer) mountPhones(mux *http.ServeMux, callers hub.Callers) {
	mux.Handle("GET /v1/phones", hub.FacadeOnly(callers, func(w http.ResponseWriter, r *http.Request) {
		httpjson.Write(w, http.StatusOK, hs.phone.Sessions())
	}))
	mux.Handle("POST /v1/phones/{id}/unpair", hub.FacadeOnly(callers, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			By string `json:"by"`
		}
		data, err := io.ReadAll(io.LimitReader(r.Body, maxUnpairBody+1))
		if err == nil && len(data) > maxUnpairBody {
			err = errors.New("the body is larger than 4 KiB")
		}
		if err == nil && len(bytes.TrimSpace(data)) > 0 {
			dec := json.NewDecoder(bytes.NewReader(data))
			dec.DisallowUnknownFields()
			err = dec.Decode(&req)
		}
		if err != nil {
			httpjson.Write(w, http.StatusBadRequest, map[string]string{"error": "bad unpair request: " + err.Error() + `; send {"by":"NAME"} or nothing`})
			return
		}
		by := hub.FacadeOf(r)
		if n := hub.CleanName(req.By); n != "" {
			by += ":" + n
		}
		s, err := hs.unpair(r.Context(), r.PathValue("id"), by)
		if err != nil {
			httpjson.Write(w, http.StatusNotFound, map[string]string{"error": err.Error()})
			return
		}
		httpjson.Write(w, http.StatusOK, s)
	}))
}

// unpair revokes the phone session id at once (its token stops working and its websockets
// close), logs it and audits it as by's doing.
func (hs *hubServer) unpair(ctx context.Context, id, by string) (phone.Session, error) {
	s, ok := hs.phone.Unpair(id)
	if !ok {
		return phone.Session{}, errNoPhone
	}
	hs.log.Info("phone: unpaired", "session", s.ID, "device", s.Device, "by", by)
	if hs.audit != nil {
		rec := &audit.Record{Event: "phone-unpaired", ID: s.ID, Approver: by,
			Detail: fmt.Sprintf("device %q paired %s from %s, last seen %s from %s", s.Device,
				s.Created.UTC().Format(time.RFC3339), s.Remote, s.LastSeen.UTC().Format(time.RFC3339), s.LastRemote)}
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := hs.audit.Write(wctx, rec); err != nil {
			hs.log.Error("phone: audit of the unpairing failed", "session", s.ID, "err", err)
		}
	}
	return s, nil
}

// phonesCommand is the terminal's :phones and :unpair ID.
func (hs *hubServer) phonesCommand(by string) map[string]func(args []string) (string, error) {
	return map[string]func(args []string) (string, error){
		"phones": func(args []string) (string, error) {
			if len(args) != 0 {
				return "", errors.New("usage: :phones (then :unpair ID)")
			}
			var b strings.Builder
			phone.Table(&b, hs.phone.Sessions(), time.Now())
			return b.String(), nil
		},
		"unpair": func(args []string) (string, error) {
			if len(args) != 1 {
				return "", errors.New("usage: :unpair ID (the id :phones shows)")
			}
			s, err := hs.unpair(context.Background(), args[0], by)
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("unpaired %s (%s): its token no longer works and its page was closed",
				display.Escape(s.Device, false), display.Escape(s.ID, false)), nil
		},
	}
}
