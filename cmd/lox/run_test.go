package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/stack"
)

func TestParseRun(t *testing.T) {
	operators := []int{0, 1000}
	tests := []struct {
		name     string
		args     []string
		argv     []string // the agent's command; nil: no agent
		uid      int
		headless bool
		pass     []string
		keyFile  string // --claude-key-file
		secrets  string // --secrets
		err      string // part of the error, or of what the flag package printed; "" none
	}{
		{name: "no command", args: []string{"--headless"}, headless: true},
		{name: "a command after --", args: []string{"--headless", "--", "sh", "-c", "id -u"}, argv: []string{"sh", "-c", "id -u"}, uid: stack.DefaultAgentUID, headless: true},
		{name: "the command's flags are its own", args: []string{"--agent-uid", "12345", "--", "tool", "--headless", "--", "x"}, argv: []string{"tool", "--headless", "--", "x"}, uid: 12345},
		{name: "variables to pass", args: []string{"--agent-env", "ANTHROPIC_API_KEY", "--agent-env", "LOG_LEVEL", "--", "claude"}, argv: []string{"claude"}, uid: stack.DefaultAgentUID, pass: []string{"ANTHROPIC_API_KEY", "LOG_LEVEL"}},
		{name: "a Claude key file", args: []string{"--claude-key-file", "/k/anthropic", "--headless"}, headless: true, keyFile: "/k/anthropic"},
		{name: "a Claude key file into --secrets, with a command", args: []string{"--claude-key-file", "/k/anthropic", "--secrets", "/s/secrets.toml", "--", "claude"}, argv: []string{"claude"}, uid: stack.DefaultAgentUID, keyFile: "/k/anthropic", secrets: "/s/secrets.toml"},
		{name: "--claude-key-file needs a file", args: []string{"--claude-key-file"}, err: "flag needs an argument: -claude-key-file"},
		{name: "uid 0 refused", args: []string{"--agent-uid", "0", "--", "sh"}, err: "--agent-uid 0 is root"},
		{name: "the operator's uid refused", args: []string{"--agent-uid", "1000", "--", "sh"}, err: "--agent-uid 1000 is the operator's"},
		{name: "a compose service's uid refused", args: []string{"--agent-uid", "10003", "--", "sh"}, err: "a lockhttp service's"},
		{name: "the compose group refused", args: []string{"--agent-uid", "10000", "--", "sh"}, err: "lockhttp group"},
		{name: "not a uid", args: []string{"--agent-uid", "-5", "--", "sh"}, err: "is not a uid"},
		{name: "nothing after --", args: []string{"--headless", "--"}, err: "nothing after --"},
		{name: "agent flags without a command", args: []string{"--agent-uid", "12345"}, err: "need a command"},
		{name: "an enclosure subnet without a command", args: []string{"--enclosure-subnet", "10.77.0.0/24"}, err: "need a command"},
		{name: "an enclosure subnet narrower than a /30", args: []string{"--enclosure-subnet", "10.77.0.0/31", "--", "sh"}, err: "narrower than a /30"},
		{name: "an IPv6 enclosure subnet", args: []string{"--enclosure-subnet", "fd00:77::/64", "--", "sh"}, err: "is not IPv4"},
		{name: "an enclosure subnet that is no CIDR", args: []string{"--enclosure-subnet", "10.77.0.0", "--", "sh"}, err: "give an IPv4 CIDR"},
		{name: "a command without --", args: []string{"sh", "-c", "x"}, err: `unexpected argument "sh"; to start an agent, put -- before its command`},
		{name: "a variable lox sets", args: []string{"--agent-env", "HTTPS_PROXY", "--", "sh"}, err: "lox sets HTTPS_PROXY"},
		{name: "a value instead of a name", args: []string{"--agent-env", "TOKEN=x", "--", "sh"}, err: "not a variable name"},
		{name: "the upstream proxy's credential", args: []string{"--agent-env", "LOCKHTTP_UPSTREAM_PROXY_AUTH", "--", "sh"}, err: "it carries the upstream proxy's credential, which only the gate holds"},
		{name: "the audit database's password", args: []string{"--agent-env", "LOCKHTTP_AUDIT_DSN", "--", "sh"}, err: "leave out --agent-env LOCKHTTP_AUDIT_DSN"},
		{name: "any lockhttp variable", args: []string{"--agent-env", "LOCKHTTP_ROOTS", "--", "sh"}, err: "lockhttp's variables (LOCKHTTP_*) never go to the agent"},
		{name: "npm's cafile in upper case", args: []string{"--agent-env", "NPM_CONFIG_CAFILE", "--", "sh"}, err: "lox sets npm_config_cafile"},
		{name: "a name that is no URL user", args: []string{"--agent-name", "a b", "--", "sh"}, err: "--agent-name"},
		{name: "a restart delay", args: []string{"--headless", "--restart-delay", "50ms"}, headless: true},
		{name: "no restart delay", args: []string{"--restart-delay", "0s"}, err: "--restart-delay 0s: give a duration above 0 and at most 3s"},
		{name: "a restart delay too long to see a crash loop", args: []string{"--restart-delay", "10s"}, err: "would never exit five times within a minute"},
		{name: "-- is never a flag's value", args: []string{"--policy", "--", "sh"}, err: "flag needs an argument: -policy"},
		{name: "an OTLP endpoint without a scheme", args: []string{"--otlp-endpoint", "127.0.0.1:4318"}, err: `--otlp-endpoint "127.0.0.1:4318": write the collector's OTLP/HTTP URL`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseRun(tc.args, io.Discard, &stderr, operators)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error()+"\n"+stderr.String(), tc.err) {
					t.Fatalf("error %v (printed %q), want one containing %q", err, stderr.String(), tc.err)
				}
				if o.Agent != nil {
					t.Errorf("an agent despite the error: %+v", o.Agent)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.ClaudeKeyFile != tc.keyFile || o.Secrets != tc.secrets {
				t.Errorf("claude key file %q, secrets %q; want %q, %q", o.ClaudeKeyFile, o.Secrets, tc.keyFile, tc.secrets)
			}
			if o.Headless != tc.headless {
				t.Errorf("headless %v, want %v", o.Headless, tc.headless)
			}
			if tc.argv == nil {
				if o.Agent != nil {
					t.Fatalf("agent %+v, want none", o.Agent)
				}
				return
			}
			if o.Agent == nil {
				t.Fatal("no agent")
			}
			if !reflect.DeepEqual(o.Agent.Argv, tc.argv) || o.Agent.UID != tc.uid || !reflect.DeepEqual(o.Agent.Pass, tc.pass) {
				t.Errorf("agent %q uid %d pass %q, want %q uid %d pass %q", o.Agent.Argv, o.Agent.UID, o.Agent.Pass, tc.argv, tc.uid, tc.pass)
			}
		})
	}
}

