// car-server dashboard. No dependencies, no build step. Everything a
// proposal controls is attacker text: it is only ever put in the page with
// textContent (never innerHTML), and the Content-Security-Policy forbids
// inline script.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const PAGE = document.body.dataset.page;
const main = document.getElementById("main");

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "class") e.className = v;
    else if (k === "href") e.setAttribute("href", v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// The characters car_runtime::terminal::shown escapes, with the same
// spelling: controls (C0, DEL, C1) and the invisible format characters that
// reorder or hide text (bidi embeddings, overrides, isolates, marks,
// zero-width characters, line and paragraph separators, BOM). A proposal's
// text goes through this before it is put in the page, so a command cannot
// show one thing and be another (a right-to-left override), nor hide a part.
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]/g;

function shown(s) {
  return String(s).replace(HIDDEN, c => {
    if (c === "\n") return "\\n";
    if (c === "\r") return "\\r";
    if (c === "\t") return "\\t";
    const n = c.charCodeAt(0);
    return n < 0x80 ? "\\x" + n.toString(16).padStart(2, "0") : "\\u{" + n.toString(16) + "}";
  });
}

// shown() of each line, the line breaks kept (a multi-line command or JSON).
function shownLines(s) {
  return String(s).split("\n").map(shown).join("\n");
}

function text(v) {
  if (v === undefined || v === null) return "";
  return shown(typeof v === "string" ? v : JSON.stringify(v));
}

async function api(path, options) {
  const r = await fetch(path, Object.assign({ credentials: "same-origin" }, options || {}));
  if (r.status === 401) { location.assign("/login"); throw new Error("signed out"); }
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new Error((body.error && body.error.message) || ("HTTP " + r.status));
  return body;
}

function post(path, body) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF },
    body: JSON.stringify(body || {}),
  });
}

function table(id, headings, rows) {
  const t = el("table", { id });
  t.append(el("thead", {}, el("tr", {}, ...headings.map(h => el("th", {}, h)))));
  const tb = el("tbody");
  for (const r of rows) tb.append(r);
  t.append(tb);
  return t;
}

function status(s) {
  return el("span", { class: "status-" + text(s), "data-status": text(s) }, text(s));
}

function approvalLink(id) {
  return el("a", { href: "/approval/" + encodeURIComponent(id), class: "approval-link" }, shown(id));
}

function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t);
  return isNaN(d) ? text(t) : d.toLocaleString();
}

// ---- live updates -----------------------------------------------------------

const handlers = [];
// The page's live handler (a page rendered again replaces its old one).
function live(fn) { handlers.length = 0; handlers.push(fn); }
let streamOpened;
const streamOpen = new Promise(r => { streamOpened = r; });
// Resolves once the stream is live (or after 2 s without it, so a page
// still renders): a list read after that misses no later change.
const streamLive = () => Promise.race([streamOpen, new Promise(r => setTimeout(r, 2000))]);

function connectStream() {
  const badge = document.getElementById("live");
  const es = new EventSource("/api/stream");
  let opens = 0;
  es.onopen = () => {
    badge.textContent = "live"; badge.classList.add("on");
    opens += 1;
    streamOpened();
    // Reconnected: what changed while the stream was down is read again.
    if (opens > 1) for (const fn of [...handlers]) fn("resync", {});
  };
  es.onerror = () => { badge.textContent = "reconnecting…"; badge.classList.remove("on"); };
  for (const kind of ["approval.requested", "approval.resolved", "resync"]) {
    es.addEventListener(kind, ev => {
      let doc = {};
      try { doc = JSON.parse(ev.data); } catch (_) { return; }
      for (const fn of handlers) fn(kind, doc);
    });
  }
}

// ---- pages -------------------------------------------------------------------

function pendingRow(a) {
  return el("tr", { "data-approval-id": a.approval_id },
    el("td", {}, approvalLink(a.approval_id)),
    el("td", {}, text(a.tool)),
    el("td", {}, text(a.action_id)),
    el("td", {}, text(a.proposal_id)),
    el("td", {}, text(a.layer), a.rule ? el("br") : null, a.rule ? el("code", {}, text(a.rule)) : null),
    el("td", {}, text(a.submitted_by)),
    el("td", {}, fmtTime(a.deadline)));
}

