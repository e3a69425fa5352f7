// Floodgate's dashboard: reads this server's admin API and playground, draws on canvas. No
// dependencies, nothing fetched from elsewhere.
"use strict";

const $ = (s, root = document) => root.querySelector(s);
const el = (tag, props = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
};
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
const fmt = (n) => n >= 10000 ? (n / 1000).toFixed(n >= 100000 ? 0 : 1) + "k" : String(Math.round(n));
const OUTCOMES = ["allowed", "denied", "shadow_denied", "tagged", "error_allowed", "error_denied", "local_allowed", "local_denied"];
const OUTCOME_COLORS = { allowed: "#4cc38a", denied: "#ef5b5b", shadow_denied: "#b07fe0", tagged: "#e6b450", error_allowed: "#7fa7c9", error_denied: "#c2410c", local_allowed: "#2dd4bf", local_denied: "#f472b6" };

async function api(method, path, body) {
  const init = { method, headers: {} };
  if (body !== undefined) { init.body = typeof body === "string" ? body : JSON.stringify(body); init.headers["content-type"] = "application/json"; }
  const response = await fetch(path, init);
  const text = await response.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
  return { status: response.status, ok: response.ok, json, text };
}

// === canvas ===

function canvas2d(canvas) {
  const ratio = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) { canvas.width = Math.round(w * ratio); canvas.height = Math.round(h * ratio); }
  const g = canvas.getContext("2d");
  g.setTransform(ratio, 0, 0, ratio, 0, 0);
  g.clearRect(0, 0, w, h);
  return { g, w, h };
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// A time series chart: series = [{values, color, fill}], over `span` points, newest right.
function drawSeries(canvas, series, span, opts = {}) {
  const { g, w, h } = canvas2d(canvas);
  const pad = opts.axes ? { l: 44, r: 8, t: 8, b: 18 } : { l: 1, r: 1, t: 2, b: 2 };
  const max = niceMax(Math.max(1, ...series.flatMap((s) => s.values)));
  const x = (i) => pad.l + (w - pad.l - pad.r) * (i / Math.max(1, span - 1));
  const y = (v) => h - pad.b - (h - pad.t - pad.b) * (v / max);
  if (opts.axes) {
    g.strokeStyle = css("--line"); g.fillStyle = css("--muted"); g.font = "11px system-ui"; g.lineWidth = 1;
    for (let k = 0; k <= 4; k++) {
      const v = (max * k) / 4, yy = Math.round(y(v)) + 0.5;
      g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(w - pad.r, yy); g.stroke();
      g.fillText(fmt(v), 4, yy + 4);
    }
    for (const [label, i] of [["-5m", 0], ["-4m", 60], ["-3m", 120], ["-2m", 180], ["-1m", 240], ["now", span - 1]]) g.fillText(label, Math.min(x(i), w - 26), h - 4);
  }
  for (const s of series) {
    const offset = span - s.values.length;
    if (!s.values.length) continue;
    g.beginPath();
    s.values.forEach((v, i) => (i ? g.lineTo(x(i + offset), y(v)) : g.moveTo(x(i + offset), y(v))));
    if (s.fill) {
      g.lineTo(x(s.values.length - 1 + offset), y(0)); g.lineTo(x(offset), y(0)); g.closePath();
      g.globalAlpha = 0.35; g.fillStyle = s.color; g.fill(); g.globalAlpha = 1;
      g.beginPath(); s.values.forEach((v, i) => (i ? g.lineTo(x(i + offset), y(v)) : g.moveTo(x(i + offset), y(v))));
    }
    g.strokeStyle = s.color; g.lineWidth = opts.axes ? 2 : 1.5; g.stroke();
  }
}

// === live data ===

const HISTORY = 300;
const live = { seconds: [], stats: null, rulesKnown: "" };

function onSecond(second) {
  live.seconds.push(second);
  if (live.seconds.length > HISTORY) live.seconds.splice(0, live.seconds.length - HISTORY);
}

