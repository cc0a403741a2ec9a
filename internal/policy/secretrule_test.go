package policy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/lockhttp/lockhttp/internal/secrets"
)

// secretPolicy is a policy with one [[secret]]: the name is on line 4, the pattern on line 5, the
// hosts on line 6.
func secretPolicy(name, pattern string, hosts []string) string {
	quoted := make([]string, len(hosts))
	for i, h := range hosts {
		quoted[i] = fmt.Sprintf("%q", h)
	}
	return fmt.Sprintf("version = 1\n\n[[secret]]\nname = %q\npattern = '%s'\nhosts = [%s]\n",
		name, pattern, strings.Join(quoted, ", "))
}

// errorLine is "file:line: label: what is wrong; the fix".
var errorLine = regexp.MustCompile(`^secret\.toml:(\d+): secret (?:"[^"]*"|#\d+): [^;]+; .+$`)

// TestSecretRulesAsTheGateBuildsThem: the console compiles a [[secret]] exactly when the gate's
// detector accepts it (the gate builds secrets.NewDetector from the policy's rules), and a refusal
// names the line of the field at fault, what is wrong and the fix.
func TestSecretRulesAsTheGateBuildsThem(t *testing.T) {
	acme := []string{"api.acme.example"}
	tests := []struct {
		name    string
		secret  string // the [[secret]] name
		pattern string
		hosts   []string
		line    int    // the line of the error; 0: accepted
		want    string // in the error
	}{
		{"plain", "acme", `acme_[0-9a-f]{32}`, acme, 0, ""},
		{"word boundaries", "acme", `\bacme_[0-9a-f]{32}\b`, acme, 0, ""},
		{"dollar in a class", "acme", `acme_[$0-9a-f]{32}`, acme, 0, ""},
		{"escaped caret and dollar", "acme", `acme\^[0-9]+\$`, acme, 0, ""},
		{"may match JSON escapes", "acme", `acme_[^ ]{16}`, acme, 0, ""},
		{"wildcard and every host", "acme", `acme_[0-9a-f]{32}`, []string{"*.acme.example", "*"}, 0, ""},
		{"no hosts", "acme", `acme_[0-9a-f]{32}`, nil, 0, ""},

		{"begins with ^", "acme", `^acme_[0-9a-f]{32}`, acme, 5, "pattern uses ^, $, \\A or \\z"},
		{"ends with $", "acme", `acme_[0-9a-f]{32}$`, acme, 5, "remove them (use \\b for a word boundary)"},
		{"\\A and \\z", "acme", `\Aacme_[0-9a-f]{32}\z`, acme, 5, "pattern uses ^, $"},
		{"multi-line ^", "acme", `(?m)^acme_[0-9a-f]{32}`, acme, 5, "pattern uses ^, $"},
		{"multi-line $", "acme", `(?m)acme_[0-9a-f]{32}$`, acme, 5, "pattern uses ^, $"},
		{"^ in an alternation", "acme", `(?:^|[^0-9a-z])acme_[0-9a-f]{32}`, acme, 5, "pattern uses ^, $"},
		{"$ in a repeated group", "acme", `acme_(?:[0-9a-f]|$)+`, acme, 5, "pattern uses ^, $"},
		{"empty match", "acme", `x*`, acme, 5, "pattern matches the empty string"},
		{"no pattern", "acme", ``, acme, 5, "pattern is missing"},
		{"bad syntax", "acme", `acme_[A-Z`, acme, 5, "pattern does not compile"},
		{"bad name", "a b", `acme_[0-9a-f]{32}`, acme, 4, "the name may hold only letters"},
		{"long name", strings.Repeat("n", 65), `acme_[0-9a-f]{32}`, acme, 4, "(at most 64)"},
		{"no name", "", `acme_[0-9a-f]{32}`, acme, 4, "name is missing"},
		{"star inside a host", "acme", `acme_[0-9a-f]{32}`, []string{"api.*.example"}, 6, `host pattern "api.*.example"`},
		{"host with a port", "acme", `acme_[0-9a-f]{32}`, []string{"api.acme.example:443"}, 6, "without a port; remove the port"},
		{"IP literal host", "acme", `acme_[0-9a-f]{32}`, []string{"10.0.0.1"}, 6, "use a host name"},
		{"empty host", "acme", `acme_[0-9a-f]{32}`, []string{""}, 6, "the host is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Load("secret.toml", []byte(secretPolicy(tt.secret, tt.pattern, tt.hosts)))
			_, gateErr := secrets.NewDetector(secrets.Config{Custom: []secrets.Custom{{Name: tt.secret, Pattern: tt.pattern, Hosts: tt.hosts}}})
			if (err == nil) != (gateErr == nil) {
				t.Fatalf("the console and the gate disagree: policy error %v; detector error %v", err, gateErr)
			}
			if tt.line == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				rules := p.SecretRules()
				if len(rules) != 1 || rules[0].Name != tt.secret || rules[0].Pattern != tt.pattern {
					t.Fatalf("secret rules %+v", rules)
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted; want line %d: %q", tt.line, tt.want)
			}
			msg := err.Error()
			m := errorLine.FindStringSubmatch(msg)
			if m == nil {
				t.Fatalf("error %q is not file:line: secret \"name\": what is wrong; the fix", msg)
			}
			if m[1] != fmt.Sprint(tt.line) {
				t.Errorf("error %q is on line %s; want %d", msg, m[1], tt.line)
			}
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q; want %q in it", msg, tt.want)
			}
		})
	}
}

// TestSecretRulesTheGateRefusesAreNotApproved: a policy whose [[secret]] the gate would refuse
// does not compile, so the console cannot approve it; the second of two rules is the one named.
func TestSecretRulesTheGateRefusesAreNotApproved(t *testing.T) {
	src := `version = 1

[[secret]]
name = "acme-test"
pattern = 'acme_test_[0-9a-f]{32}'

[[secret]]
name = "acme-live"
pattern = '^acme_live_[0-9a-f]{32}$'
hosts = ["api.acme.example"]
`
	doc, err := Decode("secret.toml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	err = doc.Validate()
	if err == nil || !strings.HasPrefix(err.Error(), `secret.toml:9: secret "acme-live": pattern uses ^, $`) {
		t.Fatalf("validate: %v", err)
	}
	if p, err := doc.Compile(); p != nil || err == nil {
		t.Fatalf("compiled %v, %v", p, err)
	}
}

// TestSecretRuleDuplicateName: two [[secret]] with one name are refused at the second's name.
func TestSecretRuleDuplicateName(t *testing.T) {
	src := "version = 1\n\n[[secret]]\nname = \"acme\"\npattern = 'a_[0-9]{8}'\n\n[[secret]]\nname = \"acme\"\npattern = 'b_[0-9]{8}'\n"
	_, err := Load("secret.toml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), `secret.toml:8: secret "acme": the name is used twice`) {
		t.Fatalf("err %v", err)
	}
}
