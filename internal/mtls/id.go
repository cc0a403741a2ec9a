// Package mtls gives lockhttp's processes on different machines identities they prove to each
// other with mutual TLS: certificates naming a SPIFFE-style URI (spiffe://lockhttp/KIND/NAME),
// read from files and read again when they change, and the TLS configurations that admit only
// the identities they are told, never an expired or revoked certificate nor a resumed session.
package mtls

import (
	"fmt"
	"strings"

	"github.com/spiffe/go-spiffe/v2/spiffeid"
)

// TrustDomain is the trust domain of the identities lockhttp fleet issues.
const TrustDomain = "lockhttp"

// The kinds of identity lockhttp's processes use (the first segment of the ID's path).
const (
	KindGate    = "gate"    // a gate: fetches the policy, asks the hub
	KindFacade  = "facade"  // a person's tool (lox): reads and decides tickets
	KindConsole = "console" // a console with its hub: serves the policy and the hub's API
	KindSigner  = "signer"  // a signer: issues leaf certificates
)

// ID is an identity: spiffe://TRUST-DOMAIN/KIND/NAME. The zero ID is no identity.
type ID struct {
	id spiffeid.ID
}

// NewID is the identity of kind and name in lockhttp's trust domain. Both are one path segment
// each: letters, digits, '.', '-' and '_', neither "." nor "..".
func NewID(kind, name string) (ID, error) {
	td := spiffeid.RequireTrustDomainFromString(TrustDomain)
	id, err := spiffeid.FromSegments(td, kind, name)
	if err != nil {
		return ID{}, fmt.Errorf("identity %s/%s: %w; use letters, digits, '.', '-' and '_'", kind, name, err)
	}
	return ID{id}, nil
}

// ParseID reads an identity written as a URI: spiffe://lockhttp/gate/ci-1.
func ParseID(s string) (ID, error) {
	id, err := spiffeid.FromString(s)
	if err != nil {
		return ID{}, fmt.Errorf("identity %q: %w; write it as spiffe://%s/KIND/NAME", s, err, TrustDomain)
	}
	return ID{id}, nil
}

// String is the identity's URI; "" for the zero ID.
func (i ID) String() string {
	if i.id.IsZero() {
		return ""
	}
	return i.id.String()
}

// IsZero reports whether i is no identity.
func (i ID) IsZero() bool { return i.id.IsZero() }

// segments are the path's segments.
func (i ID) segments() []string {
	return strings.Split(strings.TrimPrefix(i.id.Path(), "/"), "/")
}

// Kind is the path's first segment (gate, facade, console): what the identity is. "" when the
// path has not two segments.
func (i ID) Kind() string {
	if s := i.segments(); len(s) == 2 {
		return s[0]
	}
	return ""
}

// Name is the path's second segment: which one of its kind. "" when the path has not two
// segments.
func (i ID) Name() string {
	if s := i.segments(); len(s) == 2 {
		return s[1]
	}
	return ""
}

// Short is KIND/NAME for an identity of lockhttp's trust domain, else the whole URI: how a
// decision's "by" and a log line name it.
func (i ID) Short() string {
	if i.id.TrustDomain().Name() == TrustDomain && i.Kind() != "" {
		return i.Kind() + "/" + i.Name()
	}
	return i.String()
}

// Allow is a list of the identities a side admits: each entry an identity, or an identity's
// prefix followed by "/*", which admits every identity one segment longer
// (spiffe://lockhttp/gate/* admits every gate). The zero Allow admits nobody.
type Allow struct {
	exact    map[string]bool
	prefixes []string // "spiffe://td/path/", the "*" cut off
}

// ParseAllow reads the patterns of an Allow.
func ParseAllow(patterns ...string) (Allow, error) {
	var a Allow
	for _, p := range patterns {
		if err := a.Set(p); err != nil {
			return Allow{}, err
		}
	}
	return a, nil
}

// MustAllow is ParseAllow for patterns written in the program; it panics on a bad one.
func MustAllow(patterns ...string) Allow {
	a, err := ParseAllow(patterns...)
	if err != nil {
		panic(err)
	}
	return a
}

// Set adds one pattern (Allow is a flag.Value).
func (a *Allow) Set(p string) error {
	if base, ok := strings.CutSuffix(p, "/*"); ok {
		id, err := spiffeid.FromString(base)
		if err != nil {
			return fmt.Errorf("identity pattern %q: %w; write spiffe://%s/KIND/* or an identity", p, err, TrustDomain)
		}
		a.prefixes = append(a.prefixes, id.String()+"/")
		return nil
	}
	id, err := ParseID(p)
	if err != nil {
		return fmt.Errorf("identity pattern: %w", err)
	}
	if a.exact == nil {
		a.exact = map[string]bool{}
	}
	a.exact[id.String()] = true
	return nil
}

// String lists the patterns.
func (a *Allow) String() string {
	if a == nil {
		return ""
	}
	var out []string
	for id := range a.exact {
		out = append(out, id)
	}
	for _, p := range a.prefixes {
		out = append(out, p+"*")
	}
	return strings.Join(out, ",")
}

// Empty reports whether a admits nobody.
func (a Allow) Empty() bool { return len(a.exact) == 0 && len(a.prefixes) == 0 }

// Admits reports whether a admits id.
func (a Allow) Admits(id ID) bool {
	if id.IsZero() {
		return false
	}
	s := id.String()
	if a.exact[s] {
		return true
	}
	for _, p := range a.prefixes {
		if rest, ok := strings.CutPrefix(s, p); ok && rest != "" && !strings.Contains(rest, "/") {
			return true
		}
	}
	return false
}

// Union is an Allow admitting what a or b admits.
func Union(a, b Allow) Allow {
	var u Allow
	for id := range a.exact {
		u.Set(id)
	}
	for id := range b.exact {
		u.Set(id)
	}
	u.prefixes = append(append(u.prefixes, a.prefixes...), b.prefixes...)
	return u
}
