package hub

import (
	"net/http"

	"github.com/lockhttp/lockhttp/internal/connlimit"
	"github.com/lockhttp/lockhttp/internal/httpjson"
	"github.com/lockhttp/lockhttp/internal/hubapi"
)

// Callers says who a request to the hub comes from: a gate, or a facade by name. The hub's
// routes serve each caller only what it may do: a gate asks, claims and reports; a facade reads
// and decides tickets. A caller is named by a token (Tokens) or, on a listener of mutual TLS, by
// the identity its certificate proves (the console builds those Callers).
type Callers struct {
	// Gate reports whether r comes from a gate. Nil: no request does.
	Gate func(r *http.Request) bool
	// Facade names the facade r comes from ("cli", "facade/alice"): the name prefixes the "by"
	// of its decisions. Nil: no request does.
	Facade func(r *http.Request) (name string, ok bool)
	// Refusal is the text of a refusal, saying what credential is needed. Empty: a bearer
	// token's.
	Refusal string
	// Status is a refusal's status. Zero: 401.
	Status int
}

// Tokens are the Callers that name a request by the bearer token it carries: the gate's, or a
// facade's (facade name → token). An empty token names nobody.
func Tokens(gate string, facades map[string]string) Callers {
	return Callers{
		Gate: func(r *http.Request) bool { return tokenOK(r, gate) },
		Facade: func(r *http.Request) (string, bool) {
			for name, tok := range facades {
				if tokenOK(r, tok) {
					return name, true
				}
			}
			return "", false
		},
	}
}

func (c Callers) gate(r *http.Request) bool { return c.Gate != nil && c.Gate(r) }

func (c Callers) facade(r *http.Request) (string, bool) {
	if c.Facade == nil {
		return "", false
	}
	return c.Facade(r)
}

func (c Callers) refuse(w http.ResponseWriter, who string) {
	msg, status := c.Refusal, c.Status
	if msg == "" {
		msg = "a valid " + who + "token is required (Authorization: Bearer ...)"
	}
	if status == 0 {
		status = http.StatusUnauthorized
	}
	httpjson.Write(w, status, apiError{msg})
}

// GateOnlyFor serves next to gates only (for routes the hub's host adds for the gate, such as
// its traffic).
func GateOnlyFor(c Callers, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !c.gate(r) {
			c.refuse(w, "")
			return
		}
		connlimit.Trust(r.Context())
		if g := r.Header.Get(hubapi.HeaderGate); g != "" && !cleanToken(g, 64) {
			httpjson.Write(w, 400, apiError{hubapi.HeaderGate + " must be 1 to 64 letters, digits, '.', '_', '-' or ':'"})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// FacadeOnly serves f to facades only (for routes a host of the hub adds, such as a phone
// pairing link); FacadeOf names the facade in f.
func FacadeOnly(c Callers, f http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name, ok := c.facade(r)
		if !ok {
			c.refuse(w, "facade ")
			return
		}
		connlimit.Trust(r.Context())
		f(w, r.WithContext(withFacade(r.Context(), name)))
	})
}
