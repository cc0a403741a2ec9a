package hubclient

import (
	"context"
	"time"
)

// Credential is a Claude credential a human bound to a container by approving, or a Claude login
// the gate saw issued to it: the JSON of console.Binding.
type Credential struct {
	Container string    `json:"container"`
	Hash      string    `json:"hash"`
	By        string    `json:"by"`
	Ticket    string    `json:"ticket"`
	At        time.Time `json:"at"`
	Issued    string    `json:"issued,omitempty"`  // the host whose token endpoint issued it
	Request   string    `json:"request,omitempty"` // the gate's request whose answer issued it
}

// Credentials lists the bound Claude credentials, oldest first.
func (f *Facade) Credentials(ctx context.Context) ([]Credential, error) {
	var out []Credential
	err := f.c.call(ctx, "GET", "/v1/credentials", nil, &out)
	return out, err
}

// Unbind removes the binding of container whose hash starts with hash (12 hex digits or more);
// by names the person. It returns the binding removed.
func (f *Facade) Unbind(ctx context.Context, container, hash, by string) (Credential, error) {
	var out Credential
	err := f.c.call(ctx, "POST", "/v1/credentials/unbind", map[string]string{"container": container, "hash": hash, "by": by}, &out)
	return out, err
}
