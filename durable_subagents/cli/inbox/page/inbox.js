// The subagents inbox: paused task trees, their calls in full, and decisions on them.
//
// Every text from the API is put in the page as a text node (never as markup), and
// the characters that could hide or reorder what a call will run (controls, direction
// overrides, invisible ones) are shown as marked escapes: the same class the terminal
// uses, inserted by the server. The token lives in this tab's session storage and is
// sent as a bearer header; the server reads no cookie.
"use strict";

const UNSAFE = new RegExp("__UNSAFE__", "gu");
const WAIT = 25;
const TOKEN_KEY = "subagents-inbox-token";

let token = sessionStorage.getItem(TOKEN_KEY) || "";
let version = "";
let poller = null;
const pauses = new Map();
const panels = new Map();
const LIVE_WAIT = 20;
const LIVE_CHARS = 20000;

function escapeOf(char) {
  const code = char.codePointAt(0);
  const hex = code.toString(16);
  if (code < 0x100) return "\\x" + hex.padStart(2, "0");
  if (code < 0x10000) return "\\u" + hex.padStart(4, "0");
  return "\\U" + hex.padStart(8, "0");
}

// Text as nodes: plain runs as text nodes, each unsafe character as a marked escape.
function shown(text) {
  const fragment = document.createDocumentFragment();
  const value = String(text ?? "");
  let last = 0;
  for (const match of value.matchAll(UNSAFE)) {
    if (match.index > last) fragment.append(value.slice(last, match.index));
    const mark = document.createElement("span");
    mark.className = "esc";
    mark.dataset.char = match[0].codePointAt(0).toString(16);
    mark.title = "hidden character U+" + mark.dataset.char.toUpperCase().padStart(4, "0");
    mark.textContent = escapeOf(match[0]);
    fragment.append(mark);
    last = match.index + match[0].length;
  }
  if (last < value.length) fragment.append(value.slice(last));
  return fragment;
}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else if (key === "data") Object.assign(node.dataset, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(typeof child === "string" ? shown(child) : child);
  }
  return node;
}

function setState(text) {
  document.getElementById("state").textContent = text;
}

function notify(text, ok) {
  const notice = document.getElementById("notice");
  notice.textContent = "";
  notice.append(shown(text));
  notice.className = ok ? "ok" : "";
  notice.hidden = false;
}

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || "HTTP " + status);
    this.status = status;
    this.body = body;
  }
}

async function api(path, options = {}) {
  const headers = { Authorization: "Bearer " + token };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method: options.method || "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    signal: options.signal,
    credentials: "omit",
    cache: "no-store",
    redirect: "error",
  });
  let body = null;
  try {
    body = await response.json();
  } catch (_) {
    body = null;
  }
  if (!response.ok) throw new ApiError(response.status, body);
  return body;
}

