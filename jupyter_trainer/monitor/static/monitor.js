// The run monitor widget (anywidget ESM entry point): header, stage timeline, progress,
// metric charts, per-rank logs, failure banner, Cancel; or the launch form, which turns into
// the monitor once the run starts. The kernel sends small state dicts, downsampled series
// as float64 buffers and log lines as deltas; everything is drawn here, with no network.
import { LineChart, PALETTE, formatDuration, formatNumber } from "./chart.js";
import { LogView } from "./logview.js";
import { ansiToHtml, escapeHtml } from "./ansi.js";
import { renderForm } from "./form.js";

const STAGE_NAMES = ["preparing", "queued", "running", "finalizing"];
const TERMINAL = ["completed", "failed", "canceled", "lost"];
// What the views of one widget share (log lines, view settings), by the widget's key: the
// model objects handed to initialize() and render() are not the same JS object.
const STORES = new Map();

function storeFor(model) {
  const key = model.get("key");
  let store = STORES.get(key);
  if (!store) {
    store = { gen: null, end: 0, lines: [], listeners: new Set(), search: "", logY: false, maxLines: 2000 };
    STORES.set(key, store);
  }
  return store;
}

// Log payloads are deltas ({gen, start, end, reset, lines}); a gap (a reload, a missed
// update) asks the kernel for the whole bounded tail again.
function ingestLog(model) {
  const store = storeFor(model);
  const p = model.get("log") || {};
  if (p.gen === undefined) return;
  store.maxLines = p.max_lines || store.maxLines;
  let event = null;
  if (p.reset) {
    Object.assign(store, { gen: p.gen, end: p.end, lines: p.lines.slice() });
    event = { reset: true };
  } else if (p.gen !== store.gen || p.start > store.end) {
    model.send({ type: "log_resync" });
    return;
  } else if (p.end > store.end) {
    const fresh = p.lines.slice(store.end - p.start);
    store.lines.push(...fresh);
    store.end = p.end;
    event = { append: fresh };
  } else {
    return;
  }
  if (store.lines.length > store.maxLines) store.lines.splice(0, store.lines.length - store.maxLines);
  store.ranks = p.ranks || [];
  store.skipped = p.skipped_bytes || 0;
  store.selection = p.selection;
  for (const listener of store.listeners) listener(event);
}

function toFloats(view) {
  if (!view) return new Float64Array(0);
  if (view instanceof Float64Array) return view;
  const buffer = view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength);
  return new Float64Array(buffer);
}

function h(tag, cls, html) {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (html !== undefined) el.innerHTML = html;
  return el;
}

function segmented(name, options, onPick) {
  const el = h("span", "jt-segmented");
  el.dataset.testid = `jt-opt-${name}`;
  for (const [value, label] of options) {
    const b = h("button", "jt-seg", escapeHtml(label));
    b.type = "button";
    b.dataset.value = value;
    b.addEventListener("click", () => onPick(value));
    el.append(b);
  }
  el.set = (value) => el.querySelectorAll("button").forEach((b) => b.setAttribute("aria-pressed", String(b.dataset.value === value)));
  return el;
}

