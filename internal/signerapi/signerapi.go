// Package signerapi is what crosses the signer's unix socket (the signing request and its
// answer, the health answer and the error body), imported by the signer and by its clients alike
// so that no client links the signer's CA code.
package signerapi

// The routes, for the uids the signer allows:
//
//	POST /sign    SignRequest → SignResponse (200) or ErrorResponse (400 refused, 413, 429, 500)
//	GET  /health  → Health
//	GET  /metrics → the signer's Prometheus page (when it serves one)

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
	// CA is the CA certificate in PEM (the leaf's issuer).
	CA string `json:"ca"`
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
}

// ErrorResponse is the body of the signer's 400, 404, 405, 413, 429 and 500 answers (the 403
// of the uid check is plain text). Error is safe to show: it never holds key material.
type ErrorResponse struct {
	Error string `json:"error"`
}
