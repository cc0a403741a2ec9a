package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/gate"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/policy"
	"github.com/lockhttp/lockhttp/internal/propose"
	"github.com/lockhttp/lockhttp/internal/testkit"
)

// proposePolicy names 20 hosts, h01.test to h20.test, all on the test's one origin: h01 to h05
// trusted, h20's POSTs denied by a rule, everything else asks.
func proposePolicy(port int) string {
	var b strings.Builder
	b.WriteString("version = 1\ntrusted = [\"h01.test\", \"h02.test\", \"h03.test\", \"h04.test\", \"h05.test\"]\n\n")
	b.WriteString("[[rule]]\nname = \"no-posts-h20\"\nhosts = [\"h20.test\"]\nmethods = [\"POST\"]\nverdict = \"deny\"\n\n")
	fmt.Fprintf(&b, "[floor]\nallow_cidrs = [\"127.0.0.1/32\"]\nallow_ports = [%d]\n\n[floor.hosts]\n", port)
	for i := 1; i <= 20; i++ {
		fmt.Fprintf(&b, "\"h%02d.test\" = \"127.0.0.1\"\n", i)
	}
	b.WriteString("\n[sources]\nlocal = [\"127.0.0.0/8\"]\n\n[settings]\nhold = \"20s\"\n")
	return b.String()
}

// ask is one request of the scripted session and what the human at lox does with its ticket:
// "approve", "deny", or "" (nobody answers).
type ask struct {
	method, host, path, decide string
}

// sessionEnv drives a stack with one origin for every host.
type sessionEnv struct {
	*running
	port   int
	origin *originRecorder
}

func (e *sessionEnv) url(host, path string) string {
	return fmt.Sprintf("http://%s:%d%s", host, e.port, path)
}

