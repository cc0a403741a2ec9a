// Package signerapi is what crosses the signer's unix socket (the signing request and its
// answer, the health answer and the error body), imported by the signer and by its clients alike
// so that no client links the signer's CA code.
package signerapi

// The routes, for the uids the signer allows:
//
//	POST /sign    SignRequest → SignResponse (200) or ErrorResponse (400 refused, 413, 429, 500)
//	GET  /health  → Health
//	GET  /metrics → the signer's Prometheus page (when it serves one)
//
// A root signer (signer serve --root) serves only, over mutual TLS, to the node signers its
// --tls-node admits:
//
//	POST /intermediate  IntermediateRequest → IntermediateResponse (200) or ErrorResponse
//	GET  /health        → Health

// SignRequest is the body of POST /sign. Unknown fields are refused.
type SignRequest struct {
	// Host is the name to certify, as floor.Host normalises it.
	Host string `json:"host"`
	// PublicKey is the key to certify: standard base64 (padded) of its PKIX (SubjectPublicKeyInfo) DER.
	PublicKey string `json:"public_key"`
}

// SignResponse is the answer of POST /sign (200).
type SignResponse struct {
	// Certificate is the leaf certificate in PEM.
	Certificate string `json:"certificate"`
	// CA is the CA certificate in PEM: the leaf's issuer, or with Chain the root agents trust.
	CA string `json:"ca"`
	// Chain is the certificates between the leaf and CA in PEM, the leaf's issuer first: a node
	// signer's intermediate. Empty when CA issued the leaf itself. The leaf never outlives them.
	Chain string `json:"chain,omitempty"`
	// Serial is the leaf's serial number in lowercase hexadecimal.
	Serial string `json:"serial"`
	// NotAfter is the leaf's expiry, RFC 3339.
	NotAfter string `json:"not_after"`
}

// Health is the answer of GET /health (200).
type Health struct {
	// CANotAfter is the CA certificate's expiry, RFC 3339.
	CANotAfter string `json:"ca_not_after"`
	// CASubject is the CA certificate's subject.
	CASubject string `json:"ca_subject"`
	// CASHA256 is the SHA-256 of the CA certificate (DER, hex): lockhttp doctor compares it
	// with the ca.pem agents trust.
	CASHA256 string `json:"ca_sha256"`
	// Metrics is the URL of the signer's Prometheus metrics, "" when it serves none.
	Metrics string `json:"metrics,omitempty"`
	// Role is "root" for a root signer (it signs intermediates only), "node" for a node signer
	// (it signs leaves with an intermediate from the root), "" for a signer holding its own CA.
	Role string `json:"role,omitempty"`
	// Intermediate is a node signer's intermediate and its renewals; nil for the others.
	Intermediate *IntermediateHealth `json:"intermediate,omitempty"`
}

// IntermediateHealth is a node signer's intermediate CA, as its GET /health reports it. The CA
// fields of Health name the root.
type IntermediateHealth struct {
	// Subject, SHA256 (of the DER, hex) and NotAfter (RFC 3339) are the current intermediate's;
	// empty while the node holds none (it refuses to sign).
	Subject  string `json:"subject,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	NotAfter string `json:"not_after,omitempty"`
	// Renewed is when the node last got an intermediate from the root (RFC 3339); "" never.
	Renewed string `json:"renewed,omitempty"`
	// Next is when the node asks the root next (RFC 3339).
	Next string `json:"next,omitempty"`
	// Error is why the last request to the root failed; "" when it succeeded. Safe to show.
	Error string `json:"error,omitempty"`
	// Failed is when the last request failed (RFC 3339); "" when it succeeded.
	Failed string `json:"failed,omitempty"`
}

// IntermediateRequest is the body of a root signer's POST /intermediate. Unknown fields are
// refused.
type IntermediateRequest struct {
	// PublicKey is the node's new intermediate key, ECDSA P-256: standard base64 (padded) of its
	// PKIX DER. The private half never leaves the node's memory.
	PublicKey string `json:"public_key"`
}

// IntermediateResponse is the answer of POST /intermediate (200).
type IntermediateResponse struct {
	// Certificate is the intermediate CA certificate in PEM: path length zero, the root's name
	// constraints, valid for the root's intermediate lifetime (never past the root's own).
	Certificate string `json:"certificate"`
	// Root is the root certificate in PEM, the one agents trust.
	Root string `json:"root"`
}

// ErrorResponse is the body of the signer's 400, 404, 405, 413, 429 and 500 answers (the 403
// of the uid check is plain text). Error is safe to show: it never holds key material.
type ErrorResponse struct {
	Error string `json:"error"`
}
