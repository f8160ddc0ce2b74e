/**
 * What the sweep view says and where its parallel-coordinates plot draws: the trials
 * table's cells, the header's lines, the colour of an objective and the plot's axes and
 * lines in pixels. Pure (unit-tested in node); ``sweepview`` and ``sweepcharts`` put them
 * on the page. The state is the sweep driver's ``state.json`` less each trial's metric
 * history; the chart data is ``monitor.sweep_charts.sweep_chart_data``.
 */
import { escapeHtml } from './ansi.js';
import { formatDuration, formatNumber, logTicks, niceTicks } from './chart.js';

/** What a trial without an objective reported of the metric (``monitor.sweep_charts.reported``):
 * ``kind`` is ``last`` (or ``best`` with ``--objective best``) once it ended, ``so far`` while
 * it runs. */
export interface IReported {
  value: number;
  step?: number | null;
  kind: string;
}

export interface ITrial {
  number: number;
  run?: string | null;
  params: { [key: string]: unknown };
  status: string;
  objective?: number | null;
  reported?: IReported | null;
  step?: number | null;
  start?: number | null;
  end?: number | null;
  pruned_at?: number | null;
  reason?: string | null;
  error?: string | null;
}

export interface IBest {
  number: number;
  run: string;
  params: { [key: string]: unknown };
  objective: number;
}

export interface ISweepState {
  id?: string;
  status?: string;
  created?: number;
  started?: number | null;
  ended?: number | null;
  error?: string | null;
  reason?: string | null;
  trials_total?: number;
  counts?: { [status: string]: number };
  best?: IBest | null;
  trials?: ITrial[];
  now?: number;
  cost?: string | null; // what the trials cost together, where their targets have a price
}

export interface ISweepSpec {
  name?: string;
  space?: { [key: string]: string };
  metric?: string;
  goal?: string;
  trials?: number;
  parallel?: number;
  sampler?: string;
  prune?: string;
}

export interface IAxis {
  name: string;
  kind: 'linear' | 'log' | 'category';
  categories?: string[];
  lo?: number;
  hi?: number;
}

export interface IChartData {
  best?: Array<{ n: number; number: number; objective: number; best: number }>;
  axes?: IAxis[];
  lines?: Array<{ number: number; status: string; objective: number | null; reported?: IReported | null; ys: Array<number | null> }>;
  metric?: string;
  goal?: string;
}

/** A sweep that has ended; ``interrupted`` is not one of them (it can be resumed). */
export const SWEEP_TERMINAL = ['completed', 'canceled', 'failed'];
/** Trial statuses in the order the header counts them. */
export const TRIAL_STATUSES = ['starting', 'running', 'completed', 'pruned', 'failed', 'canceled'];
const ACTIVE_TRIAL = ['starting', 'running'];

/** The swept params: the search space's keys, then any other a trial has. */
export function paramKeys(spec: ISweepSpec, trials: ITrial[]): string[] {
  const keys = Object.keys(spec.space || {});
  for (const trial of trials) {
    for (const key of Object.keys(trial.params || {})) {
      if (!keys.includes(key)) keys.push(key);
    }
  }
  return keys;
}

/** A param's value as a cell shows it: numbers to 4 significant digits, text as is. */
export function formatParam(value: unknown): string {
  if (value === null || value === undefined) return '–';
  if (typeof value === 'number') {
    if (Number.isInteger(value)) return formatNumber(value);
    const a = Math.abs(value);
    return a !== 0 && (a >= 1e5 || a < 1e-3) ? value.toExponential(2).replace(/\.?0+e/, 'e') : String(Number(value.toPrecision(4)));
  }
  if (typeof value === 'string') return value;
  return JSON.stringify(value);
}

/** Why a trial stopped, for the table's last column. */
export function trialNote(trial: ITrial): string {
  const why = trial.reason || trial.error || '';
  if (trial.status === 'pruned') {
    const at = trial.pruned_at !== null && trial.pruned_at !== undefined ? `pruned at step ${formatNumber(trial.pruned_at)}` : 'pruned';
    return why ? `${at}: ${why}` : at;
  }
  if (trial.status === 'failed' || trial.status === 'canceled') return why;
  if (trial.status === 'starting') return 'starting its run…';
  return '';
}