function buildMonitor(root, model) {
  const store = storeFor(model);
  root.innerHTML = `
    <div class="jt-head">
      <div class="jt-head-main">
        <span class="jt-badge" data-testid="jt-status"></span>
        <span class="jt-name" data-testid="jt-name"></span>
        <code class="jt-runid" data-testid="jt-run-id" title="run id: %train attach RUN"></code>
        <span class="jt-spacer"></span>
        <span class="jt-elapsed" data-testid="jt-elapsed" title="elapsed"></span>
        <button type="button" class="jt-button jt-danger" data-testid="jt-cancel">Cancel</button>
      </div>
      <div class="jt-meta" data-testid="jt-meta"></div>
      <div class="jt-params" data-testid="jt-params"></div>
      <div class="jt-source jt-muted" data-testid="jt-source" hidden></div>
      <div class="jt-notice" hidden></div>
    </div>
    <div class="jt-banner" data-testid="jt-banner" hidden></div>
    <div class="jt-outputs" data-testid="jt-outputs" hidden></div>
    <ol class="jt-stages" data-testid="jt-stages"></ol>
    <div class="jt-progress">
      <div class="jt-bar"><div class="jt-bar-fill" data-testid="jt-progress-fill"></div></div>
      <div class="jt-progress-text" data-testid="jt-progress-text"></div>
    </div>
    <section class="jt-section">
      <div class="jt-section-head"><span class="jt-section-title">Metrics</span><span class="jt-muted jt-metrics-note"></span><span class="jt-spacer"></span><span class="jt-chart-controls"></span></div>
      <div class="jt-chips" data-testid="jt-metric-chips"></div>
      <table class="jt-texts" data-testid="jt-text-metrics" hidden></table>
      <div class="jt-charts" data-testid="jt-charts"></div>
    </section>
    <section class="jt-section">
      <div class="jt-section-head"><span class="jt-section-title">Logs</span></div>
      <div class="jt-log-slot"></div>
    </section>`;
  const $ = (sel) => root.querySelector(sel);
  const cancel = $("[data-testid=jt-cancel]");
  const charts = new Map(); // metric -> {card, chart}
  let clock = { offset: 0 }; // kernel time - browser time, from the last state
  let cancelClicked = false;

  const setOption = (key, value) => {
    const opts = { ...(model.get("chart_options") || {}), [key]: value };
    model.set("chart_options", opts);
    model.save_changes();
  };
  const xCtl = segmented("x", [["step", "Step"], ["time", "Wall time"]], (v) => setOption("x", v));
  const aggCtl = segmented("agg", [["ranks", "Per rank"], ["mean", "Mean"]], (v) => setOption("agg", v));
  const yCtl = segmented("y", [["linear", "Linear"], ["log", "Log"]], (v) => {
    store.logY = v === "log";
    yCtl.set(v);
    drawCharts();
  });
  $(".jt-chart-controls").append(xCtl, aggCtl, yCtl);

  const logs = new LogView($(".jt-log-slot"), {
    maxLines: store.maxLines,
    onSelect: (sel) => { model.set("log_selection", sel); model.save_changes(); },
  });
  logs.search.addEventListener("input", () => { store.search = logs.search.value; });
  logs.setSearch(store.search);
  const onLog = (event) => {
    logs.setRanks(store.ranks || [], model.get("log_selection"));
    logs.setNote(store.skipped ? "newest lines only — the whole log: %train logs RUN" : "");
    if (!event || event.reset) logs.setLines(store.lines);
    else logs.append(event.append);
  };
  store.listeners.add(onLog);
  onLog(null);

  cancel.addEventListener("click", () => {
    cancelClicked = true;
    cancel.disabled = true;
    cancel.textContent = "Canceling…";
    model.send({ type: "cancel" });
  });

  function renderHead() {
    const info = model.get("info") || {};
    const state = model.get("state") || {};
    const status = state.status || "created";
    const badge = $("[data-testid=jt-status]");
    badge.textContent = status;
    badge.className = `jt-badge jt-status-${status}`;
    $("[data-testid=jt-name]").textContent = info.name || "";
    $("[data-testid=jt-run-id]").textContent = model.get("run_id");
    const env = info.environment || {};
    const kernelEnv = env.name === "kernel" || !env.name;
    let envText = kernelEnv ? "kernel's Python" : `env <b>${escapeHtml(env.name)}</b>${env.version ? `@${escapeHtml(String(env.version).slice(0, 12))}` : ""}`;
    if (!kernelEnv && env.built === true) envText += env.build_seconds ? ` (built in ${formatNumber(env.build_seconds)} s)` : " (built)";
    else if (!kernelEnv && env.built === false) envText += " (cached)";
    const parts = [`target <b>${escapeHtml(info.target || "?")}</b>`, escapeHtml(info.launcher || ""),
      `${info.nodes || 1} node${info.nodes > 1 ? "s" : ""} × ${info.procs || 1} proc${info.procs > 1 ? "s" : ""}`,
      info.backend ? `backend ${escapeHtml(info.backend)}` : "", envText];
    const envTitle = [env.python, env.python_version && `Python ${env.python_version}`, env.torch && `torch ${env.torch}`].filter(Boolean).join(" · ");
    $("[data-testid=jt-meta]").innerHTML = parts.filter(Boolean)
      .map((p, i, all) => `<span${i === all.length - 1 ? ` title="${escapeHtml(envTitle)}"` : ""}>${p}</span>`)
      .join('<span class="jt-dot">·</span>');
    const params = Object.entries(info.params || {});
    $("[data-testid=jt-params]").innerHTML = params.length
      ? params.map(([k, v]) => `<span class="jt-chip jt-param-chip" title="${escapeHtml(`${k} = ${pyRepr(v)}`)}"><span class="jt-muted">${escapeHtml(k)}</span> ${escapeHtml(pyRepr(v))}</span>`).join("")
      : '<span class="jt-muted">no hyperparameters</span>';
    const source = $("[data-testid=jt-source]");
    source.textContent = info.source || "";
    source.hidden = !info.source;
    const terminal = TERMINAL.includes(status);
    cancel.hidden = terminal;
    if (!terminal && !cancelClicked) { cancel.disabled = false; cancel.textContent = "Cancel"; }
    const notice = $(".jt-notice");
    notice.textContent = model.get("notice") || "";
    notice.hidden = !notice.textContent;
    renderBanner(state);
    renderOutputs(state);
    tick();
  }

  function renderOutputs(state) {
    // Once the run ended: what it left in outputs/ (model.pt, ...), and where.
    const box = $("[data-testid=jt-outputs]");
    const out = state.outputs;
    box.hidden = !out;
    if (!out) return;
    const files = out.files || [];
    const html = `<span class="jt-section-title">Outputs</span> <span class="jt-muted" title="${escapeHtml(out.folder)}">${escapeHtml(out.folder)}</span>` +
      (files.length ? `<ul>${files.map((f) => `<li data-path="${escapeHtml(f.path)}"><code>${escapeHtml(f.path)}</code> <span class="jt-muted">${formatBytes(f.bytes)}</span></li>`).join("")}</ul>`
        : ' <span class="jt-muted">(empty)</span>');
    if (box.innerHTML !== html) box.innerHTML = html;
  }

  function formatBytes(n) {
    const units = ["B", "KB", "MB", "GB", "TB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return `${i ? n.toFixed(1) : n} ${units[i]}`;
  }

  function renderBanner(state) {
    const banner = $("[data-testid=jt-banner]");
    const status = state.status;
    if (status === "failed" || status === "lost") {
      const who = state.failed_rank !== null && state.failed_rank !== undefined ? `Rank ${state.failed_rank} failed first` : `Run ${status}`;
      banner.className = "jt-banner jt-banner-error";
      banner.innerHTML = `<div class="jt-banner-title">${escapeHtml(who)}: ${escapeHtml(state.error || "unknown error")}</div>` +
        (state.traceback ? `<details open><summary>Traceback${state.failed_rank !== null && state.failed_rank !== undefined ? ` of rank ${state.failed_rank}` : ""}</summary><pre class="jt-traceback">${ansiToHtml(state.traceback)}</pre></details>` : "");
      banner.hidden = false;
    } else if (status === "canceled") {
      banner.className = "jt-banner jt-banner-muted";
      banner.innerHTML = `<div class="jt-banner-title">Canceled${state.reason ? `: ${escapeHtml(state.reason)}` : ""}</div>`;
      banner.hidden = false;
    } else {
      banner.hidden = true;
    }
  }

  // Durations that are still running advance every second without a message from the kernel.
  function tick() {
    const state = model.get("state") || {};
    const now = Date.now() / 1000 + clock.offset;
    const terminal = TERMINAL.includes(state.status);
    const end = state.ended || now;
    $("[data-testid=jt-elapsed]").textContent = state.created ? formatDuration(end - state.created) : "";
    const byName = Object.fromEntries((state.stages || []).map((s) => [s.name, s]));
    const reached = Math.max(-1, ...STAGE_NAMES.map((n, i) => (byName[n] ? i : -1)));
    const items = STAGE_NAMES.map((name, i) => {
      const s = byName[name];
      let cls = "jt-stage-pending", text = "";
      if (s) {
        const done = s.end !== null && s.end !== undefined;
        cls = done || terminal ? "jt-stage-done" : "jt-stage-active";
        text = formatSeconds((done ? s.end : terminal ? end : now) - s.start);
      } else if (terminal || i < reached) {
        cls = "jt-stage-skipped";
      }
      return `<li class="jt-stage ${cls}" data-stage="${name}"><span class="jt-stage-name">${name}</span><span class="jt-stage-time">${text}</span></li>`;
    });
    if (terminal) items.push(`<li class="jt-stage jt-stage-end jt-status-${state.status}"><span class="jt-stage-name">${escapeHtml(state.status)}</span></li>`);
    const list = $("[data-testid=jt-stages]");
    const html = items.join("");
    if (list.innerHTML !== html) list.innerHTML = html;
  }

  function renderProgress() {
    const p = model.get("progress") || {};
    const state = model.get("state") || {};
    const fill = $("[data-testid=jt-progress-fill]");
    const text = $("[data-testid=jt-progress-text]");
    fill.className = `jt-bar-fill jt-status-${state.status || "created"}`;
    if (p.done === undefined) {
      fill.style.width = "0%";
      fill.dataset.fraction = "0";
      // Ranks take seconds to start (imports, rendezvous): only a run that ended without any
      // progress was one that never called it.
      const hint = TERMINAL.includes(state.status)
        ? "no progress was reported (call <code>jt.progress(done, total)</code> in the loop to see it here)"
        : state.status === "running"
          ? "waiting for the first <code>jt.progress(done, total)</code> from the ranks"
          : "the ranks are not started yet";
      text.innerHTML = `<span class="jt-muted">${hint}</span>`;
      return;
    }
    const fraction = p.total ? Math.min(1, p.done / p.total) : null;
    fill.style.width = fraction === null ? "100%" : `${(fraction * 100).toFixed(1)}%`;
    fill.classList.toggle("jt-indeterminate", fraction === null && !TERMINAL.includes(state.status));
    fill.dataset.fraction = String(fraction ?? 0);
    const parts = [p.total ? `${formatNumber(p.done)} / ${formatNumber(p.total)} (${(fraction * 100).toFixed(0)}%)` : `${formatNumber(p.done)} done`];
    if (p.rate) parts.push(`${Number(p.rate.toPrecision(3))} steps/s`);
    if (p.eta !== null && p.eta !== undefined && !TERMINAL.includes(state.status)) parts.push(`ETA ${formatDuration(p.eta)}`);
    if (p.ranks > 1) parts.push(`slowest of ${p.ranks} ranks`);
    text.textContent = parts.join("  ·  ");
  }

  // The metrics shown: the user's last choice, which the kernel's charts may not have
  // caught up with yet; until there is one, the kernel's default.
  const selectedMetrics = () => {
    const chosen = (model.get("chart_options") || {}).selected;
    return new Set(Array.isArray(chosen) ? chosen : (model.get("charts") || {}).selected || []);
  };

  function renderChips() {
    const selected = selectedMetrics();
    const metrics = model.get("metrics") || [];
    const chips = $("[data-testid=jt-metric-chips]");
    chips.innerHTML = metrics.map((m) => `<button type="button" class="jt-chip jt-metric-chip${selected.has(m.name) ? " jt-on" : ""}" data-metric="${escapeHtml(m.name)}" title="last ${formatNumber(m.last)} · min ${formatNumber(m.min)} · max ${formatNumber(m.max)} · ${m.count} points">${escapeHtml(m.name)} <b>${formatNumber(m.last)}</b></button>`).join("");
    chips.querySelectorAll("button").forEach((b) => b.addEventListener("click", () => {
      const name = b.dataset.metric;
      const next = selectedMetrics();
      if (next.has(name)) next.delete(name); else next.add(name);
      setOption("selected", metrics.map((m) => m.name).filter((n) => next.has(n)));
      renderChips();
    }));
    renderTexts();
    const note = $(".jt-metrics-note");
    const loading = model.get("loading") ? " · reading history…" : "";
    note.textContent = metrics.length ? `${selected.size} of ${metrics.length} shown${loading}` : `none logged yet — jt.log(step=…, loss=…)${loading}`;
    const opts = model.get("chart_options") || {};
    xCtl.set(opts.x || "step");
    aggCtl.set(opts.agg || "ranks");
    yCtl.set(store.logY ? "log" : "linear");
  }

  function renderTexts() {
    // Text metrics (jt.log(phase="train")) are not charted: their last value on each rank.
    const texts = model.get("texts") || {};
    const table = $("[data-testid=jt-text-metrics]");
    const names = Object.keys(texts);
    table.hidden = !names.length;
    const html = names.map((name) => `<tr data-metric="${escapeHtml(name)}"><th>${escapeHtml(name)} <span class="jt-muted">(text, not charted)</span></th>${Object.entries(texts[name]).map(([rank, value]) => `<td><span class="jt-muted">rank ${escapeHtml(rank)}</span> ${escapeHtml(value)}</td>`).join("")}</tr>`).join("");
    if (table.innerHTML !== html) table.innerHTML = html;
  }

  function drawCharts() {
    const payload = model.get("charts") || {};
    const data = payload.charts || {};
    const area = $("[data-testid=jt-charts]");
    for (const [name, entry] of charts) {
      if (!(name in data)) { entry.chart.destroy(); entry.card.remove(); charts.delete(name); }
    }
    for (const name of payload.selected || []) {
      const chart = data[name];
      if (!chart) continue;
      let entry = charts.get(name);
      if (!entry) {
        const card = h("div", "jt-chart-card");
        card.dataset.metric = name;
        card.innerHTML = `<div class="jt-chart-head"><span class="jt-chart-title">${escapeHtml(name)}</span><span class="jt-chart-stats"></span></div><div class="jt-chart-legend"></div><div class="jt-chart-area"></div><div class="jt-chart-foot jt-muted"></div>`;
        area.append(card);
        entry = { card, chart: new LineChart(card.querySelector(".jt-chart-area")) };
        charts.set(name, entry);
      }
      const series = chart.series.map((s, k) => ({ label: s.label, color: PALETTE[(s.rank ?? k) % PALETTE.length], x: toFloats(s.x), y: toFloats(s.y) }));
      const first = chart.series[0] || {};
      entry.card.querySelector(".jt-chart-stats").innerHTML = `last <b>${formatNumber(first.last)}</b> · min ${formatNumber(first.min)} · max ${formatNumber(first.max)}`;
      entry.card.querySelector(".jt-chart-legend").innerHTML = chart.series.length > 1 || first.rank === null
        ? chart.series.map((s, k) => `<span class="jt-legend-item"><span class="jt-swatch" style="background:${series[k].color}"></span>${escapeHtml(s.label)} <b>${formatNumber(s.last)}</b></span>`).join("") : "";
      const total = chart.series.reduce((n, s) => n + s.count, 0);
      const drawn = chart.series.reduce((n, s) => n + s.points, 0);
      const perSeries = chart.series.length > 1 ? `${first.count.toLocaleString()} points × ${chart.series.length} ranks` : `${first.count.toLocaleString()} points`;
      entry.card.querySelector(".jt-chart-foot").textContent = perSeries +
        (drawn < total ? ` · ${drawn.toLocaleString()} drawn (min/max per bucket)` : "") +
        (chart.ranks > chart.series.length && first.rank !== null ? ` · first ${chart.series.length} of ${chart.ranks} ranks` : "");
      entry.chart.canvas.dataset.count = String(total);
      entry.chart.update({ series, xKind: payload.x, logY: store.logY });
    }
    const order = (payload.selected || []).filter((n) => charts.has(n));
    order.forEach((n) => area.append(charts.get(n).card));
  }

  // Coalesce bursts of changes into one repaint per animation frame.
  const dirty = new Set();
  let frame = 0;
  const schedule = (part) => {
    dirty.add(part);
    if (!frame) frame = requestAnimationFrame(paint);
  };
  function paint() {
    frame = 0;
    if (dirty.has("head")) renderHead();
    if (dirty.has("progress") || dirty.has("head")) renderProgress();
    if (dirty.has("charts")) { renderChips(); drawCharts(); }
    dirty.clear();
  }
  const handlers = {
    "change:state": () => {
      const state = model.get("state") || {};
      if (state.now) clock = { offset: state.now - Date.now() / 1000 };
      schedule("head");
    },
    "change:info": () => schedule("head"),
    "change:notice": () => schedule("head"),
    "change:cancel_state": () => { cancelClicked = !!model.get("cancel_state"); schedule("head"); },
    "change:progress": () => schedule("progress"),
    "change:run_id": () => schedule("head"),
    "change:metrics": () => schedule("charts"),
    "change:texts": () => schedule("charts"),
    "change:charts": () => schedule("charts"),
    "change:loading": () => schedule("charts"),
    "change:log_selection": () => logs.setRanks(store.ranks || [], model.get("log_selection")),
  };
  for (const [event, fn] of Object.entries(handlers)) model.on(event, fn);
  handlers["change:state"]();
  ["head", "progress", "charts"].forEach(schedule);
  paint();
  const timer = setInterval(tick, 1000);
  return () => {
    clearInterval(timer);
    if (frame) cancelAnimationFrame(frame);
    for (const [event, fn] of Object.entries(handlers)) model.off(event, fn);
    store.listeners.delete(onLog);
    for (const { chart } of charts.values()) chart.destroy();
  };
}

// A hyperparameter as the notebook wrote it (Python literals, not JSON).
function pyRepr(v) {
  if (v === null) return "None";
  if (v === true) return "True";
  if (v === false) return "False";
  if (typeof v === "string") return `'${v.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  if (Array.isArray(v)) return `[${v.map(pyRepr).join(", ")}]`;
  if (typeof v === "object") return `{${Object.entries(v).map(([k, x]) => `${pyRepr(k)}: ${pyRepr(x)}`).join(", ")}}`;
  return String(v);
}

function formatSeconds(s) {
  if (!isFinite(s)) return "";
  return s < 60 ? `${s.toFixed(s < 10 ? 1 : 0)} s` : formatDuration(s);
}

export default {
  initialize({ model }) {
    // Ingest from the model's creation on, so views created later miss nothing.
    const onLog = () => ingestLog(model);
    if (model.get("mode") !== "form" && (model.get("log") || {}).reset) onLog();
    model.on("change:log", onLog);
    return () => model.off("change:log", onLog);
  },
  render({ model, el }) {
    const root = h("div", "jt-monitor");
    root.dataset.testid = "jt-monitor";
    el.append(root);
    let cleanup = () => {};
    const build = () => {
      cleanup();
      root.dataset.mode = model.get("mode");
      cleanup = model.get("mode") === "form" ? renderForm(root, model) : buildMonitor(root, model);
    };
    build();
    const store = storeFor(model);
    if (model.get("mode") !== "form" && store.gen === null) {
      const p = model.get("log") || {};
      if (p.reset) ingestLog(model); else model.send({ type: "log_resync" });
    }
    const onMode = () => {
      build();
      if (model.get("mode") === "monitor") model.send({ type: "log_resync" });
    };
    model.on("change:mode", onMode);
    return () => {
      model.off("change:mode", onMode);
      cleanup();
    };
  },
};
