package hubapi

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/display/displaytest"
)

// setStrings sets every exported string field reachable in v (through structs, slices and
// pointers) to s.
func setStrings(v reflect.Value, s string) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				setStrings(v.Field(i), s)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			setStrings(v.Index(i), s)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			setStrings(v.Elem(), s)
		}
	}
}

// rawStrings returns the path of every exported string field reachable in v that holds a raw
// hostile character.
func rawStrings(v reflect.Value, path string) []string {
	var out []string
	switch v.Kind() {
	case reflect.String:
		for _, raw := range displaytest.Raw {
			if strings.Contains(v.String(), raw) {
				out = append(out, path)
				break
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				out = append(out, rawStrings(v.Field(i), path+"."+v.Type().Field(i).Name)...)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			out = append(out, rawStrings(v.Index(i), path+"[]")...)
		}
	case reflect.Pointer:
		if !v.IsNil() {
			out = append(out, rawStrings(v.Elem(), path)...)
		}
	}
	return out
}

// TestEscaped: every text field of a ticket and of the gate's state is escaped, a field added
// later included, and the original is left as it was.
func TestEscaped(t *testing.T) {
	tk := Ticket{Headers: []Header{{}, {}}, Decision: &Decision{At: time.Unix(1, 0)}, Created: time.Unix(2, 0), MCP: &MCPCall{}}
	setStrings(reflect.ValueOf(&tk).Elem(), displaytest.URL.Raw)
	orig := cloneTicket(&tk)
	e := tk.Escaped()
	if raw := rawStrings(reflect.ValueOf(e), "Ticket"); len(raw) > 0 {
		t.Errorf("Escaped leaves raw: %s", strings.Join(raw, ", "))
	}
	if e.URL != displaytest.URL.Shown || e.Headers[1].Value != e.URL || e.Decision.Reason != e.URL || e.MCP.Tool != e.URL || e.MCP.Arguments != e.URL {
		t.Errorf("Escaped: url %q, header %q, reason %q", e.URL, e.Headers[1].Value, e.Decision.Reason)
	}
	if !e.Created.Equal(tk.Created) || !e.Decision.At.Equal(tk.Decision.At) {
		t.Error("Escaped changed a time")
	}
	if !reflect.DeepEqual(&tk, orig) {
		t.Error("Escaped changed the ticket it was called on")
	}
	if e := (Ticket{}).Escaped(); e.Headers != nil || e.Decision != nil {
		t.Errorf("Escaped of an empty ticket: %+v", e)
	}

	var g GateState
	setStrings(reflect.ValueOf(&g).Elem(), displaytest.URL.Raw)
	if raw := rawStrings(reflect.ValueOf(g.Escaped()), "GateState"); len(raw) > 0 {
		t.Errorf("GateState.Escaped leaves raw: %s", strings.Join(raw, ", "))
	}
}

// cloneTicket is a deep copy of t.
func cloneTicket(t *Ticket) *Ticket {
	c := *t
	c.Headers = append([]Header(nil), t.Headers...)
	if t.Bind != nil {
		b := *t.Bind
		c.Bind = &b
	}
	if t.Decision != nil {
		d := *t.Decision
		c.Decision = &d
	}
	if t.MCP != nil {
		m := *t.MCP
		c.MCP = &m
	}
	return &c
}