function renderTraffic() {
  const decisions = live.seconds.map((s) => s.rules.reduce((a, r) => a + r.decisions, 0));
  const denials = live.seconds.map((s) => s.rules.reduce((a, r) => a + r.denials, 0));
  const chart = $("#traffic-chart");
  drawSeries(chart, [{ values: decisions, color: css("--decisions") }, { values: denials, color: css("--denials"), fill: true }], HISTORY, { axes: true });
  const d = decisions.at(-1) || 0, n = denials.at(-1) || 0;
  chart.dataset.decisionsPerS = d; chart.dataset.denialsPerS = n;
  $("#total-decisions").textContent = fmt(d); $("#total-denials").textContent = fmt(n);
  const badge = $("#denying-badge");
  const worst = live.stats && live.stats.rules.filter((r) => r.denials_per_s > 0).sort((a, b) => b.denials_per_s - a.denials_per_s)[0];
  badge.textContent = n > 0 ? `denying ${fmt(n)}/s${worst ? " · most: " + worst.rule : ""}` : "denying 0/s";
  badge.className = "badge " + (n > 0 ? "warn" : "off");
}

function renderRules() {
  const stats = live.stats; if (!stats) return;
  const body = $("#rules tbody");
  const names = stats.rules.map((r) => r.rule).join("\n");
  if (names !== live.rulesKnown) {
    body.replaceChildren(...stats.rules.map((r) => el("tr", { "data-rule": r.rule },
      el("td", {}, el("code", { textContent: r.rule })), el("td", { class: "num decisions" }), el("td", { class: "num denials" }),
      el("td", {}, el("canvas", { class: "spark" })), el("td", { class: "num ratio" }), el("td", {}, el("div", { class: "mix" })))));
    live.rulesKnown = names;
    const keyRule = $("#key-rule"), chosen = keyRule.value;
    keyRule.replaceChildren(...stats.rules.filter((r) => !r.rule.includes("/")).map((r) => el("option", { value: r.rule, textContent: r.rule })));
    if (chosen) keyRule.value = chosen;
  }
  for (const r of stats.rules) {
    const row = body.querySelector(`tr[data-rule="${CSS.escape(r.rule)}"]`); if (!row) continue;
    $(".decisions", row).textContent = fmt(r.decisions_per_s);
    const den = $(".denials", row); den.textContent = fmt(r.denials_per_s); den.classList.toggle("hot", r.denials_per_s > 0);
    $(".ratio", row).textContent = (100 * r.denial_ratio_last_minute).toFixed(r.denial_ratio_last_minute > 0 && r.denial_ratio_last_minute < 0.1 ? 1 : 0) + " %";
    const per = (f) => live.seconds.map((s) => { const x = s.rules.find((q) => q.rule === r.rule); return x ? x[f] : 0; });
    drawSeries($("canvas", row), [{ values: per("decisions"), color: css("--decisions") }, { values: per("denials"), color: css("--denials"), fill: true }], HISTORY);
    const total = OUTCOMES.reduce((a, o) => a + r.outcomes_last_minute[o], 0);
    $(".mix", row).replaceChildren(...OUTCOMES.filter((o) => r.outcomes_last_minute[o] > 0).map((o) =>
      el("span", { title: `${o}: ${r.outcomes_last_minute[o]}`, style: `width:${(100 * r.outcomes_last_minute[o]) / total}%;background:${OUTCOME_COLORS[o]}` })));
  }
  if (!$("#outcome-legend").childElementCount) $("#outcome-legend").append(...OUTCOMES.map((o) => el("span", {}, el("span", { class: "key", style: `background:${OUTCOME_COLORS[o]}` }), o)));
}

function renderOffenders() {
  const stats = live.stats; if (!stats) return;
  const rules = stats.rules.filter((r) => r.top_offenders.length);
  const box = $("#offenders");
  if (!rules.length) { box.replaceChildren(el("p", { class: "muted", textContent: "No denials in the last minute." })); return; }
  box.replaceChildren(...rules.map((r) => {
    const top = r.top_offenders[0].denied;
    return el("div", { class: "offender-rule" }, el("h3", {}, el("code", { textContent: r.rule })),
      ...r.top_offenders.map((o) => el("div", { class: "offender", "data-key": o.key },
        el("code", { textContent: o.key, title: o.key }),
        el("span", { class: "num", textContent: `${fmt(o.denied)} denied${o.error ? ` (±${fmt(o.error)})` : ""}` }),
        el("div", { class: "bar", style: `width:${Math.max(2, (100 * o.denied) / top)}%` }))));
  }));
}

