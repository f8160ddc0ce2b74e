// What the run view's charts and numbers are labelled with: the series palette, number,
// duration and byte formats, and axis ticks (nice linear ticks, log ticks that always
// label). The charts themselves are uPlot (linechart.ts).

export const PALETTE: readonly string[] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

// NaN and ±inf come as numbers or, through JSON, as the text "nan", "inf", "-inf".
const NON_FINITE: { readonly [text: string]: string } = { nan: "NaN", inf: "inf", "-inf": "-inf" };

/** A value as the views show it; `v` is what came through JSON: a number, the text of a
 * non-finite number, or nothing. */
export function formatNumber(v: number | string | null | undefined): string {
  if (typeof v === "string") return NON_FINITE[v] ?? "–";
  if (typeof v === "number" && Number.isNaN(v)) return "NaN";
  if (v === Infinity || v === -Infinity) return v > 0 ? "inf" : "-inf";
  if (v === null || v === undefined || !Number.isFinite(v)) return "–";
  const a = Math.abs(v);
  if (Number.isInteger(v) && a < 1e15) return v.toLocaleString("en-US");
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(3).replace(/\.?0+e/, "e");
  return String(Number(v.toPrecision(5)));
}

// Axis labels: short (12k, 1.5M) so they fit under a narrow chart.
export function formatTick(v: number): string {
  const a = Math.abs(v);
  const units: [number, number, string][] = [[1e9, 1e9, "G"], [1e6, 1e6, "M"], [1e4, 1e3, "k"]];
  for (const [from, size, unit] of units) {
    if (a >= from) return `${Number((v / size).toPrecision(3))}${unit}`;
  }
  return formatNumber(v);
}

/** A count with its noun, singular for one: "1 point", "2,048 points". */
export function counted(n: number, noun: string): string {
  return `${n.toLocaleString("en-US")} ${n === 1 ? noun : `${noun}s`}`;
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = String(s % 60).padStart(2, "0");
  return h ? `${h}:${String(m).padStart(2, "0")}:${r}` : `${m}:${r}`;
}

// Sizes count in 1024s and say so (KiB, MiB, ...), as the text views and the CLI do.
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = bytes;
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

export function niceTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  if (min === max) return [min];
  const raw = (max - min) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((f) => f * mag).find((s) => s >= raw) || raw;
  const ticks: number[] = [];
  for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) ticks.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return ticks;
}

// Ticks of an axis of whole numbers (steps, trials): whole steps of 1, 2 or 5 times a power
// of ten, never less than 1, so a run of 4 steps is labelled 0 1 2 3, not 0 0.5 1 ... 2.5.
export function integerTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  const lo = Math.ceil(min - 1e-9);
  const hi = Math.floor(max + 1e-9);
  if (hi < lo) return [];
  if (hi === lo) return [lo || 0]; // never -0
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.max(0, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((f) => f * mag).find((s) => s >= raw) || 10 * mag;
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) ticks.push(v || 0); // never -0
  return ticks;
}

// Ticks of a wall-time axis, in seconds: whole steps a clock reads well (1, 2, 5, 10, 15,
// 30 s, 1, 2, 5, 10, 15, 30 min, 1, 2, 6, 12 h), so no two ticks read the same (m:ss).
const TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200];

export function timeTicks(min: number, max: number, count = 5): number[] {
  if (!Number.isFinite(min) || !Number.isFinite(max)) return [];
  const raw = (max - min) / Math.max(1, count);
  const step = TIME_STEPS.find((s) => s >= raw) ?? Math.ceil(raw / 86400) * 86400;
  const ticks: number[] = [];
  for (let v = Math.ceil(min / step - 1e-9) * step; v <= max + 1e-9; v += step) ticks.push(v || 0);
  return ticks;
}

/** Labels of an axis's ticks, with more digits where the short ones would repeat (a
 * range of 12,300 to 12,305 is not labelled "12.3k" five times). */
export function distinctLabels(ticks: number[], short: (v: number) => string): string[] {
  const labels = ticks.map(short);
  if (new Set(labels).size === labels.length) return labels;
  for (const digits of [4, 6, 8, 12]) {
    const longer = ticks.map((v) => String(Number(v.toPrecision(digits))));
    if (new Set(longer).size === longer.length) return longer;
  }
  return labels;
}

// Ticks of a log axis, as log10 values between lo and hi (log10 too): powers of ten when
// the range holds at least two of them, then 1-2-5 steps within each decade, and over less
// than a decade the nice ticks of the plain values, so a log axis always has labels.
export function logTicks(lo: number, hi: number, count = 4): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  const inRange = (t: number): boolean => t >= lo - 1e-12 && t <= hi + 1e-12;
  const powers = niceTicks(Math.floor(lo), Math.ceil(hi), count).filter((t) => Number.isInteger(t) && inRange(t));
  if (powers.length >= 2) return powers;
  const steps: number[] = [];
  for (let d = Math.floor(lo); d <= Math.ceil(hi); d++) {
    for (const m of [1, 2, 5]) {
      const t = d + Math.log10(m);
      if (inRange(t)) steps.push(t);
    }
  }
  if (steps.length >= 2 && steps.length <= count + 2) return steps;
  return niceTicks(10 ** lo, 10 ** hi, count).filter((v) => v > 0).map(Math.log10).filter(inRange);
}
