// The dashboard's page: reads the wheel's JSON every refresh and draws it. Text from the wheel
// (keys, error texts) only ever goes in as text (textContent), never as markup.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
let info = { wheel: "", actions: false, delete: false, refresh_ms: 1500, dead_letters_shown: 50 };
let refreshes = 0;

function $(id) {
  return document.getElementById(id);
}

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svgEl(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

async function getJson(path) {
  const response = await fetch(path, { headers: { Accept: "application/json" }, cache: "no-store" });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function act(path, key) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Timewheel-Action": "1" },
    body: JSON.stringify({ key: key }),
  });
  const body = await response.json().catch(() => ({ error: response.statusText }));
  return { ok: response.ok, body: body };
}

function number(n) {
  return Number(n).toLocaleString("en-US");
}

function ms(value) {
  if (value < 1) return value.toFixed(2) + " ms";
  if (value < 1000) return (value < 10 ? value.toFixed(1) : Math.round(value)) + " ms";
  return (value / 1000).toFixed(value < 10000 ? 2 : 1) + " s";
}

/// A bound in microseconds, to three figures.
function bound(us) {
  if (us < 1000) return us + " µs";
  if (us < 1e6) return Number((us / 1000).toPrecision(3)) + " ms";
  return Number((us / 1e6).toPrecision(3)) + " s";
}

function time(unixMs) {
  return new Date(unixMs).toLocaleString("en-GB", { hour12: false });
}

/// Draws bars into an SVG plot of 600 x 200: one value per bar, a label under some of them.
function drawBars(svg, values, labels, labelEvery, title) {
  svg.replaceChildren();
  const width = 600, height = 200, left = 44, bottom = 26, top = 10, right = 8;
  const plotW = width - left - right, plotH = height - top - bottom;
  const max = Math.max(1, ...values);
  // Four grid lines at round values.
  const step = niceStep(max / 4);
  for (let v = 0; v <= max + 1e-9; v += step) {
    const y = top + plotH - (v / max) * plotH;
    svg.appendChild(svgEl("line", { x1: left, x2: width - right, y1: y, y2: y, class: "grid" }));
    svg.appendChild(svgEl("text", { x: left - 6, y: y + 4, class: "axis", "text-anchor": "end" }, number(v)));
  }
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

function niceStep(raw) {
  if (raw <= 1) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
  return 10 * p;
}

function showStats(stats) {
  for (const node of document.querySelectorAll("[data-stat]")) {
    const value = stats[node.dataset.stat];
    if (value !== undefined) node.textContent = number(value);
  }
  $("paused-note").hidden = !stats.paused;
}

function showLateness(late) {
  const labels = late.bars.map((b) => "< " + bound(b.below_us));
  drawBars($("late-plot"), late.bars.map((b) => b.count), labels, 2, "deliveries");
  $("late-note").textContent = late.count === 0
    ? "No delivery claimed by this process's workers in the last " + late.window_s + " to " + 2 * late.window_s + " s."
    : number(late.count) + " deliveries claimed by this process's workers in the last " + late.window_s + " to " +
      2 * late.window_s + " s: p50 " + ms(late.p50_ms) + ", p99 " + ms(late.p99_ms) + ", max " + ms(late.max_ms) +
      " after their due time (Redis's clock).";
}

function showDue(due) {
  const svg = $("due-plot");
  const labels = due.counts.map((_, i) => "+" + Math.round((i * due.bucket_s) / 60) + " min");
  drawBars(svg, due.counts, labels, 10, "tasks due");
  const total = due.counts.reduce((a, b) => a + b, 0);
  $("due-note").textContent = number(total) + " tasks fall due in the next hour, a bar a minute from " + time(due.from_ms) + ".";
}

function showNodes(nodes) {
  const box = $("nodes");
  box.replaceChildren();
  const list = el("ul", { class: "nodes" });
  for (const leader of nodes.leaders || []) {
    list.appendChild(el("li", {}, "partition " + leader.partition + ": led by " + leader.node));
  }
  for (const worker of nodes.workers || []) {
    list.appendChild(el("li", {}, "worker " + worker.node));
  }
  box.appendChild(list);
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
    row.appendChild(el("td", { class: "key" }, letter.key));
    row.appendChild(el("td", { class: "num" }, number(letter.attempts)));
    row.appendChild(el("td", { class: "error" }, letter.last_error));
    row.appendChild(el("td", { class: "when" }, time(letter.died_ms)));
    const buttons = el("td", { class: "actions" });
    if (info.actions) {
      const requeue = el("button", { type: "button", "data-requeue": letter.key }, "Requeue");
      requeue.addEventListener("click", () => action("api/dead/requeue", letter.key, "requeued"));
      buttons.appendChild(requeue);
    }
    if (info.delete) {
      const remove = el("button", { type: "button", class: "danger", "data-delete": letter.key }, "Delete");
      remove.addEventListener("click", () => {
        if (window.confirm("Delete the dead letter " + letter.key + "?")) action("api/dead/delete", letter.key, "deleted");
      });
      buttons.appendChild(remove);
    }
    row.appendChild(buttons);
    body.appendChild(row);
  }
  $("dead-note").textContent = total > dead.letters.length
    ? "The oldest " + number(dead.letters.length) + " of " + number(total) + "."
    : info.actions ? "" : "Read-only: the mounting code can enable requeueing (Dashboard::actions).";
}

