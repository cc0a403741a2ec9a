package floor

import "strings"

// SelfName is the gate's own name. The gate answers http://lockhttp.internal/ and the requests
// in a CONNECT to lockhttp.internal itself, and nothing goes out: lockhttp doctor uses it to show
// that a client goes through the gate and trusts the lockhttp CA. Name still refuses it (it is
// under .internal) for every other purpose; the signer signs it and no other local name.
const SelfName = "lockhttp.internal"

// SelfMCPPath is where the gate serves its own MCP server to the agents, on SelfName: the tools
// explain, pending and request_rule.
const SelfMCPPath = "/mcp"

// MetadataNames are the names of cloud metadata services. Name refuses each
// of them and every name under it (Metadata), and every name that starts with
// "kubernetes.default." whatever the cluster domain. Read at package
// initialisation: changing the list later has no effect.
var MetadataNames = []string{
	"metadata.google.internal",             // Google Cloud
	"metadata.goog",                        // Google Cloud
	"metadata",                             // Google Cloud (resolver search path)
	"instance-data",                        // AWS EC2 (VPC resolver)
	"instance-data.ec2.internal",           // AWS EC2
	"metadata.tencentyun.com",              // Tencent Cloud (169.254.0.23)
	"metadata.platformequinix.com",         // Equinix Metal
	"metadata.packet.net",                  // Packet (Equinix Metal before the rename)
	"api.metadata.cloud.ibm.com",           // IBM Cloud VPC (required for its HTTPS mode)
	"metadata.exoscale.com",                // Exoscale
	"rancher-metadata",                     // Rancher 1.x
	"kubernetes.default",                   // Kubernetes API server (service account tokens)
	"kubernetes.default.svc",               // Kubernetes API server
	"kubernetes.default.svc.cluster.local", // Kubernetes API server
}

// DoHHosts are well-known public DNS-over-HTTPS hosts; Name refuses each
// exactly (DoH). DoHDomains adds the providers whose every subdomain serves
// DNS over HTTPS.
var DoHHosts = []string{
	// Google
	"dns.google", "dns.google.com",
	// Cloudflare
	"cloudflare-dns.com", "mozilla.cloudflare-dns.com", "chrome.cloudflare-dns.com",
	"one.one.one.one", "1dot1dot1dot1.cloudflare-dns.com", "dns.cloudflare.com",
	"security.cloudflare-dns.com", "family.cloudflare-dns.com",
	// Quad9
	"dns.quad9.net", "dns9.quad9.net", "dns10.quad9.net", "dns11.quad9.net", "dns12.quad9.net",
	// Cisco OpenDNS
	"doh.opendns.com", "doh.familyshield.opendns.com", "doh.sandbox.opendns.com",
	// AdGuard
	"dns.adguard.com", "dns-family.adguard.com", "dns-unfiltered.adguard.com",
	"dns.adguard-dns.com", "family.adguard-dns.com", "unfiltered.adguard-dns.com",
	// CleanBrowsing
	"doh.cleanbrowsing.org",
	// NextDNS (and every subdomain, see DoHDomains)
	"dns.nextdns.io",
	// DNS.SB, Alibaba, Tencent DNSPod, 360, TWNIC, Hurricane Electric
	"doh.dns.sb", "dns.alidns.com", "doh.pub", "sm2.doh.pub", "doh.360.cn", "dns.twnic.tw", "ordns.he.net",
	// Mullvad (and every subdomain of dns.mullvad.net, see DoHDomains)
	"doh.mullvad.net", "dns.mullvad.net",
	// Control D
	"dns.controld.com", "freedns.controld.com",
	// Others listed by the curl and AdGuard DoH provider lists
	"dns.aa.net.uk", "doh.libredns.gr", "dns.switch.ch", "doh.applied-privacy.net",
	"dns.digitale-gesellschaft.ch", "doh.ffmuc.net", "doh.xfinity.com",
}

