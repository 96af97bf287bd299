// The dashboard's page: reads the wheels' JSON every refresh and draws it. Text from a wheel
// (keys, error texts, payloads) only ever goes in as text (textContent), never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
let info = { wheels: [], actions: false, delete: false, refresh_ms: 1500, dead_letters_shown: 10, page_size: 50, bulk_max: 500 };
let refreshes = 0;

// Where the page is: the wheel, the view, the state listed and the page of it (the cursors of
// the pages walked so far: the server's opaque `next` texts, null for the first page).
const at = { wheel: "", view: "overview", state: "waiting", pages: [null], page: 0, next: null };
// The dead letters selected, by key, kept across refreshes and pages.
const selected = new Set();

function $(id) {
  return document.getElementById(id);
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined && text !== null) node.textContent = text;
  return node;
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/// The path of a call about the wheel shown.
function api(path) {
  return "api/w/" + encodeURIComponent(at.wheel) + "/" + path;
}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Timewheel-Action": "1" },
    body: JSON.stringify(body || {}),
  });
  const answer = await response.json().catch(() => ({ error: response.statusText }));
  return { ok: response.ok, body: answer };
}

function number(n) {
  return Number(n).toLocaleString("en-US");
}

function ms(value) {
  if (value < 1) return value.toFixed(2) + " ms";
  if (value < 1000) return (value < 10 ? value.toFixed(1) : Math.round(value)) + " ms";
  return (value / 1000).toFixed(value < 10000 ? 2 : 1) + " s";
}

/// A span of time in words: "850 ms", "12 s", "4 min 5 s", "3 h 20 min".
function span(msValue) {
  if (msValue < 1000) return Math.round(msValue) + " ms";
  const s = Math.floor(msValue / 1000);
  if (s < 60) return s + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
  if (s < 86400) return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  return Math.floor(s / 86400) + " d " + Math.floor((s % 86400) / 3600) + " h";
}

/// A bound in milliseconds, to three figures.
function bound(msValue) {
  if (msValue < 1000) return msValue + " ms";
  return Number((msValue / 1000).toPrecision(3)) + " s";
}

/// The lateness bars of the wheel's figures (its buckets, `below_ms` null for the open-ended
/// last one): every octave from 1 ms to the last bound that holds a count, and at least to
/// 128 ms so that the scale stays put while the figures are small, then the open-ended bucket if
/// it holds any.
function lateBars(buckets) {
  const count = new Map(buckets.map((b) => [b.below_ms, b.count]));
  const last = Math.max(128, ...buckets.filter((b) => b.below_ms != null).map((b) => b.below_ms));
  const bars = [];
  for (let below = 1; below <= last; below *= 2) bars.push({ below_ms: below, count: count.get(below) || 0 });
  if (count.get(null)) bars.push({ below_ms: null, count: count.get(null) });
  return bars;
}

function time(unixMs) {
  return new Date(unixMs).toLocaleString("en-GB", { hour12: false });
}

function clock(unixMs) {
  return new Date(unixMs).toLocaleTimeString("en-GB", { hour12: false });
}

/// Draws bars into an SVG plot of 600 x 200: one value per bar, a label under some of them.
function drawBars(svg, values, labels, labelEvery, title) {
  svg.replaceChildren();
  const width = 600, height = 200, left = 44, bottom = 26, top = 10, right = 8;
  const plotW = width - left - right, plotH = height - top - bottom;
  const max = Math.max(1, ...values);
  grid(svg, max, left, width - right, top, plotH);
  const slot = plotW / Math.max(1, values.length);
  values.forEach((v, i) => {
    const h = (v / max) * plotH;
    const bar = svgEl("rect", {
      x: left + i * slot + 1, y: top + plotH - h, width: Math.max(1, slot - 2), height: h, class: "bar",
    });
    bar.appendChild(svgEl("title", {}, labels[i] + ": " + number(v) + " " + title));
    svg.appendChild(bar);
    if (i % labelEvery === 0) {
      svg.appendChild(svgEl("text", { x: left + i * slot + slot / 2, y: height - 8, class: "axis", "text-anchor": "middle" }, labels[i]));
    }
  });
}

