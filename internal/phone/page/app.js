// lockhttp phone page. Plain JS, no build step, no external resources.
//
// Every ticket field comes from an agent's request: it is put on the page as text only
// (textContent, text nodes), never as HTML. The server sends it escaped already (Go's
// display.Escape: controls, bidi, invisible and look-alike characters arrive as visible \x1b,
// \u{202E}, \u{0430}), so the page escapes nothing of its own.
"use strict";

(function () {
  const SESSION_KEY = "lockhttp.phone.session";
  const DEVICE_KEY = "lockhttp.phone.device";
  const CLOSE_UNAUTHORIZED = 4401;
  const CONFIRM_DELAY_MS = 400; // the confirm button wakes up after this: a double tap cannot approve
  const RECENT_SHOWN = 20;

  const $ = (id) => document.getElementById(id);

  const state = {
    session: null,
    pairToken: null,
    device: "",
    sessionID: "",
    pending: new Map(), // id → ticket
    recent: [],
    gate: null,
    skew: 0, // server clock minus this clock, in ms
    ws: null,
    backoff: 1000,
    retry: null,
    shown: null, // the ticket the detail view shows; its fingerprint is the one a decision names
    shownGone: false,
    pushed: false, // the detail view pushed a history entry
    busy: false,
  };

  // el makes an element; string children become text nodes.
  function el(tag, cls, ...kids) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const k of kids) {
      if (k === null || k === undefined) continue;
      e.append(typeof k === "string" ? document.createTextNode(k) : k);
    }
    return e;
  }

  function setText(id, v) {
    $(id).textContent = v === null || v === undefined ? "" : String(v);
  }

  function show(view) {
    for (const v of ["pair-view", "unpaired-view", "list-view", "detail-view"]) {
      $(v).hidden = v !== view;
    }
  }

  function serverNow() {
    return Date.now() + state.skew;
  }

  function noteNow(ms) {
    if (typeof ms === "number" && ms > 0) state.skew = ms - Date.now();
  }

  function ago(ms) {
    const s = Math.max(0, Math.round((serverNow() - ms) / 1000));
    if (s < 60) return s + " s ago";
    if (s < 3600) return Math.floor(s / 60) + " min ago";
    if (s < 86400) return Math.floor(s / 3600) + " h ago";
    return Math.floor(s / 86400) + " d ago";
  }

  function left(expiresMS) {
    const s = Math.floor((expiresMS - serverNow()) / 1000);
    if (s <= 0) return "expired";
    const m = Math.floor(s / 60);
    const r = s % 60;
    return m + ":" + (r < 10 ? "0" : "") + r;
  }

  let bannerTimer = null;
  function banner(msg) {
    const b = $("banner");
    b.textContent = msg;
    b.hidden = false;
    clearTimeout(bannerTimer);
    bannerTimer = setTimeout(() => { b.hidden = true; }, 5000);
  }

  function setConn(kind, text) {
    const c = $("conn");
    c.className = "conn " + kind;
    c.textContent = text;
  }

  // ---- API ----

  async function api(method, path, body) {
    const headers = { "Authorization": "Bearer " + state.session };
    const opts = { method, headers, cache: "no-store", credentials: "omit", redirect: "error" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    let r;
    try {
      r = await fetch("v1/" + path, opts);
    } catch (err) {
      return { status: 0, data: { error: "cannot reach the hub" } };
    }
    let data = null;
    try { data = await r.json(); } catch (_) { data = null; }
    if (r.status === 401) unpaired("This phone is no longer paired (the hub restarted, or it was unpaired).");
    return { status: r.status, data };
  }

  function errorText(r) {
    if (r.data && typeof r.data.error === "string") return r.data.error;
    return "the hub answered " + r.status;
  }

  // ---- pairing ----

  function unpaired(why) {
    try { localStorage.removeItem(SESSION_KEY); } catch (_) { /* private mode */ }
    state.session = null;
    if (state.ws) { const ws = state.ws; state.ws = null; ws.onclose = null; ws.close(); }
    clearTimeout(state.retry);
    state.pending.clear();
    setConn("off", "unpaired");
    setText("unpaired-why", why || "This phone is not paired with the hub.");
    show("unpaired-view");
  }

  async function pair(ev) {
    ev.preventDefault();
    const btn = $("pair-button");
    btn.disabled = true;
    $("pair-error").hidden = true;
    const device = $("device").value.trim() || "phone";
    let r, data = null;
    try {
      r = await fetch("v1/pair", {
        method: "POST", cache: "no-store", credentials: "omit", redirect: "error",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ token: state.pairToken, device }),
      });
      try { data = await r.json(); } catch (_) { data = null; }
    } catch (err) {
      $("pair-error").textContent = "Cannot reach the hub. Is this phone on a network that reaches it?";
      $("pair-error").hidden = false;
      btn.disabled = false;
      return;
    }
    if (!r.ok || !data || typeof data.session !== "string") {
      $("pair-error").textContent = (data && data.error) || ("Pairing failed (" + r.status + ").");
      $("pair-error").hidden = false;
      btn.disabled = r.status === 401; // a refused pairing token stays refused: scan a new code
      return;
    }
    state.pairToken = null;
    state.session = data.session;
    try {
      localStorage.setItem(SESSION_KEY, data.session);
      localStorage.setItem(DEVICE_KEY, data.device);
    } catch (_) {
      banner("This browser does not keep the pairing (private mode?): it ends with this tab.");
    }
    show("list-view");
    connect();
  }

  // ---- live updates ----

  function connect() {
    if (!state.session || state.ws) return;
    clearTimeout(state.retry);
    const dir = location.pathname.replace(/[^/]*$/, "");
    const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + dir + "v1/ws";
    let ws;
    try { ws = new WebSocket(url); } catch (_) { scheduleReconnect(); return; }
    state.ws = ws;
    setConn("", "connecting");
    ws.onopen = () => ws.send(JSON.stringify({ type: "auth", token: state.session }));
    ws.onmessage = (e) => {
      let m;
      try { m = JSON.parse(e.data); } catch (_) { return; }
      if (m && typeof m === "object") handle(m);
    };
    ws.onclose = (e) => {
      if (state.ws !== ws) return;
      state.ws = null;
      if (e.code === CLOSE_UNAUTHORIZED) {
        unpaired("This phone is no longer paired (the hub restarted, or it was unpaired).");
        return;
      }
      setConn("off", "offline");
      scheduleReconnect();
    };
  }

  function scheduleReconnect() {
    clearTimeout(state.retry);
    state.retry = setTimeout(connect, state.backoff);
    state.backoff = Math.min(state.backoff * 2, 15000);
  }

  function handle(m) {
    noteNow(m.now_ms);
    switch (m.type) {
      case "snapshot":
        state.backoff = 1000;
        setConn("live", "live");
        state.device = String(m.device || "");
        state.sessionID = String(m.session || "");
        setText("me", state.device + " (" + state.sessionID + ")");
        state.pending.clear();
        for (const t of m.pending || []) state.pending.set(t.id, t);
        if (m.pending_next) morePending(String(m.pending_next));
        state.recent = (m.recent || []).slice(0, RECENT_SHOWN);
        state.gate = m.gate || null;
        renderAll();
        if (state.shown && !state.shownGone) {
          const now = state.pending.get(state.shown.id);
          if (!now) ticketGone(state.recent.find((t) => t.id === state.shown.id) || null);
        }
        break;
      case "ticket":
        if (m.ticket && m.ticket.status === "pending") {
          state.pending.set(m.ticket.id, m.ticket);
          renderList();
        }
        break;
      case "decided":
      case "expired":
        if (m.ticket) {
          state.pending.delete(m.ticket.id);
          addRecent(m.ticket);
          renderList();
          renderRecent();
          if (state.shown && state.shown.id === m.ticket.id) ticketGone(m.ticket);
        }
        break;
      case "gate":
        state.gate = m.gate || null;
        renderGate();
        break;
    }
  }

  function addRecent(t) {
    state.recent = [t].concat(state.recent.filter((x) => x.id !== t.id)).slice(0, RECENT_SHOWN);
  }

  // ---- rendering ----

  function renderAll() {
    renderGate();
    renderList();
    renderRecent();
  }

  function renderGate() {
    const g = state.gate;
    const p = $("gate");
    if (!g) { p.textContent = "gate: unknown"; p.className = "gate"; return; }
    const parts = [];
    if (!g.reported_ms) {
      parts.push("gate has not reported");
    } else {
      const age = serverNow() - g.reported_ms;
      const stale = age > (g.stale_ms || 30000);
      parts.push("policy " + (g.policy_version || "?"));
      parts.push("signer " + (g.signer || "?"));
      parts.push("audit " + (g.audit || "?"));
      parts.push(stale ? "gate NOT reporting (last " + ago(g.reported_ms) + ")" : "gate reporting");
    }
    p.textContent = parts.join(" · ");
    p.className = "gate" + (!g.reported_ms || serverNow() - g.reported_ms > (g.stale_ms || 30000) ? " bad" : "");
  }

  function target(t) {
    if (t.kind === "connect") return (t.host || "") + ":" + (t.port || "");
    return t.url || "";
  }

  // morePending reads the pending tickets past the snapshot's page, a page at a time, at most
  // MAX_PENDING in all; the events that arrive meanwhile keep the list current.
  const MAX_PENDING = 5000;
  async function morePending(cursor) {
    while (cursor && state.pending.size < MAX_PENDING) {
      const r = await api("GET", "tickets?paged=1&limit=500&cursor=" + encodeURIComponent(cursor));
      if (r.status !== 200 || !r.data || !Array.isArray(r.data.tickets)) return;
      for (const t of r.data.tickets) {
        if (t.status === undefined || t.status === "pending") state.pending.set(t.id, t);
      }
      renderList();
      const next = typeof r.data.next === "string" ? r.data.next : "";
      if (next === cursor) return;
      cursor = next;
    }
  }

  function renderList() {
    const list = Array.from(state.pending.values()).sort((a, b) => (b.created_ms || 0) - (a.created_ms || 0));
    const items = list.map((t) => {
      const li = el("li", t.red ? "red" : "");
      li.dataset.ticketId = t.id;
      const b = el("button", "ticket-button");
      b.type = "button";
      b.append(
        el("span", "line1", el("span", "method", t.method || t.kind || ""), " ", el("span", "url", target(t))),
        el("span", "meta", [t.container, t.agent, t.rule].filter(Boolean).join(" · ")),
      );
      if (t.warning) b.append(el("span", "warn", "⚠ " + t.warning));
      if (t.waiting) b.append(el("span", "gone", t.gone === "restart" ? "No request waits: cut by a gate restart" : "No request waits now"));
      const cd = el("span", "countdown", "expires in " + left(t.expires_ms));
      cd.dataset.expires = String(t.expires_ms);
      b.append(cd);
      b.addEventListener("click", () => openTicket(t.id));
      li.append(b);
      return li;
    });
    $("pending").replaceChildren(...items);
    $("empty").hidden = list.length > 0;
    setText("count", list.length ? "(" + list.length + ")" : "");
    document.title = (list.length ? "(" + list.length + ") " : "") + "lockhttp";
  }

  function renderRecent() {
    const items = state.recent.map((t) => {
      const li = el("li", "");
      li.dataset.recentId = t.id;
      const verdict = t.status || "";
      const d = t.decision;
      const meta = [];
      if (d && d.by) meta.push("by " + d.by);
      if (d && d.reason) meta.push("“" + d.reason + "”");
      if (t.decided_ms) meta.push(ago(t.decided_ms));
      else if (t.expires_ms) meta.push(ago(t.expires_ms));
      li.append(
        el("span", "verdict " + verdict, verdict),
        " ", el("span", "method", t.method || t.kind || ""), " ", el("span", "url", target(t)),
        el("span", "meta", [t.container].concat(meta).filter(Boolean).join(" · ")),
      );
      return li;
    });
    $("recent").replaceChildren(...items);
    $("recent-empty").hidden = items.length > 0;
  }

  function tick() {
    for (const e of document.querySelectorAll("[data-expires]")) {
      const left_ = left(Number(e.dataset.expires));
      e.textContent = e.id ? left_ : "expires in " + left_;
    }
    renderGate();
  }

  // ---- detail ----

  function openTicket(id) {
    const t = state.pending.get(id);
    if (!t) return;
    if (!state.pushed) {
      history.pushState({ ticket: id }, "");
      state.pushed = true;
    }
    renderDetail(t);
    show("detail-view");
    window.scrollTo(0, 0);
  }

  function closeDetail() {
    state.shown = null;
    resetConfirm();
    show(state.session ? "list-view" : "unpaired-view");
  }

  function renderDetail(t) {
    state.shown = t;
    state.shownGone = false;
    $("detail-view").classList.toggle("red", !!t.red);
    setText("d-method", t.method || t.kind || "");
    setText("d-url", t.url || "");
    setText("d-container", t.container);
    setText("d-agent", t.agent || "—");
    setText("d-rule", t.rule || "—");
    setText("d-reason", t.reason || "—");
    setText("d-fp", t.fingerprint_short || "");
    $("d-fp").title = t.fingerprint || "";
    // The hub's sentence when no request waits: why, and what approving then does.
    setText("d-holders", t.waiting || String(t.holders || 0));
    const conn = t.kind === "connect";
    $("d-target-label").hidden = !conn;
    $("d-target").hidden = !conn;
    if (conn) {
      const mins = t.grant ? Math.round(t.grant / 6e10) : 0;
      setText("d-target", target(t) + (mins ? " for " + mins + " min" : ""));
    }
    const exp = $("d-expires");
    exp.dataset.expires = String(t.expires_ms);
    exp.textContent = left(t.expires_ms);
    const w = $("d-warning");
    w.textContent = t.warning ? "⚠ " + t.warning : "";
    w.hidden = !t.warning;
    // The MCP call an approval frees (server, tool, arguments), escaped by the server.
    const mcp = t.mcp;
    $("d-mcp").hidden = !mcp;
    if (mcp) {
      setText("d-mcp-server", mcp.server || "");
      setText("d-mcp-method", mcp.method || "");
      setText("d-mcp-tool", mcp.tool || "—");
      setText("d-mcp-hash", t.fingerprint || "");
      setText("d-mcp-args", mcp.arguments || "(no arguments)");
      setText("d-mcp-params", mcp.params ? "params: " + mcp.params : "");
      $("d-mcp-params").hidden = !mcp.params;
    }
    const hs = (t.headers || []).flatMap((h) => [el("dt", "", h.name), el("dd", "", h.value)]);
    $("d-headers").replaceChildren(...hs);
    $("d-noheaders").hidden = hs.length > 0;
    setText("d-body", t.body_preview || "");
    $("d-body").hidden = !t.body_preview;
    setText("d-bodysize", t.body_size ? "(" + t.body_size + " bytes" + (t.body_preview && t.body_preview.length < t.body_size ? ", start shown" : "") + ")" : "(none)");
    $("d-status").hidden = true;
    $("d-error").hidden = true;
    $("actions").hidden = false;
    $("reason").value = "";
    $("deny").disabled = true;
    resetConfirm();
  }

  function ticketGone(t) {
    state.shownGone = true;
    $("actions").hidden = true;
    let msg = "This request is no longer waiting.";
    if (t && t.status === "expired") msg = "This request expired unanswered.";
    else if (t && t.decision) msg = (t.status === "approved" ? "Approved" : "Denied") + " by " + t.decision.by + ".";
    setText("d-status", msg);
    $("d-status").hidden = false;
  }

  let confirmTimer = null;
  function resetConfirm() {
    clearTimeout(confirmTimer);
    $("confirm").hidden = true;
    $("approve").hidden = false;
    $("approve").disabled = false;
    $("approve-confirm").disabled = true;
    state.busy = false;
  }

  function armConfirm() {
    const t = state.shown;
    if (!t || state.shownGone) return;
    $("approve").hidden = true;
    $("confirm").hidden = false;
    $("approve-confirm").disabled = true;
    setText("confirm-text", "Approve " + (t.method || t.kind || "") + " " + target(t) + " for " + t.container + "?");
    clearTimeout(confirmTimer);
    confirmTimer = setTimeout(() => { $("approve-confirm").disabled = false; }, CONFIRM_DELAY_MS);
  }

  function detailError(msg) {
    setText("d-error", msg);
    $("d-error").hidden = false;
  }

  async function decide(approve) {
    const t = state.shown;
    if (!t || state.shownGone || state.busy) return;
    const reason = $("reason").value.trim();
    if (!approve && !reason) {
      detailError("A denial needs a reason: the agent is told it.");
      return;
    }
    state.busy = true;
    $("approve-confirm").disabled = true;
    $("deny").disabled = true;
    $("d-error").hidden = true;
    const body = approve ? { fingerprint: t.fingerprint } : { fingerprint: t.fingerprint, reason };
    const r = await api("POST", "tickets/" + encodeURIComponent(t.id) + "/" + (approve ? "approve" : "deny"), body);
    if (r.status === 401) return;
    if (r.status === 200 && r.data) {
      state.pending.delete(t.id);
      addRecent(r.data);
      renderList();
      renderRecent();
      banner((approve ? "Approved: " : "Denied: ") + (t.method || "") + " " + target(t) + (r.data.waiting ? ". " + r.data.waiting : ""));
      goBack();
      return;
    }
    state.busy = false;
    if (r.status === 409 && r.data && r.data.code === "fingerprint") {
      // The ticket is not what this page showed. Show it again; the human decides again.
      detailError("The request changed; look again.");
      const again = await api("GET", "tickets/" + encodeURIComponent(t.id));
      if (again.status === 200 && again.data && again.data.status === "pending") {
        const err = $("d-error").textContent;
        renderDetail(again.data);
        detailError(err);
      } else {
        ticketGone(again.data);
      }
      return;
    }
    if (r.status === 409 || r.status === 404) {
      detailError(errorText(r));
      const again = await api("GET", "tickets/" + encodeURIComponent(t.id));
      ticketGone(again.status === 200 ? again.data : null);
      return;
    }
    detailError(errorText(r));
    resetConfirm();
    $("deny").disabled = !$("reason").value.trim();
  }

  function goBack() {
    if (state.pushed) {
      history.back(); // popstate closes the detail
    } else {
      closeDetail();
    }
  }

  // ---- wiring ----

  function start() {
    $("pair-form").addEventListener("submit", pair);
    $("back").addEventListener("click", goBack);
    $("approve").addEventListener("click", armConfirm);
    $("approve-cancel").addEventListener("click", resetConfirm);
    $("approve-confirm").addEventListener("click", () => decide(true));
    $("deny").addEventListener("click", () => decide(false));
    $("reason").addEventListener("input", () => { $("deny").disabled = !$("reason").value.trim() || state.busy; });
    $("unpair").addEventListener("click", async () => {
      if (!window.confirm("Unpair this phone? Pairing again needs a new QR code from the terminal.")) return;
      await api("POST", "logout", {});
      unpaired("This phone was unpaired.");
    });
    window.addEventListener("popstate", () => {
      state.pushed = false;
      if (!$("detail-view").hidden) closeDetail();
    });
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible" && state.session && !state.ws) {
        state.backoff = 1000;
        connect();
      }
    });
    setInterval(tick, 1000);

    // A pairing link carries its token in the fragment. Take it, then take it out of the address
    // bar and the history at once.
    const m = /^#pair=([A-Za-z0-9_-]{16,128})$/.exec(location.hash);
    if (location.hash) history.replaceState(null, "", location.pathname + location.search);
    let saved = null;
    try { saved = localStorage.getItem(SESSION_KEY); } catch (_) { saved = null; }
    if (m) {
      state.pairToken = m[1];
      let dev = null;
      try { dev = localStorage.getItem(DEVICE_KEY); } catch (_) { dev = null; }
      $("device").value = dev || "phone";
      show("pair-view");
      return;
    }
    if (!saved) {
      unpaired("");
      return;
    }
    state.session = saved;
    show("list-view");
    connect();
  }

  start();
})();
