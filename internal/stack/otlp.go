package stack

import (
	"fmt"
	"net/url"
)

// CheckOTLPEndpoint checks lox run's --otlp-endpoint before the stack starts, with the rules the
// gate's -otlp-endpoint applies (tracing.ParseEndpoint; TestCheckOTLPEndpoint keeps the two
// alike): an http:// or https:// URL with a host, no user info, no query. lox does not link the
// OpenTelemetry SDK to check it. "" (no traces) is fine.
func CheckOTLPEndpoint(s string) error {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return fmt.Errorf("--otlp-endpoint %q: write the collector's OTLP/HTTP URL, such as http://127.0.0.1:4318", s)
	case u.User != nil:
		return fmt.Errorf("--otlp-endpoint %q: user info in the URL; give the collector's credentials in OTEL_EXPORTER_OTLP_HEADERS", s)
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("--otlp-endpoint %q: a query or fragment; give the collector's URL with its path only", s)
	}
	return nil
}
