// A line chart on <canvas>, in plain JS: nice ticks, grid, one line per series, a hover
// read-out, linear or log y, responsive width, sharp on high-DPI screens, colours from the
// JupyterLab theme. Standalone ES module (no imports) so other front ends can reuse it.

export const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

export function formatNumber(v) {
  if (v === null || v === undefined || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e15) return v.toLocaleString("en-US");
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(3).replace(/\.?0+e/, "e");
  return String(Number(v.toPrecision(5)));
}

// Axis labels: short (12k, 1.5M) so they fit under a narrow chart.
export function formatTick(v) {
  const a = Math.abs(v);
  for (const [from, size, unit] of [[1e9, 1e9, "G"], [1e6, 1e6, "M"], [1e4, 1e3, "k"]]) {
    if (a >= from) return `${Number((v / size).toPrecision(3))}${unit}`;
  }
  return formatNumber(v);
}

export function formatDuration(seconds) {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = String(s % 60).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${r}` : `${m}:${r}`;
}

export function formatBytes(n) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function niceTicks(min, max, count = 5) {
  if (!isFinite(min) || !isFinite(max)) return [];
  if (min === max) return [min];
  const raw = (max - min) / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw) || raw;
  const ticks = [];
  for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return ticks;
}

// Ticks of a log axis, as log10 values between lo and hi (log10 too): powers of ten when
// the range holds at least two of them, then 1-2-5 steps within each decade, and over less
// than a decade the nice ticks of the plain values, so a log axis always has labels.
export function logTicks(lo, hi, count = 4) {
  if (!isFinite(lo) || !isFinite(hi)) return [];
  const inRange = (t) => t >= lo - 1e-12 && t <= hi + 1e-12;
  const powers = niceTicks(Math.floor(lo), Math.ceil(hi), count).filter((t) => Number.isInteger(t) && inRange(t));
  if (powers.length >= 2) return powers;
  const steps = [];
  for (let d = Math.floor(lo); d <= Math.ceil(hi); d++) {
    for (const m of [1, 2, 5]) {
      const t = d + Math.log10(m);
      if (inRange(t)) steps.push(t);
    }
  }
  if (steps.length >= 2 && steps.length <= count + 2) return steps;
  return niceTicks(Math.pow(10, lo), Math.pow(10, hi), count).filter((v) => v > 0).map(Math.log10).filter(inRange);
}

function cssVar(el, name, fallback) {
  const v = getComputedStyle(el).getPropertyValue(name).trim();
  return v || fallback;
}

export class LineChart {
  constructor(container, { height = 190 } = {}) {
    this.container = container;
    this.height = height;
    this.canvas = document.createElement("canvas");
    this.canvas.className = "jt-chart-canvas";
    this.canvas.dataset.testid = "jt-chart";
    this.tip = document.createElement("div");
    this.tip.className = "jt-chart-tip";
    this.tip.hidden = true;
    container.append(this.canvas, this.tip);
    this.spec = { series: [] };
    this.hover = null;
    this.resize = new ResizeObserver(() => this.draw());
    this.resize.observe(container);
    this.canvas.addEventListener("mousemove", (e) => {
      const r = this.canvas.getBoundingClientRect();
      this.hover = e.clientX - r.left;
      this.draw();
    });
    this.canvas.addEventListener("mouseleave", () => {
      this.hover = null;
      this.tip.hidden = true;
      this.draw();
    });
  }

  // spec: {xKind: "step"|"time", logY: bool, series: [{label, color, x: Float64Array, y: Float64Array}]}
  update(spec) {
    this.spec = spec;
    this.draw();
  }

  destroy() {
    this.resize.disconnect();
    this.canvas.remove();
    this.tip.remove();
  }

  _ranges(series, logY) {
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const s of series) {
      for (let i = 0; i < s.x.length; i++) {
        const y = s.y[i];
        if (logY && !(y > 0)) continue;
        if (s.x[i] < x0) x0 = s.x[i];
        if (s.x[i] > x1) x1 = s.x[i];
        if (y < y0) y0 = y;
        if (y > y1) y1 = y;
      }
    }
    if (logY) [y0, y1] = [Math.log10(y0), Math.log10(y1)];
    if (y0 === y1) [y0, y1] = [y0 - (Math.abs(y0) || 1) * 0.05, y1 + (Math.abs(y1) || 1) * 0.05];
    else { const pad = (y1 - y0) * 0.06; y0 -= pad; y1 += pad; }
    if (x0 === x1) [x0, x1] = [x0 - 0.5, x1 + 0.5];
    return { x0, x1, y0, y1 };
  }

  draw() {
    const width = Math.max(160, Math.floor(this.container.clientWidth));
    const height = this.height;
    const dpr = window.devicePixelRatio || 1;
    const c = this.canvas;
    if (c.width !== Math.round(width * dpr) || c.height !== Math.round(height * dpr)) {
      c.width = Math.round(width * dpr);
      c.height = Math.round(height * dpr);
      c.style.width = `${width}px`;
      c.style.height = `${height}px`;
    }
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const fg = cssVar(this.container, "--jp-ui-font-color2", "#616161");
    const grid = cssVar(this.container, "--jp-border-color2", "#e0e0e0");
    const font = cssVar(this.container, "--jp-ui-font-family", "system-ui, sans-serif");
    const { series = [], xKind = "step", logY = false } = this.spec;
    const drawable = series.filter((s) => s.x.length);
    c.dataset.points = String(drawable.reduce((n, s) => n + s.x.length, 0));
    c.dataset.x = xKind;
    c.dataset.series = String(drawable.length);
    if (!drawable.length) {
      ctx.fillStyle = fg;
      ctx.font = `12px ${font}`;
      ctx.fillText("waiting for data…", 12, height / 2);
      return;
    }
    const { x0, x1, y0, y1 } = this._ranges(drawable, logY);
    const yTicks = logY ? logTicks(y0, y1, 4) : niceTicks(y0, y1, 4);
    ctx.font = `11px ${font}`;
    const yLabel = (t) => (logY ? formatNumber(Number(Math.pow(10, t).toPrecision(6))) : formatTick(t));
    c.dataset.yTicks = yTicks.map(yLabel).join(" ");
    const left = 10 + Math.max(24, ...yTicks.map((t) => ctx.measureText(yLabel(t)).width));
    const pad = { left, right: 12, top: 8, bottom: 22 };
    const W = width - pad.left - pad.right;
    const H = height - pad.top - pad.bottom;
    const sx = (x) => pad.left + ((x - x0) / (x1 - x0)) * W;
    const sy = (y) => pad.top + H - (((logY ? Math.log10(y) : y) - y0) / (y1 - y0)) * H;

    ctx.strokeStyle = grid;
    ctx.lineWidth = 1;
    ctx.fillStyle = fg;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const t of yTicks) {
      const y = Math.round(pad.top + H - ((t - y0) / (y1 - y0)) * H) + 0.5;
      ctx.beginPath(); ctx.moveTo(pad.left, y); ctx.lineTo(pad.left + W, y); ctx.stroke();
      ctx.fillText(yLabel(t), pad.left - 6, y);
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const xTicks = niceTicks(x0, x1, Math.max(2, Math.floor(W / 90)));
    for (const t of xTicks) {
      const x = Math.round(sx(t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(x, pad.top); ctx.lineTo(x, pad.top + H); ctx.stroke();
      ctx.fillText(xKind === "time" ? formatDuration(t) : formatTick(t), x, pad.top + H + 5);
    }
    ctx.save();
    ctx.beginPath();
    ctx.rect(pad.left, pad.top, W, H);
    ctx.clip();
    drawable.forEach((s, k) => {
      ctx.strokeStyle = s.color || PALETTE[k % PALETTE.length];
      ctx.lineWidth = 1.5;
      ctx.lineJoin = "round";
      ctx.beginPath();
      let started = false;
      for (let i = 0; i < s.x.length; i++) {
        if (logY && !(s.y[i] > 0)) { started = false; continue; }
        const px = sx(s.x[i]), py = sy(s.y[i]);
        if (started) ctx.lineTo(px, py); else { ctx.moveTo(px, py); started = true; }
      }
      if (s.x.length === 1) ctx.arc(sx(s.x[0]), sy(s.y[0]), 2, 0, 2 * Math.PI);
      ctx.stroke();
    });
    ctx.restore();
    this._drawHover(ctx, drawable, sx, sy, pad, W, H, xKind, fg);
  }

  _drawHover(ctx, series, sx, sy, pad, W, H, xKind, fg) {
    if (this.hover === null || this.hover < pad.left || this.hover > pad.left + W) {
      this.tip.hidden = true;
      return;
    }
    const rows = [];
    let xValue = null;
    series.forEach((s, k) => {
      let best = -1, dist = Infinity;
      for (let i = 0; i < s.x.length; i++) {
        const d = Math.abs(sx(s.x[i]) - this.hover);
        if (d < dist) { dist = d; best = i; }
      }
      if (best < 0) return;
      xValue = s.x[best];
      const color = s.color || PALETTE[k % PALETTE.length];
      ctx.fillStyle = color;
      ctx.beginPath(); ctx.arc(sx(s.x[best]), sy(s.y[best]), 3, 0, 2 * Math.PI); ctx.fill();
      rows.push(`<div><span class="jt-swatch" style="background:${color}"></span>${s.label}: <b>${formatNumber(s.y[best])}</b></div>`);
    });
    ctx.strokeStyle = fg;
    ctx.globalAlpha = 0.35;
    ctx.beginPath(); ctx.moveTo(Math.round(this.hover) + 0.5, pad.top); ctx.lineTo(Math.round(this.hover) + 0.5, pad.top + H); ctx.stroke();
    ctx.globalAlpha = 1;
    const head = xKind === "time" ? `t = ${formatDuration(xValue)}` : `step ${formatNumber(xValue)}`;
    this.tip.innerHTML = `<div class="jt-tip-head">${head}</div>${rows.join("")}`;
    this.tip.hidden = false;
    const flip = this.hover > pad.left + W / 2;
    this.tip.style.left = flip ? "" : `${this.hover + 12}px`;
    this.tip.style.right = flip ? `${this.container.clientWidth - this.hover + 12}px` : "";
    this.tip.style.top = `${pad.top + 4}px`;
  }
}