async function pagePending() {
  main.replaceChildren(el("h2", {}, "Pending approvals"), el("p", { class: "empty", id: "loading" }, "loading…"));
  await streamLive();
  const data = await api("/api/approvals");
  const heads = ["Approval", "Tool", "Action", "Proposal", "Asked by (layer, rule)", "Submitted by", "Deadline"];
  const pending = table("pending", heads, data.approvals.map(pendingRow));
  const none = el("p", { class: "empty", id: "none-pending" }, "Nothing is waiting for a decision.");
  const recent = table("recent", ["Approval", "Tool", "Status"], data.recent
    .filter(a => a.status !== "pending" && a.status !== "expected")
    .map(a => el("tr", { "data-approval-id": a.approval_id },
      el("td", {}, approvalLink(a.approval_id)), el("td", {}, text(a.tool)), el("td", {}, status(a.status)))));
  main.replaceChildren(el("h2", {}, "Pending approvals"), pending, none, el("h3", {}, "Recently decided"), recent);
  const tbody = pending.querySelector("tbody");
  const sync = () => { none.hidden = tbody.children.length > 0; };
  sync();
  live((kind, doc) => {
    if (kind === "resync") { pagePending(); return; }
    if (kind === "approval.requested") {
      const a = doc.approval;
      if (![...tbody.children].some(r => r.dataset.approvalId === a.approval_id)) tbody.append(pendingRow(a));
    } else if (kind === "approval.resolved") {
      for (const r of [...tbody.children]) if (r.dataset.approvalId === doc.approval_id) r.remove();
      recent.querySelector("tbody").prepend(el("tr", { "data-approval-id": doc.approval_id },
        el("td", {}, approvalLink(doc.approval_id)), el("td", {}, ""), el("td", {}, status(doc.status))));
    }
    sync();
  });
  // A change that arrived while the list loaded (before the handler above)
  // is in a second read of the list: reconcile with it.
  const again = await api("/api/approvals");
  const open = new Set(again.approvals.map(a => a.approval_id));
  for (const r of [...tbody.children]) if (!open.has(r.dataset.approvalId)) r.remove();
  for (const a of again.approvals) {
    if (![...tbody.children].some(r => r.dataset.approvalId === a.approval_id)) tbody.append(pendingRow(a));
  }
  sync();
}

function diffView(diff) {
  const pre = el("pre", { class: "diff", id: "diff" });
  for (const raw of (typeof diff === "string" ? diff : JSON.stringify(diff)).split("\n")) {
    const line = shown(raw);
    let cls;
    if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
    else if (line.startsWith("@@")) cls = "hunk";
    else if (line.startsWith("+")) cls = "add";
    else if (line.startsWith("-")) cls = "del";
    pre.append(el("span", { class: cls }, line), cls === "add" || cls === "del" || cls === "hunk" ? null : "\n");
  }
  return pre;
}