func (e *sessionEnv) do(method, host, path string) result {
	c := (&coreEnv{running: e.running}).client()
	c.Timeout = 60 * time.Second
	req, _ := http.NewRequest(method, e.url(host, path), strings.NewReader(""))
	resp, err := c.Do(req)
	if err != nil {
		return result{err: err}
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return result{status: resp.StatusCode, code: resp.Header.Get(gate.HeaderCode), ticket: resp.Header.Get(gate.HeaderTicket),
		body: string(b) + "\nrequest " + resp.Header.Get(gate.HeaderRequest)}
}

func (e *sessionEnv) lox(t *testing.T, args ...string) (string, error) {
	return (&askEnv{running: e.running}).lox(t, args...)
}

// asks sends a batch of asks at once and, as a human at lox would, decides each ticket with lox
// approve or lox deny as it shows in lox tickets. The requests nobody answers go on in the
// background (done waits for them).
func (e *sessionEnv) asks(t *testing.T, batch []ask, done *sync.WaitGroup) {
	t.Helper()
	want := map[string]ask{}
	results := map[string]chan result{}
	for _, a := range batch {
		k := a.method + " " + e.url(a.host, a.path)
		if _, dup := want[k]; dup {
			t.Fatalf("%s twice in one batch: one ticket", k)
		}
		want[k] = a
		ch := make(chan result, 1)
		results[k] = ch
		done.Add(1)
		go func() { defer done.Done(); ch <- e.do(a.method, a.host, a.path) }()
	}
	decided := map[string]bool{}
	n := 0
	for _, a := range batch {
		if a.decide != "" {
			n++
		}
	}
	testkit.WaitFor(t, 60*time.Second, "every ticket of the batch decided", func() bool {
		for _, tk := range (&askEnv{running: e.running}).tickets(t) {
			k := tk.Method + " " + tk.URL
			a, ok := want[k]
			if !ok || decided[k] || a.decide == "" || tk.Status != hub.Pending {
				continue
			}
			args := []string{"approve", tk.ID}
			if a.decide == "deny" {
				args = []string{"deny", "--reason", "not this one", tk.ID}
			}
			if out, err := e.lox(t, args...); err != nil {
				t.Fatalf("lox %v: %v\n%s", args, err, out)
			}
			decided[k] = true
		}
		return len(decided) == n
	})
	for k, a := range want {
		if a.decide == "" {
			continue
		}
		r := <-results[k]
		switch {
		case a.decide == "approve" && r.status != 200:
			t.Fatalf("%s approved: %+v", k, r)
		case a.decide == "deny" && r.code != "E_DENIED":
			t.Fatalf("%s denied: %+v", k, r)
		}
	}
}

// proposeSession is the scripted agent session: batches of asks (a path asked twice is in two
// batches: its second ask opens a ticket of its own once the first is decided).
var proposeSession = [][]ask{
	{
		// Approved for every id: one rule, /api/v1/items/*.
		{"GET", "h06.test", "/api/v1/items/1", "approve"}, {"GET", "h06.test", "/api/v1/items/2", "approve"},
		{"GET", "h06.test", "/api/v1/items/3", "approve"}, {"GET", "h06.test", "/api/v1/items/4", "approve"},
		{"POST", "h07.test", "/upload/3f2a9c1b-0d4e-4f5a-9b6c-7d8e9f0a1b2c", "approve"},
		{"POST", "h07.test", "/upload/6c8e1f0a-1d2e-4a5b-8c7d-0e9f8a7b6c5d", "approve"},
		{"GET", "h08.test", "/status", "approve"},
		{"GET", "h09.test", "/blob/4b0a97a", "approve"}, {"GET", "h09.test", "/blob/5989811", "approve"},
		{"GET", "h10.test", "/docs/guide", "approve"},
		{"PUT", "h11.test", "/kv/1", "approve"}, {"PUT", "h11.test", "/kv/2", "approve"}, {"PUT", "h11.test", "/kv/3", "approve"},
		{"DELETE", "h12.test", "/tmp/17", "approve"}, {"DELETE", "h12.test", "/tmp/18", "approve"},
		{"GET", "h13.test", "/feed/Zk3pQ9vL2mX7tR4w", "approve"}, {"GET", "h13.test", "/feed/Qp8RnT2vXw5YzK1m", "approve"},
		// Denied every time: never proposed.
		{"POST", "h14.test", "/exfil/1", "deny"}, {"POST", "h14.test", "/exfil/2", "deny"}, {"POST", "h14.test", "/exfil/3", "deny"},
		// Three approved, one denied: the pattern is denied, and each path was approved once.
		{"GET", "h15.test", "/items/1", "approve"}, {"GET", "h15.test", "/items/2", "approve"},
		{"GET", "h15.test", "/items/3", "approve"}, {"GET", "h15.test", "/items/4", "deny"},
		// /search/a approved twice, /search/secret denied: /search/a alone.
		{"GET", "h16.test", "/search/a", "approve"}, {"GET", "h16.test", "/search/secret", "deny"},
		// /v2/things/1 and /2 approved twice each, /v2/things/admin denied: /v2/things/* would free
		// the denial, so each path on its own.
		{"GET", "h17.test", "/v2/things/1", "approve"}, {"GET", "h17.test", "/v2/things/2", "approve"},
		{"GET", "h17.test", "/v2/things/admin", "deny"},
		// Approved once: nothing yet.
		{"GET", "h18.test", "/once", "approve"},
		// Nobody answers.
		{"GET", "h19.test", "/never/1", ""}, {"GET", "h19.test", "/never/2", ""},
	},
	{
		{"GET", "h06.test", "/api/v1/items/5", "approve"}, {"GET", "h06.test", "/api/v1/items/6", "approve"},
		{"POST", "h07.test", "/upload/0e9f8a7b-6c5d-4e3f-9a1b-2c3d4e5f6a7b", "approve"},
		{"GET", "h08.test", "/status", "approve"},
		{"GET", "h09.test", "/blob/a83f916", "approve"},
		{"GET", "h10.test", "/docs/guide", "approve"},
		{"PUT", "h11.test", "/kv/4", "approve"},
		{"GET", "h13.test", "/feed/Vb7NcM3xLk9PqW2e", "approve"},
		{"GET", "h16.test", "/search/a", "approve"},
		{"GET", "h17.test", "/v2/things/1", "approve"}, {"GET", "h17.test", "/v2/things/2", "approve"},
		{"GET", "h14.test", "/exfil/4", "deny"},
	},
}

// proposeWant are the rules the session must teach, by method, host and the paths of the form
// taken (the general one when there is one).
var proposeWant = []string{
	"GET h06.test /api/v1/items/*",
	"POST h07.test /upload/*",
	"GET h08.test /status",
	"GET h09.test /blob/*",
	"GET h10.test /docs/guide",
	"PUT h11.test /kv/*",
	"DELETE h12.test /tmp/*",
	"GET h13.test /feed/*",
	"GET h16.test /search/a",
	"GET h17.test /v2/things/1",
	"GET h17.test /v2/things/2",
}

// recordSession drives a real stack under lox run --headless through the session: 480 free or
// refused requests to 20 hosts, and the asks, decided by lox approve and lox deny as they come.
// It returns the stopped stack's environment, with the session's requests counted.
func recordSession(t *testing.T) (*sessionEnv, int) {
	t.Helper()
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	t.Cleanup(o.Close)
	port := o.Listener.Addr().(*net.TCPAddr).Port
	r := startStack(t, proposePolicy(port))
	e := &sessionEnv{running: r, port: port, origin: rec}
	sent := 0
	// Reads of trusted hosts (free) and POSTs a rule refuses: learnt from by nobody.
	var wg sync.WaitGroup
	work := make(chan int)
	var mu sync.Mutex
	var bad []string
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				host, method, want := fmt.Sprintf("h%02d.test", 1+i%5), "GET", 200
				if i%24 == 23 {
					host, method, want = "h20.test", "POST", 403
				}
				if res := e.do(method, host, fmt.Sprintf("/page/%d", i)); res.status != want {
					mu.Lock()
					bad = append(bad, fmt.Sprintf("%s %s: %+v", method, host, res))
					mu.Unlock()
				}
			}
		}()
	}
	for i := 0; i < 480; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	sent += 480
	if len(bad) > 0 {
		t.Fatalf("%d of the free and refused requests went otherwise: %v", len(bad), bad[:min(3, len(bad))])
	}
	var pending sync.WaitGroup
	for _, batch := range proposeSession {
		e.asks(t, batch, &pending)
		sent += len(batch)
	}
	pending.Wait() // the asks nobody answered end E_PENDING after the hold
	r.stop()
	return e, sent
}