async function action(path, key, done) {
  const result = await act(path, key);
  flash(result.ok ? key + " " + done : "Could not do it: " + (result.body.error || "unknown error"), !result.ok);
  refresh();
}

function flash(text, bad) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("bad", !!bad);
  status.dataset.flash = String(Date.now());
}

async function search(event) {
  event.preventDefault();
  const key = $("search-key").value;
  const out = $("search-result");
  if (!key) return;
  out.replaceChildren(el("span", { class: "note" }, "looking…"));
  try {
    const found = await getJson("api/task?key=" + encodeURIComponent(key));
    const line = el("p", { "data-found": String(found.pending) });
    line.appendChild(el("span", { class: "key" }, found.key));
    const d = found.detail;
    if (d) {
      line.setAttribute("data-state", d.state);
      let text = " is " + d.state + ", due " + new Date(d.due_ms).toISOString()
        + (d.overdue_ms != null ? " (overdue by " + number(d.overdue_ms) + " ms)" : "") + ", "
        + d.attempt + " deliveries so far, " + d.payload_bytes + " bytes of payload";
      if (d.last_error) text += "; last error: " + d.last_error;
      line.appendChild(document.createTextNode(text + "."));
    } else {
      line.appendChild(document.createTextNode(" is not pending: never scheduled, finished or cancelled."));
    }
    out.replaceChildren(line);
  } catch (e) {
    out.replaceChildren(el("p", { class: "bad" }, "Could not look: " + e.message));
  }
}

let timer = null;

async function refresh() {
  clearTimeout(timer);
  try {
    const [stats, late, dead, due, nodes] = await Promise.all([
      getJson("api/stats"),
      getJson("api/lateness"),
      getJson("api/dead?limit=" + info.dead_letters_shown),
      getJson("api/due"),
      getJson("api/nodes"),
    ]);
    showStats(stats);
    showLateness(late);
    showDead(dead, stats.dead);
    showDue(due);
    showNodes(nodes);
    refreshes += 1;
    document.body.dataset.refreshes = String(refreshes);
    const status = $("status");
    // A message of an action stays a few seconds.
    if (!status.dataset.flash || Date.now() - Number(status.dataset.flash) > 4000) {
      status.textContent = "live · updated " + new Date().toLocaleTimeString("en-GB", { hour12: false });
      status.classList.remove("bad");
      delete status.dataset.flash;
    }
  } catch (e) {
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
  }
  $("wheel").textContent = info.wheel;
  document.title = info.wheel + " · tokio-timewheel";
  $("footer").textContent = (info.actions ? "Actions on" : "Read-only") + " · refreshes every " +
    (info.refresh_ms / 1000) + " s · everything on this page comes from this server.";
  refresh();
}

document.addEventListener("DOMContentLoaded", start);