function renderStore() {
  const stats = live.stats; if (!stats) return;
  const s = stats.store, l = s.latency_us;
  const us = (v) => (v >= 1000 ? (v / 1000).toFixed(1) + " ms" : Math.round(v) + " µs");
  const facts = [
    ["kind", s.kind],
    ["latency p50 / p90 / p99", l ? `${us(l.p50)} / ${us(l.p90)} / ${us(l.p99)}` : "no decisions (10 s)"],
    ["errors", `${s.errors_per_s}/s · ${s.errors_last_minute} in the last minute`],
    ["breaker", s.breaker ?? "— (memory store)"],
    ["fallback", s.fallback ? (s.fallback.degraded ? `DEGRADED: local shares (${s.fallback.instances} instances, ${s.fallback.owed_keys} keys owed)` : `standing by (${s.fallback.instances} instances)`) : "— (memory store)"],
  ];
  const dl = $("#store");
  dl.replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { textContent: k }), el("dd", { textContent: v })]));
  if (s.keys != null) {
    const ratio = s.max_keys ? s.keys / s.max_keys : 0;
    dl.append(el("dt", { textContent: "keys" }), el("dd", {}, `${s.keys.toLocaleString()} of ${s.max_keys.toLocaleString()}`, el("div", { class: "fill" }, el("span", { style: `width:${Math.min(100, 100 * ratio)}%` }))));
  }
  const bad = s.errors_per_s > 0 || s.breaker === "open" || (s.fallback && s.fallback.degraded);
  const badge = $("#store-badge");
  badge.textContent = `store ${s.kind}: ${bad ? "failing" : "healthy"}`;
  badge.className = "badge " + (bad ? "bad" : "ok");
}

async function loadRlqs() {
  const r = await api("GET", "/admin/rlqs"); if (!r.ok) return;
  const groups = r.json.groups, body = $("#rlqs tbody");
  if (!groups.length) { body.replaceChildren(el("tr", {}, el("td", { colSpan: 5, class: "muted", textContent: "No RLQS streams." }))); return; }
  body.replaceChildren(...groups.map((g) => {
    const name = `${g.domain}/${g.rule}` + (g.key.length ? ` [${g.key.join(", ")}]` : "");
    const demand = g.members.reduce((a, m) => a + m.demand, 0) + g.remote_demand;
    const limit = g.limit == null ? "no limit" : `${fmt(g.fleet_assigned)} / ${fmt(g.limit)}`;
    const ratio = g.limit ? g.fleet_assigned / g.limit : 0;
    return el("tr", { "data-group": name },
      el("td", {}, el("code", { textContent: name })),
      el("td", { class: "num", textContent: `${g.members.length}${g.remote_streams ? ` + ${g.remote_streams} elsewhere` : ""}` }),
      el("td", { class: "num", textContent: fmt(demand) }),
      el("td", { class: "num" }, limit, el("div", { class: "fill" }, el("span", { style: `width:${Math.min(100, 100 * ratio)}%` }))),
      el("td", {}, ...g.members.map((m) => el("div", { class: "muted", textContent: `#${m.stream} ${m.bucket}: ${fmt(m.demand)} → ${m.assigned == null ? "—" : fmt(m.assigned)}` }))));
  }));
}

let shownVersion = null;
function renderConfig() {
  const stats = live.stats; if (!stats) return;
  const v = stats.config.version;
  $("#config-version").textContent = "v" + v; $("#config-version").dataset.version = v;
  $("#config-hash").textContent = stats.config.hash;
  $("#config-badge").textContent = "config v" + v;
  if (v !== shownVersion) { shownVersion = v; loadAudit(); }
}

async function loadAudit() {
  const reply = await api("GET", "/admin/audit");
  if (!reply.ok) return;
  const current = live.stats ? live.stats.config.version : null;
  $("#audit").replaceChildren(...reply.json.records.slice().reverse().map((r) => {
    const diff = el("div", { class: "diff" },
      ...r.added.map((x) => el("span", { class: "add", textContent: "+ " + x })),
      ...r.removed.map((x) => el("span", { class: "del", textContent: "− " + x })),
      ...r.changed.map((x) => el("span", { class: "chg", textContent: "~ " + x })));
    if (r.key) {
      const key = Object.entries(r.key.descriptors).map(([n, v]) => `${n}=${JSON.stringify(v)}`).join(" ");
      diff.append(el("span", { class: "chg", textContent: `reset ${r.key.domain ? r.key.domain + "/" : ""}${r.key.rule} ${key}${r.key.reset === false ? " (it had no state)" : ""}` }));
    }
    if (!r.added.length && !r.removed.length && !r.changed.length && !r.key && r.result === "applied") diff.append(el("span", { class: "muted", textContent: "no rule changed" }));
    const head = el("div", {}, el("b", { textContent: r.version != null ? "v" + r.version : "rejected" }), " ",
      el("span", { class: "muted", textContent: `${r.time.replace("T", " ").replace(/\.\d+Z$/, "Z")} · ${r.source}${r.restored != null ? " (restored v" + r.restored + ")" : ""}${r.by ? " · by " + r.by : ""}` }));
    if (r.version != null && r.version !== current && r.result === "applied" && r.source !== "key_reset") {
      head.append(el("button", { type: "button", textContent: "roll back to v" + r.version, onclick: () => rollback(r.version) }));
    }
    return el("li", { class: r.result }, head, diff, r.error ? el("div", { class: "result error", textContent: r.error.message }) : null);
  }));
}