// proposeOut is lockhttp propose --json.
type proposeOut struct {
	propose.Result
	Diffs map[string]struct{ General, Exact string } `json:"diffs"`
}

func runPropose(t *testing.T, args ...string) proposeOut {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "lockhttp"), append([]string{"propose", "--json"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lockhttp propose: %v\n%s", err, out)
	}
	var got proposeOut
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("lockhttp propose --json: %v\n%s", err, out)
	}
	return got
}

func proposalKey(p *propose.Proposal) string {
	f := p.Form(false)
	return p.Method + " " + p.Host + " " + strings.Join(f.Rule.Paths, ",")
}

// TestProposeFromARecordedSession: a scripted agent session under lox run --headless, 500
// requests and more over 20 hosts, its asks approved and denied with lox; lockhttp propose
// --state proposes exactly the rules for what humans approved more than once and never denied;
// each, taken with :propose and approved with :review in the console's terminal, is written to
// the policy file with its comment; the gate then frees what humans approved more than once
// (and the other ids of a generalised segment), and nothing a human denied.
func TestProposeFromARecordedSession(t *testing.T) {
	requireTool(t, "tmux")
	e, sent := recordSession(t)
	if sent < 500 {
		t.Fatalf("the session sent %d requests", sent)
	}
	got := runPropose(t, "--state", e.state)
	keys := map[string]*propose.Proposal{}
	for i := range got.Proposals {
		keys[proposalKey(&got.Proposals[i])] = &got.Proposals[i]
	}
	var have []string
	for k := range keys {
		have = append(have, k)
	}
	sort.Strings(have)
	want := slices.Clone(proposeWant)
	sort.Strings(want)
	if !slices.Equal(have, want) {
		t.Fatalf("proposals:\n  %s\nwant:\n  %s", strings.Join(have, "\n  "), strings.Join(want, "\n  "))
	}
	items := keys["GET h06.test /api/v1/items/*"]
	if items.Approvals != 6 || items.General == nil || items.General.Freed < 6 || items.General.Saved != 6 || len(items.Examples) != 3 ||
		items.Container != "local" || !strings.Contains(got.Diffs[items.ID].General, "+ paths = [\"/api/v1/items/*\"]") {
		t.Errorf("the items proposal: %+v\n%+v\n%s", items, items.General, got.Diffs[items.ID].General)
	}
	for _, d := range []string{"h14.test", "h15.test", "h18.test", "h19.test", "h01.test", "h20.test"} {
		for k := range keys {
			if strings.Contains(k, " "+d+" ") {
				t.Errorf("proposed for %s: %s", d, k)
			}
		}
	}
	if got.Read < 500 || got.Learnt == 0 {
		t.Errorf("read %d records, learnt from %d asks", got.Read, got.Learnt)
	}
	runProposeDoc(t, e.state, len(proposeWant))

	// The console's terminal: each proposal taken and approved, one rule at a time.
	s := &tmuxStack{tmux: requireTool(t, "tmux"), session: fmt.Sprintf("lockhttp-e2e-%d", time.Now().UnixNano()), state: e.state, policy: e.policy}
	s.launch(t)
	e.running.up = s.up
	for _, k := range proposeWant {
		takeAndApprove(t, s, keys[k].ID, false)
	}
	final, _ := os.ReadFile(s.policy)
	if n := strings.Count(string(final), "# Learned: proposal "); n != len(proposeWant) {
		t.Errorf("%d learnt rules in the policy file, want %d:\n%s", n, len(proposeWant), final)
	}
	gatePolledAfter(t, s.up, time.Now())

	// What humans approved more than once goes out without asking, and so do the other ids of a
	// generalised segment; what they denied does not.
	for _, a := range []ask{
		{"GET", "h06.test", "/api/v1/items/3", ""}, {"GET", "h06.test", "/api/v1/items/4242", ""},
		{"POST", "h07.test", "/upload/0e9f8a7b-6c5d-4e3f-9a1b-2c3d4e5f6a7b", ""}, {"GET", "h08.test", "/status", ""},
		{"GET", "h09.test", "/blob/4b0a97a", ""}, {"GET", "h10.test", "/docs/guide", ""}, {"PUT", "h11.test", "/kv/9", ""},
		{"DELETE", "h12.test", "/tmp/17", ""}, {"GET", "h13.test", "/feed/Zk3pQ9vL2mX7tR4w", ""},
		{"GET", "h16.test", "/search/a", ""}, {"GET", "h17.test", "/v2/things/1", ""}, {"GET", "h17.test", "/v2/things/2", ""},
	} {
		res := e.do(a.method, a.host, a.path)
		if res.status != 200 || res.ticket != "" {
			t.Errorf("%s %s%s after the review: %+v", a.method, a.host, a.path, res)
			continue
		}
		id := res.body[strings.LastIndex(res.body, "request ")+len("request "):]
		if m := e.recordFor(id); m["verdict"] != "FREE" || !strings.HasPrefix(fmt.Sprint(m["rule"]), "learned-") {
			t.Errorf("%s %s%s: record %v", a.method, a.host, a.path, m)
		}
	}
	for _, a := range []ask{
		{"POST", "h14.test", "/exfil/1", ""}, {"POST", "h14.test", "/exfil/9", ""}, {"GET", "h15.test", "/items/4", ""},
		{"GET", "h16.test", "/search/secret", ""}, {"GET", "h17.test", "/v2/things/admin", ""}, {"GET", "h17.test", "/v2/things/3", ""},
		{"GET", "h18.test", "/once", ""}, {"GET", "h19.test", "/never/1", ""},
	} {
		out, err := exec.Command(filepath.Join(binDir, "lockhttp"), "explain", "--state", s.state, a.method, e.url(a.host, a.path)).Output()
		var d struct{ Verdict, Rule string }
		if err != nil || json.Unmarshal(out, &d) != nil || d.Verdict != "ASK" {
			t.Errorf("%s %s%s after the review: %v %s; want ASK", a.method, a.host, a.path, err, out)
		}
	}
	s.quit(t)
}

