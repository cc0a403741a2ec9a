package testkit

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// AuditRecords returns the audit records in dir (its *.jsonl day files), decoded, in file
// order, without the intent records (event "intent", written as a request goes out and
// completed by its own record: AuditIntents has them). A last line still being written (no line
// end yet) is left for the next call; any other line that is not JSON fails the test.
func AuditRecords(t testing.TB, dir string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range AuditAll(t, dir) {
		if rec["event"] != "intent" {
			out = append(out, rec)
		}
	}
	return out
}

// AuditIntents returns the intent records in dir, in file order.
func AuditIntents(t testing.TB, dir string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range AuditAll(t, dir) {
		if rec["event"] == "intent" {
			out = append(out, rec)
		}
	}
	return out
}

// AuditAll returns every record in dir, intents included, in file order.
func AuditAll(t testing.TB, dir string) []map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			data = data[:i+1]
		} else {
			data = nil
		}
		for _, line := range bytes.SplitAfter(data, []byte("\n")) {
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var rec map[string]any
			if err := json.Unmarshal(line, &rec); err != nil {
				t.Fatalf("%s: audit line %q: %v", f, line, err)
			}
			out = append(out, rec)
		}
	}
	return out
}

// AuditIDs returns the request ids that the audit records in dir name (AuditRecords), each with
// how many records name it: a record's own "id", and every id a summary record lists in its
// "ids" (audit summaries cover many requests in one record).
func AuditIDs(t testing.TB, dir string) map[string]int {
	t.Helper()
	ids := make(map[string]int)
	for _, rec := range AuditRecords(t, dir) {
		for _, id := range RecordIDs(rec) {
			ids[id]++
		}
	}
	return ids
}

// RecordIDs returns the request ids one decoded audit record names: its own "id", then the
// ids a summary record lists in "ids".
func RecordIDs(rec map[string]any) []string {
	var out []string
	if id, ok := rec["id"].(string); ok && id != "" {
		out = append(out, id)
	}
	list, _ := rec["ids"].([]any)
	for _, v := range list {
		if id, ok := v.(string); ok && id != "" {
			out = append(out, id)
		}
	}
	return out
}
