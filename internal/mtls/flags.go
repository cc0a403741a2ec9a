package mtls

import (
	"errors"
	"flag"
	"log/slog"
)

// Flags are the command-line flags naming an identity's files: -tls-cert, -tls-key, -tls-ca,
// -tls-crl and -tls-deny.
type Flags struct {
	Files
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Cert, "tls-cert", "", "this process's certificate `FILE` for mutual TLS (PEM, naming spiffe://lockhttp/KIND/NAME: lockhttp fleet issue), read again when it changes")
	fs.StringVar(&f.Key, "tls-key", "", "the private key `FILE` of -tls-cert (PEM, mode 0600)")
	fs.StringVar(&f.CA, "tls-ca", "", "the fleet's CA certificate `FILE` (PEM: lockhttp fleet init's ca.pem): every peer's certificate must be issued by it")
	fs.StringVar(&f.CRL, "tls-crl", "", "a revocation list `FILE` signed by the fleet's CA (lockhttp fleet revoke): the certificates it lists are refused, and every peer once it is past its next update; read again when it changes; empty: none")
	fs.StringVar(&f.Deny, "tls-deny", "", "a deny list `FILE`: one a line, an identity, serial:HEX or sha256:HEX of a certificate to refuse; read again when it changes (a list that does not load refuses every peer); empty: none")
}

// Given reports whether any of the flags was given.
func (f *Flags) Given() bool {
	return f.Cert != "" || f.Key != "" || f.CA != "" || f.CRL != "" || f.Deny != ""
}

// Check says what is missing for an identity: a certificate, its key and the CA.
func (f *Flags) Check() error {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return errors.New("mutual TLS needs -tls-cert, -tls-key and -tls-ca (lockhttp fleet init and issue make them)")
	}
	return nil
}

// Load reads the files (Load).
func (f *Flags) Load(log *slog.Logger) (*Source, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	return Load(Options{Files: f.Files, Log: log})
}
