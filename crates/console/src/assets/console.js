// Sluice console: the few live parts. Pages work without it.
"use strict";

// Ask before a destructive form goes.
document.addEventListener("submit", (ev) => {
  const form = ev.target;
  const button = ev.submitter;
  const question = (button && button.dataset.confirm) || form.dataset.confirm;
  if (question && !window.confirm(question)) ev.preventDefault();
});

// The organization picker navigates when one is picked with the pointer,
// or with Enter: arrow keys only move through the list.
for (const select of document.querySelectorAll("select[data-autosubmit]")) {
  let byKey = false;
  select.addEventListener("keydown", (ev) => {
    byKey = ev.key !== "Enter";
    if (ev.key === "Enter") { ev.preventDefault(); select.form.submit(); }
  });
  select.addEventListener("pointerdown", () => { byKey = false; });
  select.addEventListener("change", () => { if (!byKey) select.form.submit(); });
  // Left without Enter: back to the organization of the page.
  select.addEventListener("blur", () => {
    for (const o of select.options) o.selected = o.defaultSelected;
  });
}

// A new connection's (or integration's) type fills its configuration
// (or credentials) template, unless edited.
for (const select of document.querySelectorAll("select[data-templates]")) {
  const area = select.dataset.target
    ? document.getElementById(select.dataset.target)
    : select.form.querySelector("textarea[name=config]");
  let edited = false;
  area.addEventListener("input", () => { edited = true; });
  select.addEventListener("change", () => {
    if (!edited) area.value = select.selectedOptions[0].dataset.template || "{}";
  });
}

// A file input loads its text into a textarea (IaC documents).
for (const input of document.querySelectorAll("input[data-load-into]")) {
  input.addEventListener("change", async () => {
    const file = input.files[0];
    if (file) document.getElementById(input.dataset.loadInto).value = await file.text();
  });
}

// A run's page follows the run over the API's server-sent events.
const run = document.getElementById("run");
if (run && run.dataset.finished !== "true") {
  const fmtCount = (n) => Number(n || 0).toLocaleString("en-US");
  const fmtTime = (t) => (t ? t.replace("T", " ").replace(/(\.\d+)?Z$/, "") + " UTC" : "—");
  const fmtBytes = (n) => {
    if (!n) return "—";
    if (n < 1024) return n + " B";
    const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let v = n / 1024, u = 0;
    while (v >= 1024 && u + 1 < units.length) { v /= 1024; u += 1; }
    return v.toFixed(1) + " " + units[u];
  };
  const badge = (status) => {
    const span = document.createElement("span");
    const tone = { succeeded: "ok", failed: "bad", drift_detected: "bad", running: "live", queued: "live" }[status] || "plain";
    span.className = "badge " + tone;
    span.textContent = status;
    return span;
  };
  const cell = (row, value, cls) => {
    const td = row.insertCell();
    if (cls) td.className = cls;
    if (value instanceof Node) td.append(value); else td.textContent = value;
  };
  // The run as last heard of: its duration ticks between events, so
  // that a long first load never looks stalled.
  let current = null;
  const tick = () => {
    if (!current || !current.started_at) return;
    const end = current.finished_at ? new Date(current.finished_at) : new Date();
    document.getElementById("run-duration").textContent = ((end - new Date(current.started_at)) / 1000).toFixed(1) + " s";
  };
  const ticking = setInterval(() => { tick(); if (current && current.finished_at) clearInterval(ticking); }, 1000);
  const show = (r) => {
    current = r;
    document.getElementById("run-status").replaceChildren(badge(r.status));
    document.getElementById("run-started").textContent = fmtTime(r.started_at);
    tick();
    const error = document.getElementById("run-error");
    error.textContent = r.error || "";
    error.hidden = !r.error;
    const body = document.querySelector("#run-entities tbody");
    body.replaceChildren();
    for (const e of r.entities || []) {
      const row = body.insertRow();
      const code = document.createElement("code");
      code.textContent = e.entity;
      cell(row, code);
      cell(row, badge(e.status));
      cell(row, fmtCount(e.rows_read), "num");
      cell(row, fmtCount(e.rows_written), "num");
      cell(row, fmtBytes(e.bytes), "num");
      cell(row, e.rows_per_second == null ? "—" : fmtCount(Math.round(e.rows_per_second)) + " rows/s", "num");
      cell(row, fmtTime(e.checkpoint_at));
      const cause = document.createElement("span");
      cause.className = "error";
      cause.textContent = e.error || "";
      cell(row, cause, "cause");
    }
  };
  const log = document.getElementById("run-log");
  // Each (re)connection streams every line from the first: those already
  // on the page are skipped.
  // Only the levels the page was asked for (?level=) are counted and shown.
  const rank = { info: 0, warn: 1, error: 2 };
  const least = rank[log.dataset.level] || 0;
  let shown = log.children.length;
  let received = 0;
  const events = new EventSource(run.dataset.events);
  events.addEventListener("open", () => { received = 0; });
  events.addEventListener("run", (ev) => show(JSON.parse(ev.data)));
  events.addEventListener("log", (ev) => {
    const l = JSON.parse(ev.data);
    if ((rank[l.level] || 0) < least) return;
    received += 1;
    if (received <= shown) return;
    const li = document.createElement("li");
    li.className = l.level;
    const time = document.createElement("time");
    time.textContent = fmtTime(l.ts);
    li.append(time, " ");
    if (l.entity) { const c = document.createElement("code"); c.textContent = l.entity; li.append(c, " "); }
    li.append(l.message);
    log.append(li);
    shown += 1;
    log.scrollTop = log.scrollHeight;
  });
  events.addEventListener("end", (ev) => {
    show(JSON.parse(ev.data));
    events.close();
    const live = document.getElementById("run-live");
    if (live) live.textContent = "The run has ended.";
  });
  events.addEventListener("error", () => {
    // The browser reconnects on its own; a closed stream after the end is fine.
    if (events.readyState === EventSource.CLOSED) events.close();
  });
}