async function rollback(version) {
  const out = $("#rollback-result");
  if (!confirm(version != null ? `Put version ${version}'s configuration back in force?` : "Put the previous version back in force?")) return;
  const reply = await api("POST", "/admin/rollback", version != null ? { version } : undefined);
  if (reply.ok) {
    out.className = "result"; out.textContent = `Rolled back: version ${reply.json.version} is in force.`;
    const fresh = await api("GET", "/admin/stats"); if (fresh.ok) { live.stats = fresh.json; renderAll(); }
  } else {
    out.className = "result error"; out.textContent = (reply.json && (reply.json.error?.message || reply.json.detail)) || reply.text;
  }
}

function renderAll() { renderTraffic(); renderRules(); renderOffenders(); renderStore(); renderConfig(); }

// The stream is read with fetch (not EventSource), so that it goes through whatever sets the admin
// token's header for the page.
async function stream() {
  const state = $("#live-state");
  for (;;) {
    try {
      const response = await fetch("/admin/stats/stream");
      if (!response.ok) throw new Error("HTTP " + response.status);
      state.textContent = "live"; state.className = "badge ok";
      const reader = response.body.getReader(), decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end); buffer = buffer.slice(end + 2);
          let event = "message", data = "";
          for (const line of block.split("\n")) { if (line.startsWith("event: ")) event = line.slice(7); else if (line.startsWith("data: ")) data += line.slice(6); }
          const payload = JSON.parse(data);
          if (event === "history") { live.seconds = payload.seconds.slice(-HISTORY); }
          else if (event === "second") { onSecond(payload); $("#clock").textContent = new Date(payload.t * 1000).toLocaleTimeString(); }
          else if (event === "stats") { live.stats = payload; renderAll(); }
        }
      }
    } catch (e) { /* retried below */ }
    state.textContent = "reconnecting…"; state.className = "badge bad";
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// === key inspector ===

function keyQuery() {
  const params = new URLSearchParams({ rule: $("#key-rule").value });
  for (const part of $("#key-descriptors").value.split(",")) {
    const at = part.indexOf("="); if (at < 0) continue;
    params.append(part.slice(0, at).trim(), part.slice(at + 1).trim());
  }
  return "/admin/keys?" + params;
}

// How a dimension's amounts read: micro-dollars as dollars and cents (spend), others as counted.
function units(dimension) {
  if (dimension !== "usd_micros") return (n) => String(n);
  return (n) => "$" + (n / 1e6).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 6 });
}

// An instant (ms since the epoch) as its UTC date and time to the minute, "2026-01-31 23:00".
function day(ms) {
  return new Date(ms).toISOString().slice(0, 16).replace("T", " ");
}

// A wait in ms as it reads best: "750 ms", "42 s", "3 h 20 min", "25 d 4 h" (two units at most).
function span(ms) {
  if (ms < 1000) return ms + " ms";
  let left = Math.ceil(ms / 1000);
  const out = [];
  for (const [n, unit] of [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]]) {
    if (left >= n && out.length < 2) { out.push(Math.floor(left / n) + " " + unit); left %= n; } else if (out.length) break;
  }
  return out.join(" ");
}

async function inspect(event) {
  event.preventDefault();
  const out = $("#key-result"), reply = await api("GET", keyQuery());
  if (!reply.ok) { out.className = "result error"; out.textContent = reply.json?.detail || reply.text; return; }
  const k = reply.json, amount = units(k.dimension);
  const rows = [["counts", k.dimension], ["limit", amount(k.limit)], ["used", amount(k.used)], ["remaining", amount(k.remaining)], ["reset after", span(k.reset_after_ms)], ["a request of 1 now", k.allowed ? "passes" : `refused, retry after ${k.retry_after_ms} ms`], ["outcome", k.outcome]];
  // A quota keeps the period before the current one: what the key counted then (UTC dates).
  if (k.previous) rows.push(["previous period", `${amount(k.previous.used)} (${day(k.previous.period_start)} to ${day(k.previous.period_end)})`]);
  out.className = "result";
  out.replaceChildren(el("table", {}, ...rows
    .map(([a, b]) => el("tr", {}, el("td", { class: "muted", textContent: a }), el("td", { textContent: String(b) })))));
}