async function pageApproval() {
  const id = decodeURIComponent(location.pathname.slice("/approval/".length));
  await streamLive();
  const data = await api("/api/approval/" + encodeURIComponent(id));
  const a = data.approval;
  const rows = [
    ["Status", status(a.status)], ["Tool", text(a.tool)], ["Kind", text(a.kind)], ["Risk", text(a.risk)],
    ["Action", text(a.action_id)], ["Proposal", text(a.proposal_id)], ["Source", text(a.source)],
    ["Asked by layer", text(a.layer)], ["Reason", text(a.reason)],
    ["Required / granted tier", text(a.required_tier) + " / " + text(a.granted_tier)],
    ["Submitted by", text(a.submitted_by)], ["Requested", fmtTime(a.requested_at)], ["Deadline", fmtTime(a.deadline)],
  ].map(([k, v]) => el("tr", {}, el("th", {}, k), el("td", {}, v)));
  const parts = [el("h2", {}, "Approval ", el("code", { id: "approval-id" }, shown(id))), table("summary", ["", ""], rows)];
  if (a.tool === "shell" && a.parameters && typeof a.parameters.command === "string") {
    parts.push(el("h3", {}, "Shell command"), el("pre", { id: "shell-command" }, shownLines(a.parameters.command)));
  }
  parts.push(el("h3", {}, "Matched rule"), el("pre", { id: "rule" }, a.rule ? shownLines(JSON.stringify(a.rule, null, 2)) : "(none: " + text(a.layer) + ")"));
  if (a.preview && a.preview.diff) {
    parts.push(el("h3", {}, "Preview (unified diff)"), a.preview.note ? el("p", { class: "empty" }, shown(a.preview.note)) : null, diffView(a.preview.diff));
  }
  const params = Object.entries(a.parameters || {}).map(([k, v]) =>
    el("tr", {}, el("td", {}, el("code", {}, shown(k))), el("td", {}, el("code", {}, text(v)))));
  parts.push(el("h3", {}, "Parameters (protected values masked)"), table("params", ["Name", "Value"], params));
  if (a.status === "pending") {
    const reason = el("textarea", { id: "reason", placeholder: "Reason (recorded with the decision)" });
    const scope = el("select", { id: "scope" }, el("option", { value: "once" }, "once"),
      el("option", { value: "session" }, "this session"), el("option", { value: "always" }, "always"));
    const out = el("p", { id: "decision-result" });
    const decide = resolution => async () => {
      try {
        const r = await post("/api/approval/" + encodeURIComponent(id) + "/decide",
          { resolution, scope: scope.value, reason: reason.value });
        out.textContent = r.applied ? ("Decided: " + r.decision + " (" + r.scope + ") by " + r.reviewer)
          : ("Not applied: the approval was already " + r.status);
        setTimeout(pageApproval, 300);
      } catch (e) { out.textContent = "Refused: " + shown(e.message); }
    };
    const approve = el("button", { id: "approve", type: "button" }, "Approve");
    const deny = el("button", { id: "deny", type: "button" }, "Deny");
    approve.addEventListener("click", decide("approve"));
    deny.addEventListener("click", decide("deny"));
    parts.push(el("div", { class: "decide" }, el("h3", {}, "Decide"), el("label", { for: "scope" }, "Scope "), scope,
      reason, approve, " ", deny, out));
  }
  const history = (data.history || []).map(h => el("tr", {}, el("td", {}, text(h.event)), el("td", {}, fmtTime(h.at)),
    el("td", {}, text(h.reviewer || h.by)), el("td", {}, text(h.scope)), el("td", {}, text(h.reason))));
  parts.push(el("h3", {}, "History"), table("history", ["Event", "At", "By", "Scope", "Reason"], history));
  main.replaceChildren(...parts);
  // Rendered again when this approval changes: asked (an `expected` one
  // becomes pending, and the decision is offered), decided, or on a resync.
  live((kind, doc) => {
    const mine = kind === "resync"
      || (kind === "approval.resolved" && doc.approval_id === id)
      || (kind === "approval.requested" && doc.approval && doc.approval.approval_id === id);
    if (mine) pageApproval();
  });
  // A change while the page loaded (before the handler above): read again.
  const again = await api("/api/approval/" + encodeURIComponent(id));
  if (again.approval.status !== a.status) pageApproval();
}

async function pageProposals() {
  const data = await api("/api/proposals");
  const rows = data.proposals.map(p => el("tr", { "data-proposal-id": p.proposal_id },
    el("td", {}, text(p.proposal_id)), el("td", {}, text(p.source)), el("td", {}, text(p.principal)),
    el("td", {}, fmtTime(p.submitted_at)),
    el("td", {}, ...(p.actions || []).map(a => el("div", { class: "action" },
      el("code", {}, text(a.action_id)), " ", text(a.tool), " ", status(a.status), a.error ? " — " + text(a.error) : ""))),
    el("td", {}, ...(p.approvals || []).map(k => el("div", {}, approvalLink(k)))),
    el("td", {}, text(p.error))));
  main.replaceChildren(el("h2", {}, "Proposals and results"),
    table("proposals", ["Proposal", "Source", "Submitted by", "At", "Actions", "Approvals", "Error"], rows),
    rows.length ? null : el("p", { class: "empty" }, "No proposal submitted yet."));
  live(kind => { if (kind === "approval.resolved") setTimeout(pageProposals, 500); });
}