/// Grid lines at round values from 0 to `max`, labelled on the left.
function grid(svg, max, x1, x2, top, plotH) {
  const step = niceStep(max / 4);
  for (let v = 0; v <= max + 1e-9; v += step) {
    const y = top + plotH - (v / max) * plotH;
    svg.appendChild(svgEl("line", { x1: x1, x2: x2, y1: y, y2: y, class: "grid" }));
    svg.appendChild(svgEl("text", { x: x1 - 6, y: y + 4, class: "axis", "text-anchor": "end" }, number(v)));
  }
}

function niceStep(raw) {
  if (raw <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

/// Lines of several series over the same minutes, with a legend: in a plot of 1200 x 220, or of
/// 600 x 260 on a narrow screen, where the wide one's text would be too small to read.
function drawLines(svg, starts, series) {
  svg.replaceChildren();
  const narrow = svg.parentNode.clientWidth < 700;
  const width = narrow ? 600 : 1200, height = narrow ? 260 : 220, left = 52, bottom = 26, top = 24, right = 10;
  svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  const plotW = width - left - right, plotH = height - top - bottom;
  const max = Math.max(1, ...series.flatMap((s) => s.values));
  grid(svg, max, left, width - right, top, plotH);
  const x = (i) => left + (starts.length <= 1 ? 0 : (i / (starts.length - 1)) * plotW);
  series.forEach((s, n) => {
    const points = s.values.map((v, i) => x(i) + "," + (top + plotH - (v / max) * plotH)).join(" ");
    svg.appendChild(svgEl("polyline", { points: points, class: "line " + s.class }));
    const legendX = left + n * (narrow ? 130 : 150);
    svg.appendChild(svgEl("rect", { x: legendX, y: 4, width: 12, height: 12, class: "swatch " + s.class }));
    svg.appendChild(svgEl("text", { x: legendX + 18, y: 14, class: "axis" }, s.name));
  });
  starts.forEach((start, i) => {
    if (i % (narrow ? 15 : 10) === 0) svg.appendChild(svgEl("text", { x: x(i), y: height - 8, class: "axis", "text-anchor": "middle" }, clock(start).slice(0, 5)));
  });
}

// ---- the wheels and the wheel shown ----

function showWheels(overview) {
  const body = $("wheels").tBodies[0];
  body.replaceChildren();
  for (const w of overview.wheels) {
    const row = el("tr", { "data-wheel": w.wheel, class: w.wheel === at.wheel ? "current" : "" });
    const name = el("td", { class: "key" });
    const pick = el("button", { type: "button", class: "link", title: w.wheel }, w.wheel);
    pick.addEventListener("click", () => choose(w.wheel));
    name.appendChild(pick);
    row.appendChild(name);
    if (w.error) {
      row.appendChild(el("td", { colspan: "5", class: "error" }, "cannot read it: " + w.error));
    } else {
      for (const state of ["waiting", "ready", "running", "dead"]) {
        row.appendChild(el("td", { class: "num", "data-count": state }, number(w[state])));
      }
      row.appendChild(el("td", {}, w.paused ? "paused" : ""));
      if (w.paused) row.lastChild.className = "paused-tag";
    }
    body.appendChild(row);
  }
}

function showStats(stats) {
  for (const node of document.querySelectorAll("[data-stat]")) {
    const value = stats[node.dataset.stat];
    if (value !== undefined) node.textContent = number(value);
  }
  $("paused-note").hidden = !stats.paused;
  $("paused-banner").hidden = !stats.paused;
  $("paused-wheel").textContent = at.wheel;
  document.body.dataset.paused = String(!!stats.paused);
  $("pause").hidden = !info.actions || stats.paused;
  $("resume").hidden = !info.actions || !stats.paused;
}

/// The limits by key prefix, each with what it allows; "none" when there are none.
function showLimits(limits) {
  const list = $("limits");
  list.replaceChildren();
  for (const l of limits.limits) {
    const item = el("div", { "data-prefix": l.prefix });
    item.appendChild(el("dt", {}, l.prefix));
    item.appendChild(el("dd", {}, l.limit));
    list.appendChild(item);
  }
  $("limits-none").hidden = limits.limits.length > 0;
}

/// The lateness plot: every node's over the last hour (the wheel's figures); the note adds what
/// this process's workers saw lately.
function showLateness(late, figures) {
  const here = late.count === 0
    ? "This process's workers claimed nothing in the last " + late.window_s + " to " + 2 * late.window_s + " s."
    : "This process's workers, the last " + late.window_s + " to " + 2 * late.window_s + " s: " + number(late.count) +
      " deliveries claimed, p50 " + ms(late.p50_ms) + ", p99 " + ms(late.p99_ms) + ", max " + ms(late.max_ms) + " late.";
  const lateness = figures.lateness;
  const bars = lateBars(lateness.buckets);
  const labels = bars.map((b) => b.below_ms == null ? "later" : "< " + bound(b.below_ms));
  drawBars($("late-plot"), bars.map((b) => b.count), labels, 2, "deliveries");
  const within = (below) => below == null ? "more than the largest bucket" : ms(below);
  const wide = lateness.claimed === 0
    ? "No delivery claimed in the last hour, by any node."
    : number(lateness.claimed) + " deliveries claimed in the last hour, every node's: p50 within " + within(lateness.p50_below_ms) +
      ", p99 within " + within(lateness.p99_below_ms) + " of their due time (Redis's clock).";
  $("late-note").textContent = wide + " " + here;
}

/// The chart of every node's deliveries a minute over the last hour.
function showFigures(figures) {
  const minutes = figures.minutes;
  drawLines($("rates-plot"), minutes.map((m) => m.start_unix_ms), [
    { name: "handed out", class: "handed", values: minutes.map((m) => m.handed_out) },
    { name: "acknowledged", class: "acked", values: minutes.map((m) => m.acked) },
    { name: "failed", class: "failed", values: minutes.map((m) => m.failed) },
  ]);
  const sum = (field) => minutes.reduce((a, m) => a + m[field], 0);
  $("rates-note").textContent = "Over the last " + minutes.length + " minutes, every node together: " +
    number(sum("handed_out")) + " handed out, " + number(sum("acked")) + " acknowledged, " + number(sum("failed")) +
    " failed, " + number(sum("dead")) + " dead-lettered.";
}

function showDue(due) {
  const labels = due.counts.map((_, i) => "+" + Math.round((i * due.bucket_s) / 60) + " min");
  drawBars($("due-plot"), due.counts, labels, 10, "tasks due");
  const total = due.counts.reduce((a, b) => a + b, 0);
  $("due-note").textContent = number(total) + (total === 1 ? " task falls" : " tasks fall") + " due in the next hour, a bar a minute from " + time(due.from_unix_ms) + ".";
}

function showNodes(nodes) {
  const list = el("ul", { class: "nodes" });
  for (const leader of nodes.leaders || []) {
    list.appendChild(el("li", {}, "partition " + leader.partition + ": led by " + leader.node));
  }
  for (const worker of nodes.workers || []) {
    list.appendChild(el("li", {}, "worker " + worker.node));
  }
  $("nodes").replaceChildren(list);
}

/// A cell with a key on one line (cut with an ellipsis, whole in its title) that opens the
/// task's detail when clicked.
function keyCell(key) {
  const cell = el("td", { class: "key" });
  const open = el("button", { type: "button", class: "link", title: key, "data-open": key }, key);
  open.addEventListener("click", () => detail(key));
  cell.appendChild(open);
  return cell;
}

function showDead(dead, total) {
  const body = $("dead-letters").tBodies[0];
  body.replaceChildren();
  if (dead.letters.length === 0) {
    const row = el("tr");
    row.appendChild(el("td", { colspan: "5", class: "note" }, "No dead letters."));
    body.appendChild(row);
  }
  for (const letter of dead.letters) {
    const row = el("tr", { "data-key": letter.key });
    row.appendChild(keyCell(letter.key));
    row.appendChild(el("td", { class: "num" }, number(letter.attempts)));
    row.appendChild(el("td", { class: "error" }, letter.last_error));
    row.appendChild(el("td", { class: "when" }, time(letter.died_unix_ms)));
    const buttons = el("td", { class: "actions" });
    if (info.actions) {
      buttons.appendChild(actionButton("Requeue", "dead/requeue", letter.key, "requeued", { "data-requeue": letter.key }));
      buttons.appendChild(actionButton("Delete", "dead/delete", letter.key, "deleted", { "data-delete": letter.key, class: "danger" }, true));
    }
    row.appendChild(buttons);
    body.appendChild(row);
  }
  $("dead-note").textContent = total > dead.letters.length
    ? "The oldest " + number(dead.letters.length) + " of " + number(total) + ": the Tasks view pages through all of them."
    : info.actions ? "" : "Read-only: the mounting code can enable the actions (Dashboard::actions).";
}

/// A button that posts `{"key": key}` to the wheel's `path`, after asking when `ask`.
function actionButton(label, path, key, done, attrs, ask) {
  const button = el("button", Object.assign({ type: "button", "data-act": path, "data-key": key }, attrs || {}), label);
  button.addEventListener("click", () => {
    if (ask && !window.confirm(label + " " + key + "?")) return;
    act(path, { key: key }, key + " " + done);
  });
  return button;
}

async function act(path, body, done) {
  const result = await post(api(path), body);
  flash(result.ok ? done : "Could not do it: " + (result.body.error || "unknown error"), !result.ok);
  refresh();
  return result;
}

function flash(text, bad) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("bad", !!bad);
  status.dataset.flash = String(Date.now());
}

// ---- the tasks view ----

/// The series a task is a run of (the `recurrence` of the JSON), in words: its cadence, end,
/// missed-run policy and runs left, and its next run in UTC and in the series' zone.
function series(r) {
  if (r.unreadable != null) return "a series this build cannot read (" + r.unreadable + ")";
  let text = r.cadence + ", missed runs: " + r.missed;
  if (r.end_unix_ms != null) text += ", until " + new Date(r.end_unix_ms).toISOString();
  if (r.runs_left != null) text += ", " + number(r.runs_left) + (r.runs_left === 1 ? " run" : " runs") + " left";
  if (r.next_run_unix_ms != null) {
    text += " · next run " + r.next_run_utc;
    if (r.next_run_local != null) text += " (" + r.zone + " " + r.next_run_local + ")";
  } else {
    text += " · no run after this one";
  }
  return text;
}

/// A finished run's outcome, when its handler started and how long it took, and when it ended
/// (the `finished` of the task's JSON).
function finishedRun(run) {
  let text = run.outcome;
  if (run.started_unix_ms != null) text += " · started " + clock(run.started_unix_ms);
  if (run.handler_ms != null) {
    text += ", ran " + (run.handler_ms < 10 ? run.handler_ms.toFixed(2) + " ms" : span(run.handler_ms));
  }
  return text + " · ended " + clock(run.finished_unix_ms);
}

function showTasks(page) {
  const body = $("tasks").tBodies[0];
  const pick = info.actions && at.state === "dead";
  $("tasks").classList.toggle("no-pick", !pick);
  $("bulk").hidden = !pick;
  body.replaceChildren();
  const finished = at.state === "finished";
  $("tasks-run").textContent = finished ? "run" : "worker";
  if (page.tasks.length === 0) {
    const row = el("tr");
    const none = finished ? "No finished runs in the history." : "No " + at.state + " tasks.";
    row.appendChild(el("td", { colspan: "7", class: "note" }, at.page === 0 ? none : "No more."));
    body.appendChild(row);
  }
  for (const task of page.tasks) {
    const row = el("tr", { "data-key": task.key, "data-state": at.state });
    const box = el("td", { class: "pick" });
    if (pick) {
      const check = el("input", { type: "checkbox", "data-pick": task.key, "aria-label": "select " + task.key });
      check.checked = selected.has(task.key);
      check.addEventListener("change", () => {
        if (check.checked) selected.add(task.key); else selected.delete(task.key);
        showSelected();
      });
      box.appendChild(check);
    }
    row.appendChild(box);
    row.appendChild(keyCell(task.key));
    const due = task.overdue_ms != null
      ? el("td", { class: "when late" }, "overdue by " + span(task.overdue_ms))
      : el("td", { class: "when" }, time(task.due_unix_ms));
    if (task.recurrence) {
      const cadence = task.recurrence.cadence || "a series";
      due.appendChild(el("span", { class: "series", title: series(task.recurrence) }, " ↻ " + cadence));
    }
    row.appendChild(due);
    row.appendChild(el("td", { class: "num" }, number(task.attempt)));
    if (finished) {
      row.appendChild(el("td", { class: "run", "data-outcome": task.finished.outcome }, finishedRun(task.finished)));
    } else {
      const worker = task.claimed_unix_ms != null
        ? (task.worker || "a worker") + " · since " + clock(task.claimed_unix_ms) + " (" + span(Math.max(0, Date.now() - task.claimed_unix_ms)) + ")"
        : "";
      row.appendChild(el("td", { class: "worker", "data-worker": task.worker || "" }, worker));
    }
    row.appendChild(el("td", { class: "error" }, task.last_error || ""));
    const buttons = el("td", { class: "actions" });
    if (info.actions && !finished) {
      if (at.state === "waiting" || at.state === "ready") {
        buttons.appendChild(actionButton("Run now", "run-now", task.key, "due now"));
        buttons.appendChild(actionButton("Cancel", "cancel", task.key, "cancelled", { class: "danger" }, true));
      } else if (at.state === "running") {
        buttons.appendChild(actionButton("Cancel running", "cancel-running", task.key, "told to stop", { class: "danger" }, true));
      } else {
        buttons.appendChild(actionButton("Requeue", "dead/requeue", task.key, "requeued"));
        buttons.appendChild(actionButton("Delete", "dead/delete", task.key, "deleted", { class: "danger" }, true));
      }
    }
    row.appendChild(buttons);
    body.appendChild(row);
  }
  at.next = page.next;
  $("page-next").disabled = !page.next;
  $("page-prev").disabled = at.page === 0;
  $("page-first").disabled = at.page === 0;
  const from = at.page * page.limit;
  $("page-note").textContent = page.tasks.length === 0
    ? "page " + (at.page + 1)
    : "page " + (at.page + 1) + " · " + number(from + 1) + "–" + number(from + page.tasks.length) + (page.next ? "" : " (the last)");
  $("tasks").dataset.loaded = at.state + ":" + at.page;
  $("pick-page").checked = pick && page.tasks.length > 0 && page.tasks.every((t) => selected.has(t.key));
  showSelected();
}

function showSelected() {
  $("selected-count").textContent = selected.size === 0 ? "none selected" : number(selected.size) + " selected";
  $("requeue-selected").disabled = selected.size === 0;
  $("delete-selected").disabled = selected.size === 0;
}

/// Requeues or deletes the selected dead letters, `bulk_max` a request.
async function actOnSelected(path, done) {
  const keys = Array.from(selected);
  if (path === "dead/delete" && !window.confirm("Delete " + keys.length + " dead letters?")) return;
  let count = 0;
  for (let i = 0; i < keys.length; i += info.bulk_max) {
    const result = await post(api(path), { keys: keys.slice(i, i + info.bulk_max) });
    if (!result.ok) {
      flash("Could not do it: " + (result.body.error || "unknown error"), true);
      break;
    }
    const acted = result.body.requeued || result.body.deleted || [];
    acted.forEach((k) => selected.delete(k));
    (result.body.missing || []).forEach((k) => selected.delete(k));
    count += acted.length;
    flash(number(count) + " " + done);
  }
  refresh();
}

/// Requeues every dead letter, `bulk_max` a request, while that makes progress.
async function requeueAll() {
  if (!window.confirm("Requeue every dead letter of " + at.wheel + "?")) return;
  let count = 0;
  for (let round = 0; round < 10000; round++) {
    const result = await post(api("dead/requeue-all"), {});
    if (!result.ok) {
      flash("Could not do it: " + (result.body.error || "unknown error"), true);
      break;
    }
    count += result.body.requeued.length;
    flash(number(count) + " requeued" + (result.body.left ? ", " + number(result.body.left) + " left" : ""));
    if (result.body.left === 0 || result.body.requeued.length === 0) break;
  }
  selected.clear();
  refresh();
}

function page(to) {
  at.page = to;
  refresh();
}

// ---- the detail of one task ----

async function detail(key) {
  const box = $("detail");
  box.hidden = false;
  box.dataset.key = key;
  $("detail-title").textContent = key;
  $("detail-line").textContent = "reading…";
  $("payload").textContent = "";
  try {
    const p = await getJson(api("payload?key=" + encodeURIComponent(key)));
    if (box.dataset.key !== key) return;
    if (!p.found) {
      $("detail-line").textContent = "Not pending and not a dead letter: finished, cancelled or never scheduled.";
      $("payload").dataset.format = "none";
      return;
    }
    const encoding = p.payload_bytes === 0 ? "empty" : p.payload_encoding;
    const format = { json: "JSON", text: "text", hex: "bytes, in hex", empty: "empty" }[encoding];
    $("detail-line").textContent = p.state + (p.recurrence ? " · a run of the series " + series(p.recurrence) : "") +
      " · payload of " + number(p.payload_bytes) + " bytes, shown as " + format +
      (p.truncated ? " (its first " + number(p.shown.length) + " characters)" : "");
    $("payload").textContent = encoding === "empty" ? "(no payload)" : p.shown;
    $("payload").dataset.format = encoding;
    box.scrollIntoView({ block: "nearest" });
  } catch (e) {
    $("detail-line").textContent = "Could not read it: " + e.message;
  }
}

async function search(event) {
  event.preventDefault();
  const key = $("search-key").value;
  const out = $("search-result");
  if (!key) return;
  out.replaceChildren(el("span", { class: "note" }, "looking…"));
  try {
    const found = await getJson(api("task?key=" + encodeURIComponent(key)));
    const line = el("p", { "data-found": String(found.pending) });
    line.appendChild(el("span", { class: "key" }, found.key));
    const d = found.detail;
    if (d) {
      line.setAttribute("data-state", d.state);
      let text = " is " + d.state + ", due " + new Date(d.due_unix_ms).toISOString()
        + (d.overdue_ms != null ? " (overdue by " + span(d.overdue_ms) + ")" : "") + ", "
        + d.attempt + " deliveries so far, " + d.payload_bytes + " bytes of payload";
      if (d.last_error) text += "; last error: " + d.last_error;
      if (d.recurrence) text += "; a run of the series " + series(d.recurrence);
      line.appendChild(document.createTextNode(text + ". "));
      const open = el("button", { type: "button", class: "link" }, "Show the payload");
      open.addEventListener("click", () => detail(found.key));
      line.appendChild(open);
    } else {
      line.appendChild(document.createTextNode(" is not pending: never scheduled, finished or cancelled."));
    }
    out.replaceChildren(line);
  } catch (e) {
    out.replaceChildren(el("p", { class: "bad" }, "Could not look: " + e.message));
  }
}

// ---- moving about ----

/// The place in the address (#wheel=..&view=..&state=..), so that a reload or a link keeps it.
function remember() {
  const place = new URLSearchParams({ wheel: at.wheel, view: at.view, state: at.state });
  // The path as loaded, not "#..." alone: a relative URL resolves against the page's <base>,
  // which ends in "/", and would move /admin/timers to /admin/timers/.
  history.replaceState(null, "", location.pathname + location.search + "#" + place.toString());
}

function choose(wheel) {
  if (wheel === at.wheel) return;
  at.wheel = wheel;
  resetPages();
  $("detail").hidden = true;
  $("search-result").replaceChildren();
  show();
}

function resetPages() {
  at.pages = [null];
  at.page = 0;
  at.next = null;
  selected.clear();
}

function show() {
  $("wheel").textContent = at.wheel;
  $("wheel-select").value = at.wheel;
  document.title = at.wheel + " · tokio-timewheel";
  document.body.dataset.view = at.view;
  for (const node of document.querySelectorAll(".view-overview")) node.hidden = at.view !== "overview";
  for (const node of document.querySelectorAll(".view-tasks")) node.hidden = at.view !== "tasks";
  for (const b of document.querySelectorAll("button.view")) b.setAttribute("aria-pressed", String(b.dataset.view === at.view));
  for (const b of document.querySelectorAll("button.state")) b.setAttribute("aria-pressed", String(b.dataset.state === at.state));
  $("tasks").dataset.loaded = "";
  remember();
  refresh();
}

let timer = null;
let reading = 0;

async function refresh() {
  clearTimeout(timer);
  const read = ++reading;
  try {
    const calls = [getJson("api/overview"), getJson(api("stats")), getJson(api("limits"))];
    if (at.view === "overview") {
      calls.push(getJson(api("lateness")), getJson(api("dead?limit=" + info.dead_letters_shown)), getJson(api("due")),
        getJson(api("nodes")), getJson(api("figures")));
    } else {
      const after = at.pages[at.page];
      calls.push(getJson(api("tasks?state=" + at.state + "&limit=" + info.page_size + (after ? "&after=" + after : ""))));
    }
    const answers = await Promise.all(calls);
    // A later read (after a click) has drawn, or will draw, something newer.
    if (read !== reading) return;
    const [overview, stats, limits] = answers;
    showWheels(overview);
    showStats(stats);
    showLimits(limits);
    if (at.view === "overview") {
      const [, , , late, dead, due, nodes, figures] = answers;
      showLateness(late, figures);
      showDead(dead, stats.dead);
      showDue(due);
      showNodes(nodes);
      showFigures(figures);
    } else {
      showTasks(answers[3]);
    }
    refreshes += 1;
    document.body.dataset.refreshes = String(refreshes);
    const status = $("status");
    // A message of an action stays a few seconds.
    if (!status.dataset.flash || Date.now() - Number(status.dataset.flash) > 4000) {
      status.textContent = "live · updated " + clock(Date.now());
      status.classList.remove("bad");
      delete status.dataset.flash;
    }
  } catch (e) {
    if (read !== reading) return;
    const status = $("status");
    status.textContent = "cannot read the wheel: " + e.message + " (trying again)";
    status.classList.add("bad");
  }
  timer = setTimeout(refresh, info.refresh_ms);
}

async function start() {
  $("search").addEventListener("submit", search);
  try {
    info = await getJson("api/info");
  } catch (e) {
    $("status").textContent = "cannot reach the dashboard: " + e.message;
    return;
  }
  const select = $("wheel-select");
  for (const name of info.wheels) select.appendChild(el("option", { value: name }, name));
  select.addEventListener("change", () => choose(select.value));
  const place = new URLSearchParams(location.hash.slice(1));
  at.wheel = info.wheels.includes(place.get("wheel")) ? place.get("wheel") : info.wheels[0] || "";
  at.view = place.get("view") === "tasks" ? "tasks" : "overview";
  at.state = ["waiting", "ready", "running", "dead", "finished"].includes(place.get("state")) ? place.get("state") : "waiting";
  for (const b of document.querySelectorAll("button.view")) {
    b.addEventListener("click", () => { at.view = b.dataset.view; show(); });
  }
  for (const b of document.querySelectorAll("button.state")) {
    b.addEventListener("click", () => { at.state = b.dataset.state; resetPages(); show(); });
  }
  $("page-next").addEventListener("click", () => {
    if (!at.next) return;
    at.pages[at.page + 1] = at.next;
    at.pages.length = at.page + 2;
    page(at.page + 1);
  });
  $("page-prev").addEventListener("click", () => page(Math.max(0, at.page - 1)));
  $("page-first").addEventListener("click", () => page(0));
  $("pick-page").addEventListener("change", () => {
    for (const check of document.querySelectorAll("#tasks input[data-pick]")) {
      check.checked = $("pick-page").checked;
      if (check.checked) selected.add(check.dataset.pick); else selected.delete(check.dataset.pick);
    }
    showSelected();
  });
  $("requeue-selected").addEventListener("click", () => actOnSelected("dead/requeue", "requeued"));
  $("delete-selected").addEventListener("click", () => actOnSelected("dead/delete", "deleted"));
  $("requeue-all").addEventListener("click", requeueAll);
  $("pause").addEventListener("click", () => act("pause", {}, at.wheel + " paused"));
  $("resume").addEventListener("click", () => act("resume", {}, at.wheel + " resumed"));
  $("detail-close").addEventListener("click", () => { $("detail").hidden = true; });
  $("footer").textContent = (info.actions ? "Actions on" : "Read-only") + " · refreshes every " +
    (info.refresh_ms / 1000) + " s · everything on this page comes from this server.";
  show();
}

document.addEventListener("DOMContentLoaded", start);