// runProposeDoc runs docs/proposals.md's command block as a user would, in a directory whose
// .lockfamily is the stack's state: each command succeeds and names the proposals.
func runProposeDoc(t *testing.T, state string, proposals int) {
	t.Helper()
	blocks, err := readDocBlocks(filepath.Join("..", "..", "docs", "proposals.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(blocks, func(b docBlock) bool { return b.Name == "propose" })
	if i < 0 {
		t.Fatal("docs/proposals.md has no propose block")
	}
	dir := t.TempDir()
	if err := os.Symlink(state, filepath.Join(dir, ".lockfamily")); err != nil {
		t.Fatal(err)
	}
	lines := commandLines(blocks[i].Script)
	if len(lines) != 2 {
		t.Fatalf("the propose block: %q", lines)
	}
	for _, line := range lines {
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "PATH="+binDir+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("docs/proposals.md: %s: %v\n%s", line, err, out)
		}
		n := strings.Count(string(out), "Proposal ")
		if strings.Contains(line, "--json") {
			var res propose.Result
			if json.Unmarshal(out, &res) != nil {
				t.Fatalf("%s: not JSON:\n%s", line, out)
			}
			n = len(res.Proposals)
		}
		if n != proposals {
			t.Errorf("docs/proposals.md: %s: %d proposals, want %d:\n%s", line, n, proposals, out)
		}
	}
}

// takeAndApprove takes proposal id with :propose take and approves it with :review approve, as
// a person at the console's terminal: the policy file gains that rule and nothing else, and the
// console approves exactly that file.
func takeAndApprove(t *testing.T, s *tmuxStack, id string, exact bool) {
	t.Helper()
	before, _ := os.ReadFile(s.policy)
	cmd := "propose take " + id
	if exact {
		cmd += " exact"
	}
	var after []byte
	// An Escape and the ':' after it can reach the UI in one read (alt+':'): the command is typed
	// again until it has done its work, as a person would.
	untilDone(t, s, cmd, "the rule of "+id+" in the policy file", func() bool {
		after, _ = os.ReadFile(s.policy)
		return string(after) != string(before)
	})
	rest, ok := strings.CutPrefix(string(after), string(before))
	if !ok || strings.Count(rest, "[[rule]]") != 1 || !strings.Contains(rest, "# Learned: proposal "+id+", taken with :propose at the console's terminal by terminal:") {
		t.Fatalf("the policy file after :propose take %s gained more than one rule, or no comment:\n%s", id, rest)
	}
	version := strings.TrimPrefix(policy.Hash(after), "sha256:")
	s.keys("Escape")
	testkit.WaitFor(t, 15*time.Second, "the console to find the loosening", func() bool {
		return strings.Contains(s.screen(), "WAIT FOR REVIEW")
	})
	untilDone(t, s, "review approve "+version[:12], "the console to approve "+version[:12], func() bool {
		data, err := os.ReadFile(filepath.Join(s.state, "console-state.json"))
		var st struct{ Approved struct{ Version, By string } }
		return err == nil && json.Unmarshal(data, &st) == nil && st.Approved.Version == "sha256:"+version &&
			strings.HasPrefix(st.Approved.By, "terminal:")
	})
}

// untilDone types cmd in the terminal until done holds, within 30 s.
func untilDone(t *testing.T, s *tmuxStack, cmd, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s of :%s\n%s", what, cmd, s.screen())
		}
		s.keys("Escape")
		s.command(cmd)
		for end := time.Now().Add(5 * time.Second); !done() && time.Now().Before(end); {
			time.Sleep(50 * time.Millisecond) // polling the files the command writes
		}
	}
}