async function sessionPicker(onChange) {
  const data = await api("/api/sessions");
  const sel = el("select", { id: "session" });
  for (const s of data.sessions) sel.append(el("option", { value: s.session_id }, shown(s.session_id + " (" + s.principal + ", " + s.role + ", " + s.events + " events)")));
  const saved = new URLSearchParams(location.search).get("session");
  if (saved && [...sel.options].some(o => o.value === saved)) sel.value = saved;
  sel.addEventListener("change", onChange);
  return sel;
}

async function pageEvents() {
  const out = el("div", { id: "event-results" });
  const inputs = {};
  const refresh = async () => {
    const q = new URLSearchParams({ session: sel.value });
    for (const [k, i] of Object.entries(inputs)) if (i.value.trim()) q.set(k, i.value.trim());
    try {
      const d = await api("/api/events?" + q.toString());
      const chain = d.chain || {};
      let chainView;
      if (chain.tampered_at !== undefined) chainView = el("span", { class: "chain-bad", id: "chain-status" }, "tampered at event " + chain.tampered_at);
      else if (chain.verified > 0) chainView = el("span", { class: "chain-ok", id: "chain-status" }, "verified (" + chain.verified + " chained events)");
      else chainView = el("span", { class: "empty", id: "chain-status" }, "no chained events (hash chaining is off for this session: events.chain.enable)");
      const rows = (d.events.events || []).map(e => el("tr", {}, el("td", {}, fmtTime(e.timestamp)), el("td", {}, text(e.kind)),
        el("td", {}, text(e.proposal_id)), el("td", {}, text(e.action_id)), el("td", {}, el("code", {}, text(e.data)))));
      out.replaceChildren(el("p", {}, "Hash chain: ", chainView),
        table("events", ["Time", "Kind", "Proposal", "Action", "Data"], rows));
    } catch (e) { out.replaceChildren(el("p", { class: "message" }, shown(e.message))); }
  };
  const sel = await sessionPicker(refresh);
  const f = el("div", { class: "filters" });
  for (const [k, label] of [["proposal_id", "proposal"], ["kind", "kind"], ["action_id", "action"], ["since", "since (RFC 3339)"], ["until", "until"]]) {
    inputs[k] = el("input", { id: "f-" + k, placeholder: label });
    f.append(inputs[k]);
  }
  const apply = el("button", { id: "f-apply", type: "button" }, "Filter");
  apply.addEventListener("click", refresh);
  f.append(apply);
  main.replaceChildren(el("h2", {}, "Event log"), el("p", {}, "Session ", sel), f, out);
  if (sel.value) refresh(); else out.replaceChildren(el("p", { class: "empty" }, "No live session."));
}

async function pageConfig() {
  const out = el("div", { id: "config-view" });
  const refresh = async () => {
    try {
      const d = await api("/api/config?session=" + encodeURIComponent(sel.value));
      out.replaceChildren(el("p", {}, "Granted tier: ", el("code", { id: "tier" }, text(d.granted_tier))),
        el("pre", { id: "admission" }, shownLines(JSON.stringify(d.admission, null, 2))));
    } catch (e) { out.replaceChildren(el("p", { class: "message" }, shown(e.message))); }
  };
  const sel = await sessionPicker(refresh);
  main.replaceChildren(el("h2", {}, "Admission configuration (read-only)"), el("p", {}, "Session ", sel), out);
  if (sel.value) refresh(); else out.replaceChildren(el("p", { class: "empty" }, "No live session."));
}

const pages = { pending: pagePending, approval: pageApproval, proposals: pageProposals, events: pageEvents, config: pageConfig };
const nav = { pending: "nav-pending", approval: "nav-pending", proposals: "nav-proposals", events: "nav-events", config: "nav-config" };
document.getElementById(nav[PAGE]).classList.add("current");
document.getElementById("sign-out").addEventListener("click", async () => {
  try { await post("/logout"); } finally { location.assign("/login"); }
});
connectStream();
(pages[PAGE] || pagePending)().catch(e => main.replaceChildren(el("p", { class: "message" }, e.message)));
