package hub

import (
	"context"
	"net/http"
)

type facadeKey struct{}

func withFacade(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, facadeKey{}, name)
}

func facadeOf(r *http.Request) string {
	if s, ok := r.Context().Value(facadeKey{}).(string); ok {
		return s
	}
	return "unknown"
}

// FacadeOf names the facade whose token r carried ("cli"), for a handler mounted with
// FacadeHandlerFunc; "unknown" elsewhere.
func FacadeOf(r *http.Request) string { return facadeOf(r) }