async function resetKey() {
  const out = $("#key-result"), reply = await api("DELETE", keyQuery());
  out.className = reply.ok ? "result" : "result error";
  out.textContent = reply.ok ? (reply.json.reset ? "Reset: the key starts afresh." : "The key had no state.") : reply.json?.detail || reply.text;
}

// === playground ===

const play = { requests: [], start: null, timer: null, fixed: null };
const sides = () => [$("#side-a"), $("#side-b")];

function nowMs() { if (play.start === null) play.start = performance.now(); return Math.round(performance.now() - play.start); }

function send(n) {
  if (play.fixed) playReset();
  const at = nowMs();
  for (let i = 0; i < n; i++) play.requests.push({ at_ms: at, cost: 1 });
  simulateAll();
  if (!play.timer) play.timer = setInterval(() => simulateAll(), 250);
}

function playReset() {
  play.requests = []; play.start = null; play.fixed = null;
  clearInterval(play.timer); play.timer = null;
  for (const side of sides()) { $(".passed", side).textContent = "0"; $(".refused", side).textContent = "0"; $(".refusals", side).replaceChildren(); $(".note", side).textContent = ""; canvas2d($(".timeline", side)); side.dataset.refused = "0"; side.dataset.passed = "0"; }
}

async function simulateAll() {
  const until = play.fixed ? play.fixed.until : Math.max(nowMs(), 1000);
  await Promise.all(sides().map((side) => simulate(side, until)));
}

async function simulate(side, until) {
  let params;
  try { params = JSON.parse($(".params", side).value); } catch (e) { $(".note", side).textContent = "parameters: not JSON: " + e.message; return; }
  const span = Math.max(until, 10000);
  const sample = Math.max(10, Math.ceil(span / 400));
  const reply = await api("POST", "/v1/simulate", { ...params, requests: play.requests, sample_ms: sample, until_ms: span });
  if (!reply.ok) { $(".note", side).textContent = reply.json?.detail || reply.text; return; }
  const sim = reply.json;
  const passed = sim.decisions.filter((d) => d.allowed).length, refused = sim.decisions.length - passed;
  $(".passed", side).textContent = passed; $(".refused", side).textContent = refused;
  side.dataset.passed = passed; side.dataset.refused = refused;
  $(".note", side).textContent = `limit ${sim.limit} · most passed in any window: ${mostInWindow(sim, params)}`;
  $(".refusals", side).replaceChildren(...sim.decisions.map((d, i) => [d, i]).filter(([d]) => !d.allowed).slice(-50).map(([d, i]) =>
    el("li", {}, `#${i + 1} at ${(d.at_ms / 1000).toFixed(3)} s: refused, Retry-After `, el("b", { textContent: `${d.retry_after_ms} ms` }), ` (header: ${Math.max(1, Math.ceil(d.retry_after_ms / 1000))} s)`)));
  drawTimeline($(".timeline", side), sim, span, until);
}

// The most requests passed within any span of the limit's window (for windowed limits): how far
// above its limit an algorithm lets a burst go.
function mostInWindow(sim, params) {
  const windowMs = durationMs(params.window) || 1000 * (parseRate(params.rate)?.periodS || 1);
  const passed = sim.decisions.filter((d) => d.allowed).map((d) => d.at_ms);
  let best = 0;
  for (let i = 0, j = 0; i < passed.length; i++) { while (passed[i] - passed[j] >= windowMs) j++; best = Math.max(best, i - j + 1); }
  return `${best} (window ${windowMs / 1000} s)`;
}

function durationMs(text) {
  if (typeof text !== "string") return null;
  const m = text.match(/^(\d+(?:\.\d+)?)\s*(ms|s|m|h)$/); if (!m) return null;
  return Number(m[1]) * { ms: 1, s: 1000, m: 60000, h: 3600000 }[m[2]];
}

function parseRate(text) {
  const m = typeof text === "string" && text.match(/^(\d+)\/(ms|s|m|h)$/);
  return m ? { count: Number(m[1]), periodS: { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]] } : null;
}

