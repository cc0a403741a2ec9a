package claudeapi

import (
	"fmt"
	"mime"
	"net/http"
	"strings"

	"github.com/lockhttp/lockhttp/internal/floor"
)

// isJSON reports whether the request's Content-Type is application/json (parameters ignored,
// case-insensitive); a missing, repeated or unreadable Content-Type is not.
func isJSON(h http.Header) (bool, string) {
	vs := headerValues(h, "Content-Type")
	switch len(vs) {
	case 0:
		return false, "the body has no Content-Type; a Messages API request is application/json"
	case 1:
	default:
		return false, "the request has more than one Content-Type header; parsers disagree about which is read"
	}
	mt, _, err := mime.ParseMediaType(vs[0])
	if err != nil {
		return false, fmt.Sprintf("the Content-Type %s cannot be read; a Messages API request is application/json", floor.Shown(vs[0], 64))
	}
	if mt != "application/json" {
		return false, fmt.Sprintf("the body is %s, not application/json, so its tools cannot be checked", floor.Shown(mt, 64))
	}
	return true, ""
}

// headerValues is every value of the header named name, however the map's key is spelt.
func headerValues(h http.Header, name string) []string {
	var out []string
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			out = append(out, vs...)
		}
	}
	return out
}
