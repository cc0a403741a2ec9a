package phone

import "testing"

func TestLoopbackOnly(t *testing.T) {
	for _, tc := range []struct {
		link string
		want bool
	}{
		{"http://127.0.0.1:3131/phone/#pair=abc", true},
		{"http://127.1.2.3:3131", true},
		{"http://[::1]:3131/phone/", true},
		{"http://[::ffff:127.0.0.1]:3131", true},
		{"http://localhost:3131", true},
		{"http://LOCALHOST.:3131", true},
		{"http://hub.localhost:3131", true},
		{"http://192.168.1.20:3131/phone/#pair=abc", false},
		{"https://hub.example.net/phone/", false},
		{"http://100.101.102.103:3131", false},
		{"http://0.0.0.0:3131", false}, // not a loopback address; the console never names it
		{"http://localhost.example.net", false},
		{"::not a url", false},
	} {
		if got := LoopbackOnly(tc.link); got != tc.want {
			t.Errorf("LoopbackOnly(%q) = %v, want %v", tc.link, got, tc.want)
		}
	}
}
