// Sluice console: the few live parts. Pages work without it.
"use strict";

// Ask before a destructive form goes.
document.addEventListener("submit", (ev) => {
  const form = ev.target;
  const button = ev.submitter;
  const question = (button && button.dataset.confirm) || form.dataset.confirm;
  if (question && !window.confirm(question)) ev.preventDefault();
});

// The organization picker navigates on change.
for (const select of document.querySelectorAll("select[data-autosubmit]")) {
  select.addEventListener("change", () => select.form.submit());
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
  const fmtTime = (t) => (t ? t.replace("T", " ").replace(/(\.\d+)?Z$/, "") : "—");
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
  const show = (r) => {
    document.getElementById("run-status").replaceChildren(badge(r.status));
    document.getElementById("run-started").textContent = fmtTime(r.started_at);
    if (r.started_at) {
      const end = r.finished_at ? new Date(r.finished_at) : new Date();
      document.getElementById("run-duration").textContent = ((end - new Date(r.started_at)) / 1000).toFixed(1) + " s";
    }
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
      cell(row, e.rows_per_second == null ? "—" : fmtCount(Math.round(e.rows_per_second)) + " rows/s", "num");
      cell(row, fmtTime(e.checkpoint_at));
    }
  };
  const log = document.getElementById("run-log");
  // Each (re)connection streams every line from the first: those already
  // on the page are skipped.
  let shown = log.children.length;
  let received = 0;
  const events = new EventSource(run.dataset.events);
  events.addEventListener("open", () => { received = 0; });
  events.addEventListener("run", (ev) => show(JSON.parse(ev.data)));
  events.addEventListener("log", (ev) => {
    received += 1;
    if (received <= shown) return;
    const l = JSON.parse(ev.data);
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
