package judge

import (
	"testing"

	"github.com/lockhttp/lockhttp/internal/secrets"
)

// TestCredentialWords: a credential's kind is named with the article its sound takes.
func TestCredentialWords(t *testing.T) {
	for k, want := range map[secrets.Kind]string{
		secrets.KindGitHub:      "a github credential",
		secrets.KindAnthropic:   "an anthropic credential",
		secrets.KindAWS:         "an aws credential",
		secrets.KindOpenAI:      "an openai credential",
		secrets.KindHuggingFace: "a huggingface credential",
		secrets.KindPrivateKey:  "a private-key credential",
		"custom:acme":           "a custom:acme credential",
		"injected:example":      "a secret the gate injects (example) credential",
	} {
		if got := credentialWords(k); got != want {
			t.Errorf("credentialWords(%q) = %q, want %q", k, got, want)
		}
	}
}
