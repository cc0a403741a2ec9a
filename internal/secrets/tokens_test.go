package secrets

import (
	"encoding/base64"
	"strings"
)

// Fake credentials of every kind, built at run time from parts so that the repository holds no
// string a secret scanner would take for a real key.

func fakeGitHub() string { return "gh" + "p_" + strings.Repeat("a1B2", 9) }

func fakeGitHubFine() string {
	return "github" + "_pat_" + "11ABCDEFG0" + strings.Repeat("x9Y8", 3) + "_" + strings.Repeat("Qw3rT", 11) + "abcd"
}

func fakeAnthropic() string {
	return "sk-" + "ant-" + "api03-" + strings.Repeat("Ab3_xY9-", 12) + "AA"
}

func fakeAnthropicOAuth() string {
	return "sk-" + "ant-" + "oat01-" + strings.Repeat("Zq8-Rt5_", 11) + "AA"
}

func fakeOpenAI() string { return "sk-" + "proj-" + strings.Repeat("Ab3dEf9_", 20) }

func fakeOpenAILegacy() string { return "sk-" + strings.Repeat("Ab3dEf", 8) }

func fakeAWS() string { return "AK" + "IA" + "QWERTYUI23456789" }

func fakeAWSSecret() string { return "wJalr" + "Q7mNp/K7bZx9Tq+" + strings.Repeat("aB3d", 5) }

func fakeSlack() string {
	return "xo" + "xb-" + "1234567890-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx"
}

func fakeSlackHook() string {
	return "https://hooks.slack" + ".com/services/T0123ABCD/B0123ABCD/" + "AbCdEfGhIjKlMnOpQrStUvWx"
}

func fakeStripe() string { return "sk" + "_live_" + "4eC39HqLyjWDarjtT1zdp7dc" }

func fakeStripeTest() string { return "rk" + "_test_" + "51HxYzAbCdEfGhIjKlMnOp99" }

func fakeHuggingFace() string { return "hf" + "_" + strings.Repeat("AbCdEfGhIj", 3) + "KlMn" }

func fakeGoogle() string { return "AI" + "za" + "Sy" + strings.Repeat("Ab1-Cd2_E", 4)[:33] }

// fakeJWT builds a JWT with the given header and payload JSON.
func fakeJWT(header, payload string) string {
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(header)) + "." + enc.EncodeToString([]byte(payload)) + "." +
		enc.EncodeToString([]byte(strings.Repeat("sig!", 8)))
}

func fakeJWTIss() string {
	return fakeJWT(`{"alg":"HS256","typ":"JWT"}`, `{"sub":"agent","iss":"https://auth.example.com/"}`)
}

func fakeJWTNoIss() string { return fakeJWT(`{"alg":"RS256"}`, `{"sub":"agent","exp":1}`) }

func fakePEM(label string) string {
	line := strings.Repeat("MIIEvQIBADANBgkqhkiG9w0BAQEFAASC", 2)
	return "-----BEGIN " + label + "-----\n" + line + "\n" + line + "\n" + line[:20] + "==\n-----END " + label + "-----\n"
}
