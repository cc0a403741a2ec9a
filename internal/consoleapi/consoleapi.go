// Package consoleapi is what crosses the console's sockets (the served policy and the
// console's status), imported by the console and by its clients alike so that no client links the
// console's policy review, notification channels or hub.
package consoleapi

// The routes, for the gate's uids on the unix socket, and on the listener of mutual TLS
// (console -tls-listen) for the gate identities (GET /policy, GET /status) and the facade
// identities (GET /status):
//
//	GET /policy  → Served (200), its Tag the ETag; If-None-Match with the Tag held: 304
//	GET /status  → Status

import "time"

// Served is the policy as the console serves it: GET /policy answers it as JSON.
type Served struct {
	Version  string    `json:"version"`
	Name     string    `json:"name"`
	TOML     string    `json:"toml"`
	LoadedAt time.Time `json:"loaded_at"`
	Rules    int       `json:"rules"`
	// Bound maps a container to the SHA-256 hex of each Claude credential a human bound to it
	// (the console's Bind); the gate lets the container send them without asking.
	Bound map[string][]string `json:"bound,omitempty"`
	// Tag names what is served, policy and bindings: the ETag of GET /policy.
	Tag string `json:"tag"`
}

// Status is GET /status.
type Status struct {
	Version   string    `json:"version"`
	Name      string    `json:"name"`
	LoadedAt  time.Time `json:"loaded_at"`
	FileError string    `json:"file_error,omitempty"` // why the file as it is now is not served
	// Hub is the address the hub listens on, when the console hosts one.
	Hub string `json:"hub,omitempty"`
	// Phone is the URL pairing links name (the phone page's public URL), when the console
	// serves the phone page.
	Phone string `json:"phone,omitempty"`
	// Metrics is the URL of the console's Prometheus metrics, "" when it serves none.
	Metrics string `json:"metrics,omitempty"`
	// Notify is each [[notify]] channel of the approved policy and its deliveries.
	Notify []ChannelStatus `json:"notify,omitempty"`
	// ApprovedBy and ApprovedAt say who approved the served policy, and when.
	ApprovedBy string    `json:"approved_by,omitempty"`
	ApprovedAt time.Time `json:"approved_at"`
	// Review is the file's version waiting for a human (a loosening), or "".
	Review string `json:"review,omitempty"`
	// Differs reports that the file and the approved policy differ (a review waits, or was
	// rejected).
	Differs bool `json:"differs"`
	// File is the version (hash) of the policy file as the console last read it, whether or not
	// it loaded; "": not read yet. The doctor compares it with the file on disk.
	File string `json:"file,omitempty"`
	// TLS is the address the console serves gates on over mutual TLS (console -tls-listen), and
	// HubTLS the hub's (-hub-tls-listen); "": none.
	TLS    string `json:"tls,omitempty"`
	HubTLS string `json:"hub_tls,omitempty"`
	// Gates is each gate (identity and instance) that fetched the policy over mutual TLS in the
	// last 10 minutes, with the version it last fetched, the first seen first: what each gate of
	// a fleet decides with, as the console sees it.
	Gates []GateSeen `json:"gates,omitempty"`
}

// HeaderGate names the gate instance on a fetch of the policy over mutual TLS: its host name (1
// to 64 letters, digits, '.', '_', '-' and ':'), so that the replicas of one identity (a
// Deployment's pods, which share a certificate) are told apart. Absent or malformed: "".
const HeaderGate = "LockHTTP-Gate"

// GateSeen is a gate instance's last fetch of the policy over mutual TLS.
type GateSeen struct {
	// ID is the identity its certificate proves (spiffe://lockhttp/gate/NAME).
	ID string `json:"id"`
	// Instance is the name the gate gave itself (HeaderGate), "" for none.
	Instance string `json:"instance,omitempty"`
	// Version and Tag are what it holds after the fetch: the policy's version and the tag of
	// policy and bindings (a 304 confirms the ones it had, a 200 gives it the served ones).
	Version string `json:"version"`
	Tag     string `json:"tag"`
	// At is when it last fetched; Since when it first fetched Version (the fan-out of a new
	// policy to it ends then); First when the console first saw it.
	At    time.Time `json:"at"`
	Since time.Time `json:"since"`
	First time.Time `json:"first"`
	// Remote is the address it last fetched from.
	Remote string `json:"remote"`
	// Fetches counts its fetches since the console started.
	Fetches int64 `json:"fetches"`
}

// ChannelStatus is one [[notify]] channel as the console's /status reports it: never its URL
// (its path may be the receiver's secret), only the host.
type ChannelStatus struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"`
	Human     bool      `json:"human"`
	Host      string    `json:"host"`
	Delivered int64     `json:"delivered"`
	Failed    int64     `json:"failed"`
	Dropped   int64     `json:"dropped"`
	Queued    int       `json:"queued"`
	LastOK    time.Time `json:"last_ok"`
	LastFail  time.Time `json:"last_fail"`
	// LastError is why the last failed delivery failed (its last attempt), without the URL.
	LastError string `json:"last_error,omitempty"`
}
