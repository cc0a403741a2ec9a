package explaintest

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
)

// Credential-shaped values, built from parts so that the repository holds nothing a scanner
// takes for a real key; a case names them as ${NAME}.
var values = map[string]string{
	"GITHUB_TOKEN":    "ghp_" + strings.Repeat("a1B2", 9),
	"ANTHROPIC_KEY":   "sk-ant-api03-" + strings.Repeat("Xy7_", 20) + "AA",
	"ANTHROPIC_KEY_2": "sk-ant-api03-" + strings.Repeat("Qz9-", 20) + "BB",
	"OPENAI_KEY":      "sk-proj-" + strings.Repeat("Pq4R", 12),
	"AWS_KEY_ID":      "AKIA" + strings.Repeat("Q7W2", 4),
	"SLACK_TOKEN":     "xoxb-" + strings.Repeat("1234", 3) + "-" + strings.Repeat("Ab9c", 6),
	"STRIPE_KEY":      "sk_" + "live_" + strings.Repeat("R4nd", 7),
	"HF_TOKEN":        "hf_" + strings.Repeat("abcDEFghiJKLmno", 2) + "pqrs",
	"GOOGLE_KEY":      "AIza" + strings.Repeat("Sy3_", 8) + "k9-",
	"PRIVATE_KEY":     "-----BEGIN " + "PRIVATE KEY-----\n" + strings.Repeat("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", 3) + "\n-----END " + "PRIVATE KEY-----",
	"JWT": base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(`{"sub":"agent","iss":"issuer.example"}`)) + "." + strings.Repeat("s1G_", 11),
	"ACME_KEY":  "acme_" + strings.Repeat("Ab1", 8),
	"INJECTED":  "inj_" + strings.Repeat("Zq5", 8),
	"NPM_TOKEN": "npm_secret_value_" + "0123456789",
	"CR":        "\r",
	"LF":        "\n",
	"CRLF":      "\r\n",
	"TAB":       "\t",
}

// Names lists the ${NAME} values a case may use.
func Names() []string {
	out := make([]string, 0, len(values)+1)
	for k := range values {
		out = append(out, k)
	}
	out = append(out, "WORK")
	sort.Strings(out)
	return out
}

// Value is the value of ${name}, for tests that check where a credential went.
func Value(name string) string { return values[name] }

// funcs are ${func ARG}: ARG is the text after the first space, its own placeholders expanded
// first.
var funcs = map[string]func(arg string) (string, error){
	"repeat": func(arg string) (string, error) {
		n, s, _ := strings.Cut(arg, " ")
		k, err := strconv.Atoi(n)
		if err != nil || k < 0 || k > 16<<20 {
			return "", fmt.Errorf("${repeat N TEXT}: %q is not a count up to 16Mi", n)
		}
		return strings.Repeat(s, k), nil
	},
	"base64":    func(s string) (string, error) { return base64.StdEncoding.EncodeToString([]byte(s)), nil },
	"base64url": func(s string) (string, error) { return base64.RawURLEncoding.EncodeToString([]byte(s)), nil },
	"sha256": func(s string) (string, error) {
		sum := sha256.Sum256([]byte(s))
		return hex.EncodeToString(sum[:]), nil
	},
	"hex": func(s string) (string, error) {
		b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
		if err != nil {
			return "", fmt.Errorf("${hex ...}: %v", err)
		}
		return string(b), nil
	},
	"gzip": func(s string) (string, error) {
		var b bytes.Buffer
		w := gzip.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.String(), nil
	},
	"deflate": func(s string) (string, error) {
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.String(), nil
	},
	"br": func(s string) (string, error) {
		var b bytes.Buffer
		w := brotli.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return b.String(), nil
	},
	"upper": func(s string) (string, error) { return strings.ToUpper(s), nil },
	"lower": func(s string) (string, error) { return strings.ToLower(s), nil },
	// pct percent-encodes every byte that is not a letter or a digit.
	"pct": func(s string) (string, error) {
		var b strings.Builder
		for i := 0; i < len(s); i++ {
			c := s[i]
			if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
				b.WriteByte(c)
			} else {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		}
		return b.String(), nil
	},
}

// expander expands ${...} in one pass: what a function returns is never read again, so a
// binary body cannot hold a placeholder by chance.
type expander struct{ work string }

func (e *expander) expand(s string) ([]byte, error) {
	out, rest, err := e.until(s, false)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		return nil, fmt.Errorf("a '}' closes no ${")
	}
	return []byte(out), nil
}

// until expands s up to its end or, with closing, up to the '}' that closes the current ${;
// it returns the expansion and what follows that '}'.
func (e *expander) until(s string, closing bool) (string, string, error) {
	var b strings.Builder
	depth := 0 // braces opened inside the current ${...} (JSON in a function's argument)
	for s != "" {
		i := strings.IndexAny(s, "${}")
		if i < 0 {
			b.WriteString(s)
			return b.String(), "", e.unclosed(closing)
		}
		b.WriteString(s[:i])
		switch {
		case s[i] == '{':
			if closing {
				depth++
			}
			b.WriteByte('{')
			s = s[i+1:]
			continue
		case s[i] == '}' && closing && depth == 0:
			return b.String(), s[i+1:], nil
		case s[i] == '}':
			depth = max(depth-1, 0)
			b.WriteByte('}')
			s = s[i+1:]
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte('$')
			s = s[i+1:]
			continue
		}
		inner, after, err := e.until(s[i+2:], true)
		if err != nil {
			return "", "", err
		}
		v, err := e.eval(inner)
		if err != nil {
			return "", "", err
		}
		b.WriteString(v)
		s = after
	}
	return b.String(), "", e.unclosed(closing)
}

func (e *expander) unclosed(closing bool) error {
	if closing {
		return fmt.Errorf("a ${ is not closed by }")
	}
	return nil
}

func (e *expander) eval(inner string) (string, error) {
	name, arg, hasArg := strings.Cut(inner, " ")
	if !hasArg {
		if name == "WORK" {
			return e.work, nil
		}
		if v, ok := values[name]; ok {
			return v, nil
		}
	}
	if f, ok := funcs[name]; ok && hasArg {
		return f(arg)
	}
	return "", fmt.Errorf("${%s}: unknown; use one of %s, or a function: repeat N TEXT, base64, base64url, sha256, hex, gzip, deflate, br, upper, lower, pct", strings.Split(inner, " ")[0], strings.Join(Names(), ", "))
}

// ValueOfHash returns the credential-shaped ${NAME} value whose SHA-256 hex is hash (the hash a
// bind line names), for a test that makes the binding as a human would: by approving a
// request that carries the credential.
func ValueOfHash(hash string) (string, bool) {
	for _, v := range values {
		sum := sha256.Sum256([]byte(v))
		if hex.EncodeToString(sum[:]) == hash {
			return v, true
		}
	}
	return "", false
}
