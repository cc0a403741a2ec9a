package doctor

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
)

const routeHeader = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"

func TestRouteTables(t *testing.T) {
	cases := []struct {
		name          string
		route, route6 string
		want4, want6  bool
	}{
		{"internal network: its subnet only",
			routeHeader + "eth0\t000A1EAC\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n",
			"fe800000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0\n" +
				"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n",
			false, false},
		{"a bridge network: default routes",
			routeHeader + "eth0\t00000000\t010011AC\t0003\t0\t0\t0\t00000000\t0\t0\t0\neth0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n",
			"00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth0\n",
			true, true},
		{"an IPv6 reject route is no way out",
			routeHeader,
			"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00000200     eth0\n",
			false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "route"), []byte(tc.route), 0o644)
			os.WriteFile(filepath.Join(dir, "ipv6_route"), []byte(tc.route6), 0o644)
			a := ProbeAgent(context.Background(), AgentProbe{ProcNet: dir})
			if a.DefaultRoute4 != tc.want4 || a.DefaultRoute6 != tc.want6 || a.RoutesErr != "" {
				t.Fatalf("%+v", a)
			}
		})
	}
}

func TestDirectConnections(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	open := l.Addr().String()
	l2, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := l2.Addr().String()
	l2.Close()
	defer l.Close()
	a := ProbeAgent(context.Background(), AgentProbe{ProcNet: t.TempDir(), Direct: []Direct{{Target: open, What: "open"}, {Target: closed, What: "closed"}}})
	if !a.Direct[0].Reached || a.Direct[0].Err != "connected" {
		t.Errorf("open port: %+v", a.Direct[0])
	}
	// A host that answers with a refusal was reached: there is a route.
	if !a.Direct[1].Reached {
		t.Errorf("closed port: %+v", a.Direct[1])
	}
}