/** Seconds the trial ran (to ``now`` while it runs); null before it started. */
export function trialSeconds(trial: ITrial, now: number): number | null {
  if (!trial.start) return null;
  return Math.max(0, (trial.end || now) - trial.start);
}

export function trialDuration(trial: ITrial, now: number): string {
  const s = trialSeconds(trial, now);
  return s === null ? '–' : formatDuration(s);
}

/** ``[[status, n], ...]`` in the table's order, statuses with no trial left out. */
export function countsList(counts: { [status: string]: number } | undefined): Array<[string, number]> {
  const all = counts || {};
  const known = TRIAL_STATUSES.filter(s => all[s]).map(s => [s, all[s]] as [string, number]);
  const other = Object.keys(all).filter(s => !TRIAL_STATUSES.includes(s) && all[s]).sort().map(s => [s, all[s]] as [string, number]);
  return [...known, ...other];
}

/** ``5 of 12 trials started`` */
export function startedText(state: ISweepState, spec: ISweepSpec): string {
  const total = state.trials_total ?? spec.trials ?? 0;
  const started = (state.trials || []).length;
  return `${started} of ${total} trial${total === 1 ? '' : 's'} started`;
}

/** The sweep's settings in one line: goal and metric, sampler, pruning, parallelism. */
export function settingsList(spec: ISweepSpec): string[] {
  const parts = [`${spec.goal === 'min' ? 'minimize' : 'maximize'} ${spec.metric || '?'}`];
  if (spec.sampler) parts.push(`sampler ${spec.sampler}`);
  parts.push(spec.prune && spec.prune !== 'none' ? `prune ${spec.prune}` : 'no pruning');
  if (spec.parallel) parts.push(`${spec.parallel} in parallel`);
  return parts;
}

/** Why there is no best trial (yet): best so far counts completed trials only. */
export function noBestText(state: ISweepState): string {
  const counts = state.counts || {};
  const stopped = ['pruned', 'canceled', 'failed'].filter(s => counts[s]).map(s => `${counts[s]} ${s}`);
  if (!SWEEP_TERMINAL.includes(state.status || '') && state.status !== 'interrupted') {
    return stopped.length ? `no completed trial yet (${stopped.join(', ')}): best so far counts completed trials only` : 'no completed trial yet';
  }
  return `no trial completed${stopped.length ? ` (${stopped.join(', ')})` : ''}: best so far counts completed trials only; ` +
    'the values the others reported are in the table, marked';
}

/** A trial's objective cell: its objective, else what it reported, marked as not one. */
export function objectiveHtml(trial: ITrial, metric: string): string {
  if (typeof trial.objective === 'number') return formatNumber(trial.objective);
  const r = trial.reported;
  if (!r) return '–';
  return `<span class="jt-sweep-reported" data-reported="${r.value}" title="${escapeHtml(reportedTitle(trial, metric))}">` +
    `${formatNumber(r.value)} <span class="jt-sweep-reported-kind">${escapeHtml(r.kind)}</span></span>`;
}

/** The tooltip of a reported value: what it is, and that it is no objective. */
export function reportedTitle(trial: ITrial, metric: string): string {
  const r = trial.reported;
  if (!r) return '';
  const at = r.step !== null && r.step !== undefined ? ` at step ${formatNumber(r.step)}` : '';
  if (r.kind === 'so far') return `${metric} ${formatNumber(r.value)}${at}, its latest while it runs`;
  const what = r.kind === 'best' ? `the best ${metric} it reported` : `the last ${metric} it reported`;
  return `${what}${at} before it was ${trial.status === 'failed' ? 'stopped by its failure' : trial.status}: ` +
    'not an objective, so it does not count for the best trial';
}

