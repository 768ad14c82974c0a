// The consent page's script. Every text that comes from the agent (and so possibly from
// a peer) reaches the page through textContent, never as markup.
"use strict";

var CSRF = document.querySelector('meta[name="csrf"]').getAttribute("content");
// Per open prompt: the value chosen for each field ({kind: "share"|"value"|"no", value}).
var choices = {};
var lastPrompts = null;
var lastThreads = [];
var lastThreadsJson = null;
var openTimeline = {};

// Control characters and bidirectional overrides a peer could use to disguise text.
function clean(s) {
  if (s === null || s === undefined) { return ""; }
  if (typeof s !== "string") { s = JSON.stringify(s); }
  return s.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, "");
}

// An element with a class and children: strings become text nodes.
function el(tag, cls, children) {
  var e = document.createElement(tag);
  if (cls) { e.className = cls; }
  (children || []).forEach(function (c) {
    if (c === null || c === undefined) { return; }
    e.appendChild(typeof c === "string" ? document.createTextNode(clean(c)) : c);
  });
  return e;
}

function button(label, cls, onClick) {
  var b = el("button", cls, [label]);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function say(text, bad) {
  var s = document.getElementById("status");
  s.textContent = clean(text);
  s.className = bad ? "status bad" : "status";
}

// One control request, as the control socket takes it.
function call(req) {
  return fetch("/api/control", {
    method: "POST",
    credentials: "same-origin",
    headers: { "content-type": "application/json", "x-csrf-token": CSRF },
    body: JSON.stringify(req)
  }).then(function (r) { return r.json(); }).then(function (r) {
    if (!r.ok) { say(r.error || "refused", true); }
    return r;
  }, function (e) { say("the agent did not answer: " + e, true); return { ok: false }; });
}

function answer(id, args) {
  return call({ cmd: "answer", prompt_id: id, args: args }).then(function (r) {
    if (r.ok) { say(r.data); delete choices[id]; }
  });
}

function shown(v) { return typeof v === "string" ? v : JSON.stringify(v); }

function consentCard(p, fields) {
  var c = choices[p.id] || (choices[p.id] = {});
  var card = el("article", "card prompt consent", [
    el("h3", null, [p.peer + "'s agent is asking for:"]),
    el("p", "why", ["for: " + (p.intent && p.intent.summary)])
  ]);
  card.dataset.prompt = p.id;
  if (p.drift && p.drift.to) {
    card.appendChild(el("p", "why", ["The thread is now about: " + p.drift.to.summary]));
  }
  fields.forEach(function (f) {
    if (!c[f.field]) {
      c[f.field] = f.suggested !== null && f.suggested !== undefined ? { kind: "share" } : { kind: "none" };
    }
    var ch = c[f.field];
    var row = el("div", "field", [
      el("div", "field-name", [f.field]),
      el("p", "why", [f.reason])
    ]);
    row.dataset.field = f.field;
    var btns = el("div", "choices");
    var other = el("input");
    other.type = "text";
    other.placeholder = "Another value for " + clean(f.field);
    other.value = ch.kind === "value" ? ch.value : "";
    other.hidden = ch.kind !== "value";
    other.addEventListener("input", function () { ch.value = other.value; });
    function pick(kind) {
      return function () { c[f.field] = ch = { kind: kind, value: other.value }; render(); };
    }
    if (f.suggested !== null && f.suggested !== undefined) {
      var b = button(shown(f.suggested), "value", pick("share"));
      b.setAttribute("aria-pressed", String(ch.kind === "share"));
      btns.appendChild(b);
    }
    var o = button("Other…", "other", pick("value"));
    o.setAttribute("aria-pressed", String(ch.kind === "value"));
    btns.appendChild(o);
    var no = button("Don't share", "no", pick("no"));
    no.setAttribute("aria-pressed", String(ch.kind === "no" || ch.kind === "none"));
    btns.appendChild(no);
    row.appendChild(btns);
    row.appendChild(other);
    card.appendChild(row);
  });
  card.appendChild(el("div", "actions", [
    button("Share selected", "primary share", function () {
      var args = [];
      fields.forEach(function (f) {
        var ch = c[f.field];
        if (ch.kind === "share") { args.push(f.field); }
        else if (ch.kind === "value" && ch.value) { args.push(f.field + "=" + ch.value); }
        else { args.push(f.field + "=no"); }
      });
      answer(p.id, args);
    }),
    button("Decline all", "decline", function () { answer(p.id, ["decline-all"]); })
  ]));
  return card;
}

function resolutionCard(p, r) {
  var pr = r.proposal || {};
  var card = el("article", "card prompt resolution", [
    el("h3", null, [(r.reminder ? "Reminder: " : "") + "Proposal from " + r.proposer]),
    el("p", null, [pr.summary]),
    el("p", "why", [pr.reasoning]),
    el("p", "meta", ["about: " + (p.intent && p.intent.summary)])
  ]);
  card.dataset.prompt = p.id;
  var acts = el("div", "actions", [
    button("Confirm", "primary confirm", function () { answer(p.id, ["confirm"]); }),
    button("A different time", "time", function () { answer(p.id, ["different-time"]); }),
    button("A different place", "place", function () { answer(p.id, ["different-place"]); })
  ]);
  card.appendChild(acts);
  (pr.alternatives || []).forEach(function (a, i) {
    var b = button(a.summary, "alt", function () { answer(p.id, ["alternative", String(i + 1)]); });
    b.appendChild(el("span", "tradeoff", [a.reason]));
    card.appendChild(b);
  });
  card.appendChild(el("div", "actions", [
    button("Make an excuse", "excuse quiet", function () { answer(p.id, ["excuse"]); }),
    button("Decline", "decline quiet", function () { answer(p.id, ["decline"]); })
  ]));
  return card;
}

function renderPrompts(prompts) {
  var list = document.getElementById("prompt-list");
  list.replaceChildren();
  var open = {};
  prompts.forEach(function (p) {
    open[p.id] = true;
    var k = p.kind || {};
    if (k.Consent) { list.appendChild(consentCard(p, k.Consent.fields || [])); }
    else if (k.Resolution) { list.appendChild(resolutionCard(p, k.Resolution)); }
  });
  Object.keys(choices).forEach(function (id) { if (!open[id]) { delete choices[id]; } });
  document.getElementById("no-prompts").hidden = prompts.length > 0;
}

function renderThreads(threads) {
  var list = document.getElementById("thread-list");
  list.replaceChildren();
  threads.forEach(function (t) {
    var card = el("article", "card thread", [
      el("h3", null, [t.summary + " "]),
      el("p", "meta", [(t.initiator ? "with " : "from ") + t.peer + " · " + t.category + " · waiting for " + t.waiting])
    ]);
    card.dataset.thread = t.id;
    var st = el("span", "state", [t.state]);
    card.firstChild.appendChild(st);
    var tl = el("ol", "timeline");
    card.appendChild(button(openTimeline[t.id] ? "Hide timeline" : "Timeline", "quiet timeline-toggle", function () {
      if (openTimeline[t.id]) { delete openTimeline[t.id]; renderThreads(lastThreads); return; }
      openTimeline[t.id] = true;
      renderThreads(lastThreads);
    }));
    if (openTimeline[t.id]) {
      card.appendChild(tl);
      call({ cmd: "thread", id: t.id }).then(function (r) {
        if (!r.ok) { return; }
        (r.data.audit || []).forEach(function (line) { tl.appendChild(el("li", null, [line])); });
        if (r.data.resolution) { tl.appendChild(el("li", null, ["resolution: " + r.data.resolution])); }
        card.appendChild(sharedDetail(t, r.data));
      });
    }
    list.appendChild(card);
  });
  if (!threads.length) { list.appendChild(el("p", "empty", ["No threads yet."])); }
}

// A usage rule in words (as `thread show` says it).
function ruleText(r) {
  var parts = [];
  if (r.purpose) { parts.push("only for " + r.purpose); }
  if (r.expires_at) { parts.push("deleted at " + r.expires_at); }
  if (r.no_reshare) { parts.push("not to be passed on"); }
  return parts.join("; ");
}

// What each side shared in a thread: yours with a button to take it back, theirs with
// the rule it came with, and what was taken back.
function sharedDetail(t, d) {
  var box = el("div", "shared-detail");
  var yours = Object.keys(d.shared || {});
  if (yours.length) {
    var row = el("p", "yours", ["You shared: "]);
    yours.forEach(function (f) {
      var b = button("Take back " + f, "quiet retract", function () {
        call({ cmd: "retract", id: t.id, fields: [f] }).then(function (r) { if (r.ok) { say(r.data); } });
      });
      b.dataset.field = f;
      row.appendChild(b);
    });
    box.appendChild(row);
  }
  (d.retractions || []).forEach(function (x) {
    var how = x.acknowledged ? "deleted: they confirmed, signed"
      : x.told ? "NOT CONFIRMED: nothing says it was deleted"
      : "asked; waiting for their signed confirmation";
    box.appendChild(el("p", "retraction", ["You took back " + (x.fields || []).join(", ") + " \u2014 " + how]));
  });
  Object.keys(d.theirs || {}).forEach(function (f) {
    var rule = (d.usage || {})[f];
    box.appendChild(el("p", "theirs", ["They shared " + f + (rule ? " \u2014 " + ruleText(rule) : "")]));
  });
  if ((d.retracted || []).length) {
    box.appendChild(el("p", "retracted", ["They took back " + d.retracted.join(", ") + " (deleted here)"]));
  }
  return box;
}

function renderSuggestions(list) {
  var box = document.getElementById("suggestion-list");
  box.replaceChildren();
  list.forEach(function (s) {
    var card = el("article", "card suggestion", [
      el("p", null, ["Always share " + s.field + " with " + s.peer + "?"]),
      el("div", "actions", [
        button("Always share", "primary accept", function () { call({ cmd: "accept_suggestion", id: s.id }).then(function (r) { if (r.ok) { say(r.data); } }); }),
        button("Not now", "dismiss", function () { call({ cmd: "dismiss_suggestion", id: s.id }).then(function (r) { if (r.ok) { say(r.data); } }); })
      ])
    ]);
    box.appendChild(card);
  });
  document.getElementById("suggestions").hidden = list.length === 0;
}

// What decided a field, in words (as `a2acp receipts` says it).
function basisText(b) {
  if (!b) { return ""; }
  switch (b.by) {
    case "user": return b.prompt_id ? "you, at prompt " + b.prompt_id : "you, at the group's prompt";
    case "user_started": return "you, starting the thread";
    case "tier": return "tier " + b.tier;
    case "relationship_override": return "your rule for this agent: " + b.tier;
    case "intent_tier": return b.tier + " in threads about \u201c" + b.phrase + "\u201d";
    default: return "the agent (no tier applies)";
  }
}

function renderReceipts(list) {
  var box = document.getElementById("receipt-list");
  box.replaceChildren();
  list.forEach(function (r) {
    var card = el("article", "card receipt", [
      el("p", "meta", [(r.kind === "confirmation" ? "Confirmed · " : "") + "with " + r.peer + " · " + (r.purpose || {}).summary + " · " + r.at])
    ]);
    card.dataset.receipt = r.receipt_id;
    var items = function (label, xs) {
      if (!xs || !xs.length) { return; }
      card.appendChild(el("p", null, [label + ": " + xs.map(function (d) {
        return d.field + " (" + basisText(d.basis) + (d.usage ? "; " + ruleText(d.usage) : "") + ")";
      }).join(", ")]));
    };
    items("Shared", r.disclosed);
    items("Declined", r.declined);
    if (r.kind === "confirmation") { card.appendChild(el("p", null, ["The proposal, confirmed by " + basisText(r.decided_by)])); }
    box.appendChild(card);
  });
  document.getElementById("receipts").hidden = list.length === 0;
}

function renderNotifications(list) {
  var ul = document.getElementById("notification-list");
  ul.replaceChildren();
  list.slice(-20).reverse().forEach(function (n) {
    ul.appendChild(el("li", n.read ? "" : "unread", [n.text]));
  });
  document.getElementById("notifications").hidden = list.length === 0;
}

var state = { prompts: [], threads: [], notifications: [], suggestions: [], receipts: [] };

function render() { renderPrompts(state.prompts || []); }

function update(s) {
  state = s;
  var p = JSON.stringify(s.prompts || []);
  if (p !== lastPrompts) { lastPrompts = p; renderPrompts(s.prompts || []); }
  var t = JSON.stringify(s.threads || []);
  if (t !== lastThreadsJson) { lastThreadsJson = t; lastThreads = s.threads || []; renderThreads(lastThreads); }
  renderSuggestions(s.suggestions || []);
  renderNotifications(s.notifications || []);
  renderReceipts(s.receipts || []);
}

function connect() {
  var live = document.getElementById("live");
  var es = new EventSource("/api/events");
  es.addEventListener("state", function (e) {
    live.textContent = "live";
    live.className = "live on";
    try { update(JSON.parse(e.data)); } catch (err) { say("unreadable update", true); }
  });
  es.onerror = function () { live.textContent = "reconnecting…"; live.className = "live"; };
}

connect();
