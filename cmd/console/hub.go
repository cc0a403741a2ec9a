package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/lockhttp/lockhttp/internal/audit"
	"github.com/lockhttp/lockhttp/internal/console"
	"github.com/lockhttp/lockhttp/internal/hub"
	"github.com/lockhttp/lockhttp/internal/hubdb"
	"github.com/lockhttp/lockhttp/internal/metrics"
	"github.com/lockhttp/lockhttp/internal/notify"
	"github.com/lockhttp/lockhttp/internal/phone"
	"github.com/lockhttp/lockhttp/internal/traffic"
)

// hubDSNEnv holds the hub database's DSN when -hub-dsn-file does not name a file.
const hubDSNEnv = "LOCKHTTP_HUB_DSN"

// openHubStore opens the store -hub-store names: the state file, or the PostgreSQL database
// whose DSN -hub-dsn-file or LOCKHTTP_HUB_DSN holds (never the command line, where every user
// of the machine reads it).
func openHubStore(ctx context.Context, o *options, log *slog.Logger) (hub.Store, error) {
	if o.hubStore != "postgres" {
		return hub.NewFileStore(o.hubState, log)
	}
	dsn := os.Getenv(hubDSNEnv)
	if o.hubDSNFile != "" {
		data, err := os.ReadFile(o.hubDSNFile)
		if err != nil {
			return nil, fmt.Errorf("-hub-dsn-file: %w", err)
		}
		dsn = strings.TrimSpace(string(data))
	}
	if dsn == "" {
		return nil, fmt.Errorf("-hub-store postgres needs the database's DSN in -hub-dsn-file FILE or %s", hubDSNEnv)
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, err := hubdb.Open(octx, hubdb.Options{DSN: dsn, Log: log})
	if err != nil {
		return nil, err
	}
	log.Info("hub: tickets and decisions in PostgreSQL", "schema", hubdb.SchemaVersion)
	return s, nil
}

// hubServer is the hub this console hosts.
type hubServer struct {
	hub     *hub.Hub
	phone   *phone.Server // nil without -phone-url
	public  string        // the URL pairing links name; "" without -phone-url
	addr    string
	log     *slog.Logger
	audit   *audit.Writer // the console's: decisions, expiries, unpaired phones
	traffic *traffic.Log  // the gate's decisions as they happen, for the terminal
	asks    *asks         // the rules agents ask for
}

// serveHub starts the hub on its TCP listener: the gate's API, the facades' API and, with
// -phone-url, the phone page.
func serveHub(ctx context.Context, o *options, store hub.Store, log *slog.Logger, aw *audit.Writer, c *console.Console, reg *metrics.Registry, fl *fleet) (*hubServer, error) {
	key, err := hub.LoadOrCreateKey(o.hubKey)
	if err != nil {
		return nil, err
	}
	gateToken, err := hub.TokenFile(o.hubGateToken)
	if err != nil {
		return nil, err
	}
	facades := map[string]string{}
	if o.hubCLIToken != "" {
		tok, err := hub.TokenFile(o.hubCLIToken)
		if err != nil {
			return nil, err
		}
		facades["cli"] = tok
	}
	// An approval that binds a Claude credential to a container is kept by the console, which
	// serves the binding to the gate with the policy.
	bind := func(b hub.Bind, by, ticket string) error { return c.Bind(b.Container, b.Hash, by, ticket) }
	// So is a Claude login the gate saw issued to a container, without a ticket.
	issued := func(i hub.Issued) error { return c.BindIssued(i.Container, i.Hash, i.Host, i.Request) }
	hm := metrics.NewHub(reg)
	ak := &asks{c: c, pr: &proposer{c: c, policyPath: o.policy}, now: time.Now}
	h, err := hub.New(hub.Config{Store: store, Key: key, Log: log, Audit: aw, TicketTTL: o.hubTTL, Bind: bind, Issued: issued, Metrics: hm,
		CheckRule: ak.check})
	if err != nil {
		return nil, err
	}
	hm.SetState(h.MetricsState)
	go h.Run(ctx)
	l, err := net.Listen("tcp", o.hubListen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", o.hubListen, err)
	}
	hs := &hubServer{hub: h, log: log, audit: aw, traffic: traffic.NewLog(0), asks: ak}
	mux := http.NewServeMux()
	tokens := hub.Tokens(gateToken, facades)
	hs.mountAPI(mux, tokens, c)
	var tlsMux *http.ServeMux // the same API over mutual TLS, callers named by their identity
	if fl != nil && o.hubTLSListen != "" {
		tlsMux = http.NewServeMux()
		hs.mountAPI(tlsMux, fl.callers(), c)
	}
	// The hub's URL as phones and notification receivers reach it: -phone-url, or http:// and
	// the address it listens on.
	public := o.phoneURL
	if public == "" || public == "auto" {
		ap, _ := netip.ParseAddrPort(l.Addr().String())
		host := ap.Addr().Unmap()
		if host.IsUnspecified() {
			host = netip.MustParseAddr("127.0.0.1")
		}
		public = "http://" + netip.AddrPortFrom(host, ap.Port()).String()
	}
	// [[notify]]: every new ticket goes to the approved policy's channels; a human channel's
	// decision link is served here.
	nt := notify.New(notify.Config{Hub: h, Channels: c.NotifyChannels, PublicURL: public, Key: h.NotifyKey(), Log: log,
		Metrics: metrics.NewNotify(reg)})
	go nt.Run(ctx)
	mux.Handle(notify.Pattern, nt.Handler())
	c.SetNotifyStatus(nt.Status)
	if o.phoneURL != "" {
		// With PostgreSQL the pairing links and the paired phones are rows: a phone paired
		// through one replica is paired on every one.
		ps, _ := store.(phone.PairingStore)
		ph, err := phone.New(phone.Config{Hub: h, PublicURL: public, Log: log, Pairings: ps})
		if err != nil {
			return nil, fmt.Errorf("-phone-url: %w", err)
		}
		hs.phone, hs.public = ph, public
		mux.Handle("/phone", ph.Handler())
		mux.Handle("/phone/", ph.Handler())
		hs.mountPhoneFacade(mux, tokens)
		if tlsMux != nil {
			hs.mountPhoneFacade(tlsMux, fl.callers())
		}
		go func() {
			<-ctx.Done()
			ph.Close()
		}()
	}
	// The caps on connections (hub.Listener): a connection that has not carried a request with a
	// valid token within hub.Probation is closed, and past hub.MaxProbationPerPeer of them from
	// one peer the oldest goes, so a flood of idle or slow connections holds a bounded number
	// of descriptors and the gate, lox and paired phones still get in.
	cl := hub.Listener(l, log)
	srv := hub.NewServer(mux, cl)
	go srv.Serve(cl)
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	log.Info("hub serving", "listen", l.Addr().String())
	hs.addr = l.Addr().String()
	if tlsMux != nil {
		if err := fl.serveHub(ctx, o.hubTLSListen, tlsMux); err != nil {
			return nil, fmt.Errorf("-hub-tls-listen: %w", err)
		}
	}
	return hs, nil
}

// mountAPI serves on mux the hub's API for the gate and the facades, each caller named by c:
// the gate's routes and its traffic, the facades' tickets, lox credentials and unbind, and the
// health check.
func (hs *hubServer) mountAPI(mux *http.ServeMux, c hub.Callers, con *console.Console) {
	h := hs.hub
	mux.Handle("/v1/gate/", h.GateHandlerFor(c))
	mux.Handle("POST /v1/gate/traffic", hub.GateOnlyFor(c, hs.traffic.Handler()))
	mux.Handle("/v1/", h.FacadeHandlerFor(c))
	mountCredentials(mux, c, con) // lox credentials, lox unbind
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { healthz(w, con.Current() != nil) })
}

// mountPhoneFacade serves on mux the facades' routes of the phone page, each caller named by c:
// lox pair's pairing link, lox phones and lox unpair.
func (hs *hubServer) mountPhoneFacade(mux *http.ServeMux, c hub.Callers) {
	// lox pair: a pairing link for a CLI facade (a headless stack, a compose console).
	mux.Handle("POST /v1/phone-pairing", hub.FacadeOnly(c, func(w http.ResponseWriter, r *http.Request) {
		u, err := hs.phone.NewPairing()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"url\":%q}\n", u)
	}))
	hs.mountPhones(mux, c) // lox phones, lox unpair
}