// DoHDomains are DNS-over-HTTPS domains that Name refuses together with
// every name under them (DoH): per-customer resolvers live there.
var DoHDomains = []string{
	"dns.nextdns.io",         // NextDNS: <id>.dns.nextdns.io, anycast.dns.nextdns.io
	"dns.mullvad.net",        // Mullvad: adblock.dns.mullvad.net, base.dns.mullvad.net, ...
	"cloudflare-gateway.com", // Cloudflare Zero Trust: <id>.cloudflare-gateway.com
	"d.adguard-dns.com",      // AdGuard private DNS: <id>.d.adguard-dns.com
}

// LocalSuffixes are names that never leave the local network; Name refuses
// each of them and every name under it (LocalName). .test is left out on
// purpose: tests map test names to local servers.
var LocalSuffixes = []string{
	"localhost",   // RFC 6761
	"local",       // RFC 6762 (mDNS)
	"internal",    // ICANN private-use TLD
	"home.arpa",   // RFC 8375
	"invalid",     // RFC 6761
	"onion",       // RFC 7686
	"localdomain", // "localhost.localdomain" in /etc/hosts
}

// nameEntry says what a name in byName refuses, and whether it also refuses
// every name under it.
type nameEntry struct {
	check   Check
	subtree bool
}

// byName indexes MetadataNames, DoHHosts, DoHDomains and LocalSuffixes.
var byName = buildByName()

func buildByName() map[string]nameEntry {
	m := make(map[string]nameEntry)
	for _, n := range LocalSuffixes {
		m[n] = nameEntry{LocalName, true}
	}
	for _, n := range DoHHosts {
		m[n] = nameEntry{DoH, false}
	}
	for _, n := range DoHDomains {
		m[n] = nameEntry{DoH, true}
	}
	for _, n := range MetadataNames {
		m[n] = nameEntry{Metadata, true}
	}
	return m
}

// Name runs the by-name checks on a name normalised by Host: Metadata (cloud
// metadata names), DoH (DNS-over-HTTPS hosts), LocalName (localhost, .local,
// .internal, ...) and SingleLabel (no dot), in that order, so that
// "metadata" and "localhost" are reported for what they are. The longest
// listed name that matches decides. It does no DNS.
func Name(name string) *Refusal {
	if name == "" {
		return refuse(Malformed, "the host is empty; use a host name")
	}
	if strings.HasPrefix(name, "kubernetes.default.") {
		return metadataName(name)
	}
	for i := -1; i < len(name); i++ {
		if i >= 0 && name[i] != '.' {
			continue
		}
		e, ok := byName[name[i+1:]]
		if !ok || (i >= 0 && !e.subtree) {
			continue
		}
		switch e.check {
		case Metadata:
			return metadataName(name)
		case DoH:
			return refuse(DoH, "host %s is a DNS-over-HTTPS resolver; the gate refuses DNS over HTTPS, use the system resolver", Shown(name, MaxShown))
		default:
			return refuse(LocalName, "host %s is a local name (%s); use a public host name", Shown(name, MaxShown), name[i+1:])
		}
	}
	if strings.IndexByte(name, '.') < 0 {
		return refuse(SingleLabel, "host %s is a single-label name; use a fully qualified host name", Shown(name, MaxShown))
	}
	return nil
}

func metadataName(name string) *Refusal {
	return refuse(Metadata, "host %s is a cloud metadata service; the floor never opens it", Shown(name, MaxShown))
}

// PortAllowed refuses a port not in allowed (Port). An empty allowed refuses
// every port.
func PortAllowed(port int, allowed []int) *Refusal {
	for _, p := range allowed {
		if p == port {
			return nil
		}
	}
	if len(allowed) == 0 {
		return refuse(Port, "port %d is not allowed; no port is allowed", port)
	}
	return refuse(Port, "port %d is not allowed; use %s", port, joinInts(allowed))
}
