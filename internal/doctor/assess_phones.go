package doctor

import "github.com/lockhttp/lockhttp/internal/phone"

// assessPhonesReach warns when phones are paired but pairing links name this machine's loopback
// (lox run's hub listens on 127.0.0.1 by default): a phone reaches the hub there only through a
// tunnel of its own, so its approvals may never arrive. A TLS reverse proxy in front of a
// loopback hub is sound: its links name the proxy.
func assessPhonesReach(r *Report, f *Facts) {
	h := f.Hub
	if h == nil || h.Err != "" || h.Phones == 0 || !phone.LoopbackOnly(h.PhoneURL) {
		return
	}
	r.add(Warn, "phone", "%d phone(s) paired, but pairing links name %s, this machine's loopback, which no phone reaches but through a tunnel of its own (adb reverse, ssh -R); fix: %s",
		h.Phones, h.PhoneURL, phone.ReachFix)
}