// TestParseRunEnclosureSubnet: --enclosure-subnet reaches the stack's options; without it the
// stack takes the default.
func TestParseRunEnclosureSubnet(t *testing.T) {
	o, err := parseRun([]string{"--enclosure-subnet", "10.77.0.0/24", "--", "sh"}, io.Discard, io.Discard, nil)
	if err != nil || o.Enclosure.Subnet != netip.MustParsePrefix("10.77.0.0/24") {
		t.Fatalf("subnet %v, %v", o.Enclosure.Subnet, err)
	}
	o, err = parseRun([]string{"--", "sh"}, io.Discard, io.Discard, nil)
	if err != nil || o.Enclosure.Subnet.IsValid() {
		t.Fatalf("subnet %v, %v; want none (the stack's default)", o.Enclosure.Subnet, err)
	}
}

// TestParseRunOTLP: --otlp-endpoint reaches the stack's options as given.
func TestParseRunOTLP(t *testing.T) {
	o, err := parseRun([]string{"--headless", "--otlp-endpoint", "http://127.0.0.1:4318"}, io.Discard, io.Discard, nil)
	if err != nil || o.OTLPEndpoint != "http://127.0.0.1:4318" {
		t.Fatalf("OTLPEndpoint %q, %v", o.OTLPEndpoint, err)
	}
}

func TestParseRunHelp(t *testing.T) {
	var stderr bytes.Buffer
	_, err := parseRun([]string{"-h"}, io.Discard, &stderr, nil)
	if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "-- COMMAND [ARGS...]") || !strings.Contains(stderr.String(), "-agent-uid") {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
}

// TestRunRefusesRootAgent drives the real command line: a refused uid is a usage error (2),
// and nothing starts.
func TestRunRefusesRootAgent(t *testing.T) {
	var stderr bytes.Buffer
	code := run([]string{"run", "--state", t.TempDir(), "--agent-uid", "0", "--", "true"}, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "lox run: --agent-uid 0 is root") {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
}

// TestRunRefusesUpstreamPassword drives the real command line: --upstream with a user:password
// part is a usage error (2) naming the fix, without the password, and nothing starts; the
// credentials file reaches the stack's options.
func TestRunRefusesUpstreamPassword(t *testing.T) {
	state := t.TempDir()
	var stderr bytes.Buffer
	code := run([]string{"run", "--headless", "--state", state, "--upstream", "http://alice:planted-pw-77@127.0.0.1:3128"}, io.Discard, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "lox run: --upstream has a user:password part") ||
		!strings.Contains(stderr.String(), "--upstream-credentials-file FILE") || strings.Contains(stderr.String(), "planted-pw") {
		t.Fatalf("exit %d:\n%s", code, stderr.String())
	}
	o, err := parseRun([]string{"--upstream", "http://127.0.0.1:3128", "--upstream-credentials-file", "/s/upstream.cred"}, io.Discard, io.Discard, nil)
	if err != nil || o.Upstream != "http://127.0.0.1:3128" || o.UpstreamCredentialsFile != "/s/upstream.cred" {
		t.Fatalf("options %q %q, %v", o.Upstream, o.UpstreamCredentialsFile, err)
	}
	if _, err := parseRun([]string{"--upstream-credentials-file", "/s/upstream.cred"}, io.Discard, io.Discard, nil); err == nil ||
		!strings.Contains(err.Error(), "--upstream-credentials-file needs --upstream") {
		t.Fatalf("a credentials file without a proxy: %v", err)
	}
}