function drawTimeline(canvas, sim, span, now) {
  const { g, w, h } = canvas2d(canvas);
  const pad = { l: 30, r: 8, t: 10, b: 36 };
  const x = (ms) => pad.l + (w - pad.l - pad.r) * (ms / span);
  const levelTop = pad.t, levelBottom = h - pad.b;
  const y = (v) => levelBottom - (levelBottom - levelTop) * (v / sim.limit);
  g.font = "11px system-ui"; g.lineWidth = 1;
  g.strokeStyle = css("--line"); g.fillStyle = css("--muted");
  for (let s = 0; s <= span / 1000; s += span > 30000 ? 5 : 1) { const xx = Math.round(x(s * 1000)) + 0.5; g.beginPath(); g.moveTo(xx, levelTop); g.lineTo(xx, levelBottom); g.stroke(); if (span <= 30000 || s % 10 === 0) g.fillText(s + "s", xx - 6, h - 2); }
  for (const v of [0, sim.limit]) { g.fillText(String(v), 4, y(v) + 4); }
  // The level over time, up to now.
  if (sim.levels) {
    g.beginPath();
    sim.levels.filter((l) => l.at_ms <= now).forEach((l, i) => (i ? g.lineTo(x(l.at_ms), y(l.remaining)) : g.moveTo(x(l.at_ms), y(l.remaining))));
    g.strokeStyle = css("--accent"); g.lineWidth = 2; g.stroke();
  }
  // Requests: passed above the axis, refused below, stacked at the same instant.
  const stack = new Map();
  for (const d of sim.decisions) {
    const k = d.at_ms + (d.allowed ? "p" : "r"); const n = stack.get(k) || 0; stack.set(k, n + 1);
    g.fillStyle = d.allowed ? css("--pass") : css("--denials");
    const yy = d.allowed ? h - pad.b + 8 + 0 : h - pad.b + 18;
    g.beginPath(); g.arc(x(d.at_ms) + (n % 12) * 3, yy, 3, 0, 2 * Math.PI); g.fill();
  }
  g.fillStyle = css("--muted"); g.fillText("left", 2, levelTop + 12);
  if (now <= span) { g.strokeStyle = css("--warn"); g.beginPath(); g.moveTo(x(now) + 0.5, levelTop); g.lineTo(x(now) + 0.5, levelBottom); g.stroke(); }
}

function preset(a, b, requests, until) {
  playReset();
  $(".params", $("#side-a")).value = JSON.stringify(a);
  $(".params", $("#side-b")).value = JSON.stringify(b);
  if (requests) { play.requests = requests; play.fixed = { until }; simulateAll(); }
}

function presetBoundary() {
  // Five requests in the last second of the window [0 s, 10 s), five in the first of the next.
  const requests = [];
  for (let i = 0; i < 5; i++) requests.push({ at_ms: 9000 + 200 * i, cost: 1 });
  for (let i = 0; i < 5; i++) requests.push({ at_ms: 10000 + 200 * i, cost: 1 });
  preset({ algorithm: "fixed_window", limit: 5, window: "10s" }, { algorithm: "sliding_log", limit: 5, window: "10s" }, requests, 20000);
}

window.addEventListener("DOMContentLoaded", () => {
  $("#rollback").addEventListener("click", () => rollback(null));
  $("#key-form").addEventListener("submit", inspect);
  $("#key-reset").addEventListener("click", resetKey);
  $("#send-one").addEventListener("click", () => send(1));
  $("#send-burst").addEventListener("click", (e) => { if (e.target.tagName !== "INPUT") send(Math.max(1, Math.min(200, Number($("#burst-size").value) || 1))); });
  $("#play-reset").addEventListener("click", playReset);
  $("#preset-boundary").addEventListener("click", presetBoundary);
  $("#preset-default").addEventListener("click", () => preset({ algorithm: "token_bucket", rate: "2/s", burst: 8 }, { algorithm: "sliding_window", limit: 5, window: "5s" }));
  for (const side of sides()) $(".params", side).addEventListener("change", () => play.requests.length && simulateAll());
  window.addEventListener("resize", () => { renderAll(); if (play.requests.length) simulateAll(); });
  api("GET", "/admin/stats").then((r) => { if (r.ok) { live.stats = r.json; renderAll(); } });
  stream();
  loadRlqs();
  setInterval(loadRlqs, 2000);
});
