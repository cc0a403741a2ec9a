package httpjson

import (
	"net/http/httptest"
	"testing"
)

func TestWrite(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		v          any
		wantStatus int
		wantBody   string
	}{
		{"a value", 201, map[string]string{"id": "t1"}, 201, `{"id":"t1"}` + "\n"},
		{"html stays inert", 200, "<script>", 200, `"\u003cscript\u003e"` + "\n"},
		{"a value that does not encode", 200, func() {}, 500, `{"error":"the answer could not be encoded as JSON"}` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			Write(rec, tc.status, tc.v)
			if rec.Code != tc.wantStatus || rec.Body.String() != tc.wantBody {
				t.Errorf("%d %q, want %d %q", rec.Code, rec.Body.String(), tc.wantStatus, tc.wantBody)
			}
			for k, want := range map[string]string{"Content-Type": "application/json", "Cache-Control": "no-store"} {
				if got := rec.Header().Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
		})
	}
}