/** The best trial so far as HTML: its number, objective and params. */
export function bestHtml(state: ISweepState, spec: ISweepSpec): string {
  const best = state.best;
  if (!best) return `<span class="jt-muted" data-testid="jt-sweep-no-best">${escapeHtml(noBestText(state))}</span>`;
  const params = Object.entries(best.params || {})
    .map(([k, v]) => `<span class="jt-chip jt-param-chip"><span class="jt-muted">${escapeHtml(k)}</span> ${escapeHtml(formatParam(v))}</span>`).join('');
  return `<span class="jt-sweep-best-label">★ best</span> <span class="jt-sweep-best-trial">#${best.number}</span> ` +
    `<span class="jt-muted">${escapeHtml(spec.metric || 'objective')}</span> <b class="jt-sweep-best-value" data-value="${best.objective}">${formatNumber(best.objective)}</b> ${params}`;
}

/** Trials by number, or by objective: the completed ones best first, then those that only
 * reported a value (best first: they are not comparable with an objective), then the rest. */
export function sortTrials(trials: ITrial[], by: 'number' | 'objective', goal: string | undefined): ITrial[] {
  const sorted = trials.slice();
  if (by === 'number') return sorted.sort((a, b) => a.number - b.number);
  const sign = goal === 'min' ? 1 : -1;
  const tier = (t: ITrial): number => (typeof t.objective === 'number' && Number.isFinite(t.objective) ? 0 : t.reported ? 1 : 2);
  const value = (t: ITrial): number => (tier(t) === 0 ? (t.objective as number) : t.reported ? t.reported.value : 0);
  return sorted.sort((a, b) => {
    if (tier(a) !== tier(b)) return tier(a) - tier(b);
    if (tier(a) === 2) return a.number - b.number;
    return sign * (value(a) - value(b)) || a.number - b.number;
  });
}

export function isActive(status: string | undefined): boolean {
  return ACTIVE_TRIAL.includes(status || '');
}

/** 0 for the worst objective of the sweep, 1 for the best (``goal`` says which is which). */
export function shade(objective: number, lo: number, hi: number, goal: string | undefined): number {
  const t = hi === lo ? 1 : (objective - lo) / (hi - lo);
  const clamped = Math.min(1, Math.max(0, t));
  return goal === 'min' ? 1 - clamped : clamped;
}

const RAMP: Array<[number, [number, number, number]]> = [[0, [74, 120, 194]], [0.5, [155, 89, 182]], [1, [232, 89, 12]]];

/** The colour of a shade: blue (worst) through purple to orange (best); it reads on a
 * light and a dark background alike. */
export function rampColor(t: number): string {
  const x = Math.min(1, Math.max(0, Number.isFinite(t) ? t : 0));
  let k = 0;
  while (k < RAMP.length - 2 && x > RAMP[k + 1][0]) k++;
  const [a, ca] = RAMP[k];
  const [b, cb] = RAMP[k + 1];
  const f = (x - a) / (b - a);
  const rgb = ca.map((c, i) => Math.round(c + (cb[i] - c) * f));
  return `rgb(${rgb[0]}, ${rgb[1]}, ${rgb[2]})`;
}

export interface IPlotAxis {
  name: string;
  x: number;
  /** Which side of the axis its tick labels go: the first axis's on the left, where no
   * line runs. */
  side: 'left' | 'right';
  ticks: Array<{ y: number; label: string }>;
}

export interface IPlotLine {
  number: number;
  status: string;
  objective: number | null;
  d: string;
  color: string | null;
  best: boolean;
  /** Where a reported value (not an objective) sits on the objective axis: a hollow mark. */
  reported: { x: number; y: number } | null;
}

export interface IPlotLayout {
  axes: IPlotAxis[];
  lines: IPlotLine[];
  top: number;
  bottom: number;
}

/** Tick labels of one axis, as positions from 0 (bottom) to 1 (top). */
export function axisTicks(axis: IAxis): Array<{ at: number; label: string }> {
  if (axis.kind === 'category') {
    const cats = axis.categories || [];
    return cats.map((label, k) => ({ at: (k + 0.5) / cats.length, label: label.replace(/^'(.*)'$/, '$1') }));
  }
  const lo = axis.lo ?? 0;
  const hi = axis.hi ?? 0;
  const value = (v: number): string => formatNumber(axis.kind === 'log' ? Number((10 ** v).toPrecision(3)) : Number(v.toPrecision(4)));
  if (hi === lo) return [{ at: 0.5, label: value(lo) }];
  const ticks: number[] = axis.kind === 'log' ? logTicks(lo, hi, 4) : niceTicks(lo, hi, 4);
  const at = (v: number): number => (v - lo) / (hi - lo);
  const out = ticks.map(v => ({ at: at(v), label: value(v) }));
  // the ends, when the nice ticks leave them far from a label
  if (!out.some(t => t.at < 0.12)) out.unshift({ at: 0, label: value(lo) });
  if (!out.some(t => t.at > 0.88)) out.push({ at: 1, label: value(hi) });
  return out;
}