function webUiLink(url) {
  if (typeof url !== "string" || !/^https?:\/\//i.test(url)) return null;
  return el("a", { href: url, target: "_blank", rel: "noopener noreferrer" }, "Open in the Temporal Web UI");
}

function argumentsList(call) {
  if (call.arguments === null || call.arguments === undefined) {
    return el(
      "div",
      {},
      el("p", { class: "warn" }, "Only a preview: the full arguments could not be read here."),
      el("pre", { class: "preview" }, call.arguments_preview),
    );
  }
  const list = el("dl", { class: "arguments" });
  for (const [name, value] of Object.entries(call.arguments)) {
    const text = typeof value === "string" ? value : JSON.stringify(value, null, 2);
    list.append(el("dt", {}, name), el("dd", {}, el("pre", { class: "argument", data: { name } }, text)));
  }
  return list;
}

function callRefs(view) {
  return view.calls.map((c) => ({ call_id: c.call_id, tool_name: c.tool_name, arguments_hash: c.arguments_hash }));
}

async function decide(view, approve, callIds, reason, budgetUsd) {
  const body = { pause_id: view.pause_id, calls: callRefs(view), call_ids: callIds };
  if (!approve) body.reason = reason || null;
  if (approve && budgetUsd != null) body.budget_usd = budgetUsd;
  const verb = approve ? "approve" : "reject";
  try {
    const result = await api("/api/tasks/" + encodeURIComponent(view.task_id) + "/" + verb, {
      method: "POST",
      body,
    });
    let text = (approve ? "Approved " : "Rejected ") + result.decided.length + " call(s) of " + view.task_id + ".";
    if (result.not_shown.length) {
      text += " " + result.not_shown.length + " call(s) came to the pause after this page read it: " +
        "they stay pending, read them below.";
    }
    notify(text, true);
  } catch (err) {
    const message = err instanceof ApiError ? err.message : String(err);
    const stale = err instanceof ApiError && err.status === 409;
    notify(
      (stale ? "Refused: the pause changed since this page read it. " : "Not decided: ") + message,
      false,
    );
  }
  refresh();
}

function callSection(view, call) {
  const owner = call.task_id !== view.task_id ? el("span", { class: "owner" }, " in subagent " + call.task_id) : "";
  const reason = el("input", { type: "text", placeholder: "reason for a rejection (the model reads it)", maxlength: "4000" });
  const approve = el("button", { type: "button", class: "approve" }, "Approve");
  const reject = el("button", { type: "button", class: "reject" }, "Reject");
  // A tree that spent its budget: approving raises it to the amount given (else by the
  // budget it was spawned with); rejecting stops the tree.
  const raise = call.tool_name === "raise_budget";
  const budget = raise
    ? el("input", { type: "number", min: "0", step: "any", class: "budget", placeholder: "new budget in USD" })
    : null;
  if (raise) approve.textContent = "Raise the budget";
  approve.addEventListener("click", () => {
    const amount = budget && budget.value !== "" ? Number(budget.value) : null;
    decide(view, true, [call.call_id], null, amount);
  });
  reject.addEventListener("click", () => decide(view, false, [call.call_id], reason.value));
  const parts = [
    el("h3", {}, call.tool_name, " ", el("span", { class: "call-id" }, call.call_id), owner),
    argumentsList(call),
  ];
  if (call.resolved_path) parts.push(el("p", { class: "warn" }, "The path leads to: " + call.resolved_path));
  parts.push(budget ? el("div", { class: "actions" }, budget, approve, reason, reject) : el("div", { class: "actions" }, approve, reason, reject));
  return el("article", { class: "call", data: { call: call.call_id } }, ...parts);
}

// A cost as the command line shows it: cents from a dollar up, else up to six decimals.
function usd(value) {
  if (value >= 1) return "$" + value.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  if (value > 0 && value < 0.000001) return "<$0.000001";
  return "$" + value.toFixed(6).replace(/\.?0+$/, "");
}

// What the task and every subagent below it cost so far, where its models have prices.
function costText(task) {
  return task.tree_cost_usd == null ? "" : " · cost " + usd(task.tree_cost_usd);
}

function entrySection(entry, view) {
  const task = entry.task;
  const link = webUiLink(view.web_ui || entry.web_ui);
  const meta = el("p", { class: "meta" }, "agent " + task.agent + costText(task) + " · pause " + view.pause_id + " · ");
  if (link) meta.append(link);
  const section = el(
    "section",
    { class: "entry", data: { task: task.id, pause: view.pause_id } },
    el("h2", {}, task.id),
    el("p", { class: "description" }, task.description || ""),
    meta,
  );
  for (const call of view.calls) section.append(callSection(view, call));
  section.append(livePanel(task.id));
  const reason = el("input", { type: "text", placeholder: "reason for rejecting all shown", maxlength: "4000" });
  const approveAll = el("button", { type: "button", class: "approve approve-all" }, "Approve all shown (" + view.calls.length + ")");
  const rejectAll = el("button", { type: "button", class: "reject reject-all" }, "Reject all shown");
  approveAll.addEventListener("click", () => decide(view, true, null, null));
  rejectAll.addEventListener("click", () => decide(view, false, null, reason.value));
  section.append(el("div", { class: "actions all" }, approveAll, reason, rejectAll));
  return section;
}

// A live panel per paused tree: its events and its subagents', text as it streams.
// It outlives the listing's re-renders, and stops when its tree leaves the inbox.
function livePanel(taskId) {
  if (panels.has(taskId)) return panels.get(taskId).node;
  const log = el("pre", { class: "live-log" });
  const node = el("details", { class: "live", open: "", data: { task: taskId } },
    el("summary", {}, "Live: what it and its subagents do"), log);
  const panel = { node, log, abort: new AbortController(), after: null, line: null, key: null };
  panels.set(taskId, panel);
  followLive(taskId, panel);
  return node;
}

function liveWrite(panel, event) {
  const who = event.depth ? "  ".repeat(event.depth) + "[" + event.task_id + "] " : "";
  const streaming = event.kind === "text" || event.kind === "thinking";
  const key = event.task_id + "\n" + event.kind + "\n" + event.turn;
  if (streaming && panel.key === key && event.summary !== "restarted") {
    panel.line.append(shown(event.text || ""));
  } else {
    let detail = [event.status, event.summary].filter(Boolean).join(" · ");
    if (streaming) detail = (event.summary === "restarted" ? "[restarted] " : "") + (event.text || "");
    if (event.result) detail += " → " + event.result;
    if (event.error) detail += " (" + event.error + ")";
    const line = el("span", { class: "live-" + event.kind }, who + event.kind + " " + detail);
    if (panel.log.childNodes.length) panel.log.append("\n");
    panel.log.append(line);
    panel.line = line;
    panel.key = streaming ? key : null;
  }
  while (panel.log.textContent.length > LIVE_CHARS && panel.log.childNodes.length > 2) {
    panel.log.firstChild.remove();
    panel.log.firstChild.remove();
  }
}

async function followLive(taskId, panel) {
  const signal = panel.abort.signal;
  while (!signal.aborted) {
    try {
      const after = panel.after === null ? "" : "&after=" + panel.after;
      const page = await api("/api/tasks/" + encodeURIComponent(taskId) + "/events?tree=true&wait=" +
        LIVE_WAIT + after, { signal });
      for (const event of page.events) liveWrite(panel, event);
      if (page.next !== null && page.next !== undefined) panel.after = page.next;
      if (page.events.some((e) => e.kind === "closed" && !e.depth)) return;
    } catch (err) {
      if (signal.aborted) return;
      await new Promise((done) => setTimeout(done, 2000));
    }
  }
}

function dropPanels(kept) {
  for (const [taskId, panel] of panels) {
    if (!kept.has(taskId)) {
      panel.abort.abort();
      panels.delete(taskId);
    }
  }
}

async function pauseOf(entry) {
  const key = entry.task.id + "\n" + entry.pause_id + "\n" + entry.calls.map((c) => c.call_id + "=" + c.arguments_hash).join(",");
  if (!pauses.has(key)) {
    pauses.set(key, await api("/api/tasks/" + encodeURIComponent(entry.task.id) + "/pause"));
  }
  return pauses.get(key);
}

function heldSection(held) {
  const task = held.task;
  const link = webUiLink(held.web_ui);
  const meta = el("p", { class: "meta" }, "agent " + task.agent + " · held, nothing to decide · ");
  if (link) meta.append(link);
  return el(
    "section",
    { class: "entry held", data: { task: task.id } },
    el("h2", {}, task.id),
    el("p", { class: "description" }, task.description || ""),
    meta,
    el(
      "p",
      { class: "warn" },
      "Its workflow code fails at every attempt: Temporal retries it, and the task goes on " +
        "from its last recorded step once a worker with a fix runs.",
    ),
    el("pre", { class: "retrying" }, task.retrying || ""),
  );
}

async function render(view) {
  const sections = (view.held || []).map(heldSection);
  for (const entry of view.entries) {
    try {
      sections.push(entrySection(entry, await pauseOf(entry)));
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) throw err;
      // decided or resumed between the listing and the read: the next listing drops it
    }
  }
  dropPanels(new Set(view.entries.map((entry) => entry.task.id)));
  const main = document.getElementById("entries");
  main.replaceChildren(...sections);
  if (!sections.length) main.append(el("p", { class: "empty" }, "Nothing waits for a decision."));
}

