package gate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockhttp/lockhttp/internal/testkit"
)

const budgetExtra = `
[[rule]]
name = "tunnel"
hosts = ["origin.test"]
methods = ["CONNECT"]
verdict = "free"

[[budget]]
name = "rpm"
requests_per_minute = 2

[[budget]]
name = "up"
hosts = ["origin.test"]
bytes_up_per_hour = "1MiB"
`

// TestBudgetRefusal: a container over a budget is refused 429 E_BUDGET with the seconds until
// the window frees in Retry-After, before anything reaches the origin; the refusal is audited
// and GET /status shows the counts; a tunnel decided at the domain adds its bytes when it closes.
func TestBudgetRefusal(t *testing.T) {
	clk := testkit.NewClock(time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC))
	tg := startGateWith(t, nil, func(c *Config) { c.Now = clk.Now })
	tg.g.SetPolicy(policyWith(t, tg, budgetExtra))
	for i := 0; i < 2; i++ {
		resp, err := tg.client().Get(tg.url("/a"))
		if err != nil {
			t.Fatal(err)
		}
		readAll(resp)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d under the budget: %d %s", i, resp.StatusCode, resp.Header.Get(HeaderCode))
		}
	}
	resp, err := tg.client().Get(tg.url("/a"))
	if err != nil {
		t.Fatal(err)
	}
	body := readAll(resp)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(HeaderCode) != "E_BUDGET" || resp.Header.Get(HeaderRule) != "budget:rpm" || resp.Header.Get("Retry-After") != "61" {
		t.Fatalf("over the budget: %d %s %s Retry-After %q\n%s", resp.StatusCode, resp.Header.Get(HeaderCode), resp.Header.Get(HeaderRule), resp.Header.Get("Retry-After"), body)
	}
	if !strings.Contains(body, `has sent 2 requests in the last minute under budget "rpm"`) || !strings.Contains(body, "wait the Retry-After seconds") {
		t.Errorf("the body does not say why and what to do:\n%s", body)
	}
	if n := tg.origin.count(); n != 2 {
		t.Fatalf("the origin saw %d requests, want 2", n)
	}
	id := resp.Header.Get(HeaderRequest)
	var rec map[string]any
	for _, r := range tg.records(t) {
		if r["id"] == id {
			rec = r
		}
	}
	if rec == nil || rec["code"] != "E_BUDGET" || rec["rule"] != "budget:rpm" || rec["status"] != float64(429) {
		t.Fatalf("the refusal's audit record: %v", rec)
	}

	// GET /status: what the container used, and the refusal.
	st := budgetStatus(t, tg)
	if len(st.Budgets) != 2 || st.Budgets[0].Budget != "rpm" || st.Budgets[0].Container != "local" || st.Budgets[0].Requests != 2 || st.Budgets[0].Refused != 1 || st.Budgets[0].RequestsPerMinute != 2 {
		t.Fatalf("status budgets %+v", st.Budgets)
	}

	// The state the gate reports to the hub names the container over its budget.
	if bs := tg.g.BudgetState(); len(bs) != 1 || bs[0].Budget != "rpm" || bs[0].Container != "local" || bs[0].Percent != 100 || bs[0].Refused != 1 {
		t.Fatalf("budget state %+v", bs)
	}

	// A minute and a second later the window has room again; a CONNECT decided at the domain
	// counts, and its tunnel's bytes are added when it closes.
	clk.Advance(61 * time.Second)
	before := budgetStatus(t, tg).Budgets[1].BytesUp // the two GETs' paths and headers
	if before == 0 {
		t.Fatal("the GETs sent no bytes up")
	}
	c, err := net.Dial("tcp", tg.addr)
	if err != nil {
		t.Fatal(err)
	}
	o := fmt.Sprintf("origin.test:%d", tg.port)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", o, o)
	br := bufio.NewReader(c)
	cr, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || cr.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", err, cr)
	}
	sent := "POST /upload HTTP/1.1\r\nHost: " + o + "\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n" + strings.Repeat("x", 1000)
	io.WriteString(c, sent)
	io.Copy(io.Discard, br)
	c.Close()
	testkit.WaitFor(t, 5*time.Second, "the tunnel's bytes counted", func() bool {
		return budgetStatus(t, tg).Budgets[1].BytesUp == before+int64(len(sent))
	})
	if u := budgetStatus(t, tg).Budgets[0]; u.Requests != 1 {
		t.Fatalf("the CONNECT was not counted as one request: %+v", u)
	}
}

func budgetStatus(t *testing.T, tg *testGate) Status {
	t.Helper()
	rr := httptest.NewRecorder()
	tg.g.StatusHandler(StatusInfo{}).ServeHTTP(rr, httptest.NewRequest("GET", "/status", nil))
	var st Status
	if err := json.Unmarshal(rr.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st
}
