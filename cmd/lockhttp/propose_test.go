package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/policy"
)

const proposeTOML = `version = 1
[sources]
local = ["127.0.0.1"]
other = ["127.0.0.2"]
`

// proposeState writes a state directory as lox run leaves it: the approved policy, an audit
// whose asks of local were approved twice (and of other once), no hub state.
func proposeState(t *testing.T) string {
	t.Helper()
	state := t.TempDir()
	st := map[string]any{"version": 1, "approved": console.Approved{Version: policy.Hash([]byte(proposeTOML)), Name: "policy.toml", TOML: proposeTOML, By: "operator", At: time.Now()}}
	data, _ := json.Marshal(st)
	os.WriteFile(filepath.Join(state, consoleStateFile), data, 0o600)
	now := time.Now().UTC()
	w, err := audit.Open(audit.Options{Dir: filepath.Join(state, "audit"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range []*audit.Record{
		{Container: "local", Method: "GET", URL: "https://api.example.com/v1/items/1", Ticket: "t1"},
		{Container: "local", Method: "GET", URL: "https://api.example.com/v1/items/2", Ticket: "t2"},
		{Container: "other", Method: "GET", URL: "https://api.example.com/v1/items/3", Ticket: "t3"},
	} {
		r.Time, r.Event, r.Verdict, r.Rule, r.Approver, r.ID = now.Add(time.Duration(i)*time.Second), "tunnel-request", "ASK", "default", "cli:root", r.Ticket
		if err := w.Write(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	return state
}

func TestProposeCommand(t *testing.T) {
	state := proposeState(t)
	var out, errb bytes.Buffer
	if code := run([]string{"propose", "--state", state}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"proposals: 1.", "free GET api.example.com /v1/items/* for container local", "+ paths = [\"/v1/items/*\"]",
		"+ containers = [\"local\"]", "would have freed 2 observed requests", ":propose take ID"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"propose", "--state", state, "--container", "other", "--json"}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var res proposeJSON
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res.Proposals) != 0 || res.Asked != 3 {
		t.Errorf("--container other (approved once): %v %+v", err, res)
	}
	// A period after the asks: nothing.
	out.Reset()
	if code := run([]string{"propose", "--state", state, "--json", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, nil, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if err := json.Unmarshal(out.Bytes(), &res); err != nil || len(res.Proposals) != 0 {
		t.Errorf("a period after the asks: %v %+v", err, res)
	}
}

type proposeJSON struct {
	Asked     int
	Proposals []json.RawMessage
	Diffs     map[string]struct{ General, Exact string }
}

func TestProposeUsageErrors(t *testing.T) {
	state := proposeState(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"propose"}, 2, "give --state DIR"},
		{[]string{"propose", "--audit", state + "/audit", "--hub-state", state + "/hub.json"}, 2, "give --policy FILE"},
		{[]string{"propose", "--state", state, "--since", "yesterday"}, 2, "--since \"yesterday\": write a duration back from now (7d, 36h) or a date"},
		{[]string{"propose", "--state", state, "--container", "ghost"}, 2, "not a container of the policy's [sources]; name one of local, other"},
		{[]string{"propose", "--state", state, "extra"}, 2, "unexpected argument"},
		{[]string{"propose", "--state", t.TempDir()}, 1, "no approved policy"},
		{[]string{"propose", "--audit", state + "/audit", "--hub-state", state + "/nothing.json", "--policy", state + "/nothing.toml"}, 1, "policy:"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, nil, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: exit %d, %s; want %d and %q", tc.args, code, errb.String(), tc.code, tc.want)
		}
	}
}
