package secrets

import (
	"strings"
	"testing"
)

func TestNewDetectorErrors(t *testing.T) {
	secret := "tiny" + "pw"
	tests := []struct {
		name string
		c    Config
		want string // in the error
	}{
		{"custom without name", Config{Custom: []Custom{{Pattern: "x+"}}}, "custom pattern 1: name is missing"},
		{"custom bad name", Config{Custom: []Custom{{Name: "a b", Pattern: "x+"}}}, `custom pattern "a b": the name may hold only`},
		{"custom twice", Config{Custom: []Custom{{Name: "a", Pattern: "x+"}, {Name: "a", Pattern: "y+"}}}, `custom pattern "a" is defined twice`},
		{"custom no pattern", Config{Custom: []Custom{{Name: "a"}}}, `custom pattern "a": pattern is missing`},
		{"custom bad regexp", Config{Custom: []Custom{{Name: "a", Pattern: "x("}}}, `custom pattern "a": pattern does not compile: error parsing regexp`},
		{"custom empty match", Config{Custom: []Custom{{Name: "a", Pattern: "x*"}}}, `custom pattern "a": pattern matches the empty string`},
		{"custom anchored", Config{Custom: []Custom{{Name: "a", Pattern: "^acme_[0-9]+$"}}}, `custom pattern "a": pattern uses ^, $`},
		{"custom bad host", Config{Custom: []Custom{{Name: "a", Pattern: "x+", Hosts: []string{"a.*.com"}}}}, `custom pattern "a": host pattern "a.*.com"`},
		{"custom ip host", Config{Custom: []Custom{{Name: "a", Pattern: "x+", Hosts: []string{"10.0.0.1"}}}}, `custom pattern "a": host pattern "10.0.0.1"`},
		{"custom host with port", Config{Custom: []Custom{{Name: "a", Pattern: "x+", Hosts: []string{"a.com:443"}}}}, "without a port"},
		{"injected without name", Config{Injected: []Injected{{Value: "long-enough-value"}}}, "injected secret 1 has no name"},
		{"injected short", Config{Injected: []Injected{{Name: "db", Value: secret}}}, `injected secret "db" is shorter than 8 bytes`},
		{"injected twice", Config{Injected: []Injected{{Name: "db", Value: "long-enough-1"}, {Name: "db", Value: "long-enough-2"}}}, `injected secret "db" is defined twice`},
		{"jwt hosts", Config{JWTHosts: []string{"*x.com"}}, `jwt hosts: host pattern "*x.com"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewDetector(tt.c)
			if err == nil {
				t.Fatalf("no error; want %q", tt.want)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Fatalf("error %q; want %q in it", msg, tt.want)
			}
			if strings.Contains(msg, secret) || strings.Contains(msg, "long-enough") {
				t.Fatalf("error %q shows an injected value", msg)
			}
			if msg != strings.ToLower(msg[:1])+msg[1:] || strings.HasSuffix(msg, ".") {
				t.Fatalf("error %q: want lower case, no final period", msg)
			}
		})
	}
}

func TestNewDetectorAccepts(t *testing.T) {
	d, err := NewDetector(Config{
		Custom: []Custom{
			{Name: "acme", Pattern: `acme_[0-9a-f]{32}`, Hosts: []string{"API.Acme.test.", "*.acme.test", "*"}},
			{Name: "word-bounded", Pattern: `\bzz[0-9]{10}\b`},
		},
		Injected: []Injected{{Name: "a", Value: "12345678"}, {Name: "b", Value: "12345678"}},
		JWTHosts: []string{"*.example.com"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.custom[0].hosts; strings.Join(got, ",") != "api.acme.test,*.acme.test,*" {
		t.Fatalf("hosts normalised to %v", got)
	}
	if d.custom[0].prefix.s != "acme_" || d.custom[1].prefix.s != "" {
		t.Fatalf("literal prefixes %q, %q", d.custom[0].prefix.s, d.custom[1].prefix.s)
	}
	if len(d.injected) != 1 {
		t.Fatalf("%d injected values; want the duplicate value once", len(d.injected))
	}
}

func TestHostMatch(t *testing.T) {
	tests := []struct {
		patterns []string
		host     string
		want     bool
	}{
		{[]string{"github.com"}, "github.com", true},
		{[]string{"github.com"}, "api.github.com", false},
		{[]string{"*.github.com"}, "api.github.com", true},
		{[]string{"*.github.com"}, "a.b.github.com", true},
		{[]string{"*.github.com"}, "github.com", false},
		{[]string{"*.github.com"}, "evilgithub.com", false},
		{[]string{"*"}, "anything.example", true},
		{nil, "github.com", false},
		{[]string{"github.com"}, "", false},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.patterns, ",")+"/"+tt.host, func(t *testing.T) {
			if got := hostMatch(tt.patterns, tt.host); got != tt.want {
				t.Fatalf("hostMatch = %v; want %v", got, tt.want)
			}
		})
	}
}

func TestBuiltinHosts(t *testing.T) {
	h := BuiltinHosts(KindGitHub)
	h[0] = "changed"
	if BuiltinHosts(KindGitHub)[0] != "github.com" {
		t.Fatal("BuiltinHosts returns the package's own slice")
	}
	if BuiltinHosts(KindPrivateKey) != nil && len(BuiltinHosts(KindPrivateKey)) != 0 {
		t.Fatal("private keys belong somewhere")
	}
}

func TestFindingHostsAreCopies(t *testing.T) {
	d := testDetector(t)
	r := newRequest("evil.example.net")
	r.Header.Set("X-T", fakeGitHub())
	fs := d.Scan(r)
	fs[0].Hosts[0] = "evil.example.net"
	if d.Egress(r) == nil {
		t.Fatal("changing a finding's Hosts changed the detector")
	}
}