async function pollLoop(signal) {
  while (!signal.aborted) {
    try {
      const view = await api("/api/inbox?wait=" + (version ? WAIT : 0) + "&since=" + encodeURIComponent(version), { signal });
      if (view.version !== version) {
        await render(view);
        version = view.version;
      }
      setState("Up to date at " + new Date().toLocaleTimeString() + " · " + view.entries.length + " paused" +
        (view.held && view.held.length ? " · " + view.held.length + " held by a bug" : ""));
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && (err.status === 401 || err.status === 403)) {
        setState("The server refused the token: " + err.message);
        return;
      }
      setState("Cannot reach the inbox (" + (err.message || err) + "); trying again");
      await new Promise((done) => setTimeout(done, 2000));
    }
  }
}

function refresh() {
  if (poller) poller.abort();
  dropPanels(new Set());
  version = "";
  if (!token) {
    setState("Enter a token to read the inbox.");
    return;
  }
  poller = new AbortController();
  pollLoop(poller.signal);
}

document.getElementById("token-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const field = document.getElementById("token");
  token = field.value.trim();
  field.value = "";
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  refresh();
});
document.getElementById("forget").addEventListener("click", () => {
  token = "";
  sessionStorage.removeItem(TOKEN_KEY);
  document.getElementById("entries").replaceChildren();
  refresh();
});
refresh();