// TestProposeInTheTerminal: in the console's terminal, :propose lists what a short session
// taught; :propose show shows a proposal's counts, examples and what it would have freed and
// also frees; :propose take and :review approve change the policy file by that one rule, with
// its comment, and nothing else: the other proposal stays out.
func TestProposeInTheTerminal(t *testing.T) {
	rec := &originRecorder{}
	o := httptest.NewServer(rec)
	defer o.Close()
	port := o.Listener.Addr().(*net.TCPAddr).Port
	s := startTmuxStack(t, proposePolicy(port))
	e := &sessionEnv{running: &running{t: t, state: s.state, policy: s.policy, up: s.up}, port: port, origin: rec}
	var pending sync.WaitGroup
	e.asks(t, []ask{
		{"GET", "h06.test", "/api/v1/items/1", "approve"}, {"GET", "h06.test", "/api/v1/items/2", "approve"},
		{"GET", "h06.test", "/api/v1/items/3", "approve"}, {"GET", "h08.test", "/status", "approve"},
		{"POST", "h14.test", "/exfil/1", "deny"},
	}, &pending)
	e.asks(t, []ask{{"GET", "h08.test", "/status", "approve"}, {"POST", "h14.test", "/exfil/2", "deny"}}, &pending)
	pending.Wait()
	got := runPropose(t, "--state", s.state)
	if len(got.Proposals) != 2 {
		t.Fatalf("proposals: %+v", got.Proposals)
	}
	var items, status *propose.Proposal
	for i := range got.Proposals {
		switch got.Proposals[i].Host {
		case "h06.test":
			items = &got.Proposals[i]
		case "h08.test":
			status = &got.Proposals[i]
		}
	}
	if items == nil || status == nil {
		t.Fatalf("proposals: %+v", got.Proposals)
	}

	untilDone(t, s, "propose", "the list of proposals", func() bool {
		sc := s.screen()
		return strings.Contains(sc, items.ID+"  free GET h06.test /api/v1/items/* for local") && strings.Contains(sc, status.ID+"  free GET h08.test /status for local")
	})
	var shown string
	untilDone(t, s, "propose show "+items.ID, "the proposal's review", func() bool {
		shown = s.screen()
		return strings.Contains(shown, "Proposal "+items.ID+": free GET h06.test /api/v1/items/* for container local")
	})
	for _, want := range []string{
		"asked 3 times, first ",
		"humans approved it in 3 decisions (cli:",
		fmt.Sprintf("GET http://h06.test:%d/api/v1/items/1", port),
		fmt.Sprintf("GET http://h06.test:%d/api/v1/items/2", port),
		"would have freed 3 observed requests; also frees unbounded never observed (segment 4 takes any value)",
		"every other value of segment 4 of /api/v1/items/* (a * matches any one segment, not only a number)",
		"paths = [/api/v1/items/1, /api/v1/items/2, /api/v1/items/3]",
		"would have freed 3 observed requests; also frees 0 paths never observed",
		"+ paths = [\"/api/v1/items/*\"]",
		":propose take " + items.ID,
	} {
		if !strings.Contains(shown, want) {
			t.Errorf("the review does not show %q:\n%s", want, shown)
		}
	}

	before, _ := os.ReadFile(s.policy)
	takeAndApprove(t, s, items.ID, false)
	after, _ := os.ReadFile(s.policy)
	block, err := items.Block(items.General, propose.Origin{Tool: ":propose at the console's terminal", By: "terminal:" + whoami(t), At: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(propose.Apply(before, block)) {
		t.Errorf("the policy file is not the approved one and that rule:\n--- before\n%s\n--- after\n%s", before, after)
	}
	if strings.Contains(string(after), status.ID) {
		t.Error("the other proposal was written too")
	}
	pol, err := policy.Load(s.policy, after)
	if err != nil || pol.RuleCount() != 2 {
		t.Fatalf("the policy file: %v, %d rules", err, pol.RuleCount())
	}
	// Its other ids are free now; the other proposal's request still asks.
	gatePolledAfter(t, s.up, time.Now())
	if r := e.do("GET", "h06.test", "/api/v1/items/99"); r.status != 200 || r.ticket != "" {
		t.Errorf("an id of the approved pattern: %+v", r)
	}
	out, err := exec.Command(filepath.Join(binDir, "lockhttp"), "explain", "--state", s.state, "GET", e.url("h08.test", "/status")).Output()
	if err != nil || !strings.Contains(string(out), `"verdict":"ASK"`) && !strings.Contains(string(out), `"verdict": "ASK"`) {
		t.Errorf("the proposal not taken applied: %v %s", err, out)
	}
	s.quit(t)
}

// whoami is the name the console's terminal decides as: the user running the tests.
func whoami(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("id", "-un").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
