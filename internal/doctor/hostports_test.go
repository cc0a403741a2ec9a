package doctor

import (
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestListening(t *testing.T) {
	dir := t.TempDir()
	// Two listeners on every address (IPv4 :22 and IPv6 :2024), one on loopback (:3131), one on
	// one address (172.30.10.1:8080), and an established connection.
	os.WriteFile(filepath.Join(dir, "tcp"), []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 0100007F:0C3B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 010A1EAC:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0 100 0 0 10 0
   3: 0100007F:0C3B 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0
`), 0o644)
	os.WriteFile(filepath.Join(dir, "tcp6"), []byte(`  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:07E8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0 100 0 0 10 0
`), 0o644)
	socks, err := listening(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddr
	want := []listenSock{{a("0.0.0.0"), 22, false}, {a("127.0.0.1"), 3131, false}, {a("172.30.10.1"), 8080, false}, {a("::"), 2024, false}}
	if !reflect.DeepEqual(socks, want) {
		t.Fatalf("listening: %v, want %v", socks, want)
	}
	addrs := []hostAddr{{a("172.30.10.1"), "br-agent"}, {a("192.0.2.2"), "eth0"}}
	got, left := hostTargets(socks, addrs, 10)
	var targets []string
	for _, d := range got {
		targets = append(targets, d.Target)
	}
	wantT := []string{"172.30.10.1:2024", "172.30.10.1:22", "172.30.10.1:8080", "192.0.2.2:2024", "192.0.2.2:22"}
	if !reflect.DeepEqual(targets, wantT) || left != 0 {
		t.Fatalf("targets %v (%d left), want %v", targets, left, wantT)
	}
	if got[0].What != "port 2024 of this machine, at br-agent" {
		t.Errorf("what: %q", got[0].What)
	}
	if got, left := hostTargets(socks, addrs, 2); len(got) != 2 || left != 3 {
		t.Errorf("bounded to 2: %d targets, %d left", len(got), left)
	}
	if _, err := listening(filepath.Join(dir, "none")); err == nil {
		t.Error("a missing /proc/net/tcp is no error")
	}
	os.WriteFile(filepath.Join(dir, "tcp"), []byte("header\n 0: zz:0016 00000000:0000 0A\n"), 0o644)
	if _, err := listening(dir); err == nil {
		t.Error("a bad address is no error")
	}
}

// TestListeningUDP: UDP sockets bound and not connected are read too; those an agent could send
// to are named, the doctor's own and loopback's aside.
func TestListeningUDP(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "tcp"), []byte("header\n"), 0o644)
	// :53 on every address, 127.0.0.53:53, 172.30.10.1:5353, the doctor's :40000, and a
	// connected socket (a remote address).
	os.WriteFile(filepath.Join(dir, "udp"), []byte(`   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  1: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0 0
  2: 3500007F:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 2 2 0 0
  3: 010A1EAC:14E9 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3 2 0 0
  4: 00000000:9C40 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4 2 0 0
  5: 010A1EAC:D2F0 08080808:0035 01 00000000:00000000 00:00000000 00000000     0        0 5 2 0 0
`), 0o644)
	os.WriteFile(filepath.Join(dir, "udp6"), []byte(`  sl  local_address                         remote_address                        st
   0: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 6 2 0 0
`), 0o644)
	socks, err := listening(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(tcpSocks(socks)) != 0 {
		t.Errorf("TCP sockets in %v", socks)
	}
	addrs := []hostAddr{{netip.MustParseAddr("172.30.10.1"), "br-agent"}}
	got := udpListeners(socks, addrs, 40000)
	want := []string{"0.0.0.0:53", "172.30.10.1:5353", "[::]:8080"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("udpListeners: %v, want %v", got, want)
	}
}

// TestEngineMount: a bind mount that gives the container engine, whatever it is called.
func TestEngineMount(t *testing.T) {
	for src, want := range map[string]bool{
		"/var/run/docker.sock": true, "/run/docker.sock": true, "/var/run": true, "/run": true, "/": true, "/var": true,
		"/run/containerd/containerd.sock": true, "/run/podman/podman.sock": true, "/run/user/1000/docker.sock": true,
		"/run/user/1000/podman/podman.sock": true, "/run/user/1000": true, "/var/lib/docker": true,
		"/var/lib/docker/volumes/lockhttp_ca/_data": true, "/srv/docker-data": true, "/home/me/my.docker.sock": true,
		"/home/me/project": false, "/srv/site/policy": false, "/var/log": false, "/run/user/1000/podman/other": false, "/tmp": false,
	} {
		if got := engineMount(src, "/srv/docker-data"); got != want {
			t.Errorf("engineMount(%q) = %t, want %t", src, got, want)
		}
	}
}