/** About how wide ``text`` is at 11px, for the plot's margins. */
export function textWidth(text: string): number {
  return Math.ceil(text.length * 6.6);
}

/** The parallel-coordinates plot in pixels: one vertical axis per param and one for the
 * objective, evenly spaced in ``width`` (the margins fit the outer axes' labels and names);
 * one path per trial through its values (broken where it has none: a running trial stops
 * before the objective). Completed trials are coloured by objective and drawn last, the
 * best on top. */
export function parallelLayout(data: IChartData, width: number, height: number, bestNumber: number | null = null): IPlotLayout {
  const axes = data.axes || [];
  const names = axes.map(axis => (axis.name === 'objective' ? data.metric || 'objective' : axis.name));
  const ticks = axes.map(axisTicks);
  const widest = (k: number): number => Math.max(0, ...(ticks[k] || []).map(t => textWidth(t.label)));
  const last = axes.length - 1;
  const left = Math.min(110, Math.max(widest(0) + 10, textWidth(names[0] || '') / 2 + 4, 16));
  const right = Math.min(110, Math.max(last > 0 ? widest(last) + 10 : 0, textWidth(names[last] || '') / 2 + 4, 16));
  const top = 22;
  const bottom = height - 10;
  const span = Math.max(1, width - left - right);
  const xs = axes.map((_a, i) => left + (axes.length > 1 ? (span * i) / (axes.length - 1) : span / 2));
  const y = (at: number): number => bottom - at * (bottom - top);
  const plotAxes = axes.map((_axis, i) => ({
    name: names[i],
    x: xs[i],
    side: (i === 0 && axes.length > 1 ? 'left' : 'right') as 'left' | 'right',
    ticks: ticks[i].map(t => ({ y: y(t.at), label: t.label }))
  }));
  const objectiveAxis = axes[axes.length - 1] || { lo: 0, hi: 1 };
  const lines = (data.lines || []).map(line => {
    let d = '';
    let pen = false;
    let alone = false; // the last piece has one point so far
    line.ys.forEach((at, i) => {
      if (at === null || at === undefined || !Number.isFinite(at)) {
        if (alone) d += 'l0,0'; // a point with no neighbour is drawn as a dot (round caps)
        pen = alone = false;
        return;
      }
      d += `${pen ? 'L' : 'M'}${xs[i].toFixed(1)},${y(at).toFixed(1)}`;
      alone = !pen;
      pen = true;
    });
    if (alone) d += 'l0,0';
    const finished = line.status === 'completed' && typeof line.objective === 'number' && Number.isFinite(line.objective);
    const last = line.ys.length ? line.ys[line.ys.length - 1] : null;
    const marked = !finished && !!line.reported && last !== null && last !== undefined && Number.isFinite(last);
    return {
      number: line.number, status: line.status, objective: line.objective, d,
      color: finished ? rampColor(shade(line.objective as number, objectiveAxis.lo ?? 0, objectiveAxis.hi ?? 1, data.goal)) : null,
      best: line.number === bestNumber,
      reported: marked ? { x: xs[xs.length - 1], y: y(last as number) } : null
    };
  });
  const rank = (l: IPlotLine): number => (l.best ? 3 : l.color ? 2 : isActive(l.status) ? 1 : 0);
  const better = data.goal === 'min' ? -1 : 1;
  lines.sort((a, b) => rank(a) - rank(b) ||
    (a.color && b.color ? better * ((a.objective as number) - (b.objective as number)) : 0) || a.number - b.number);
  return { axes: plotAxes, lines, top, bottom };
}
