/**
 * The run view's Metrics section: the chart switches (step or wall time, per rank or the
 * ranks' mean, linear or log y), a chip per metric, the text metrics, and a chart per metric
 * shown. Every figure says which rank or ranks it is of (``rankstats``).
 */
import { PALETTE, formatNumber } from './chart.js';
import { escapeHtml } from './ansi.js';
import { LineChart } from './linechart';
import { type ChartMode, chartStatsHtml, chipParts, pointsText } from './rankstats';
import { attemptOfPoints, splitAttempts } from './series';
import type { IChartSeries, IRunTraits, SeriesValues } from './runtraits';
import type { IViewModel } from './viewmodel';

/** A series' float64 values: a DataView (kernel message buffers) or base64 (WebSocket). */
function toFloats(view: SeriesValues): Float64Array {
  if (!view) return new Float64Array(0);
  if (view instanceof Float64Array) return view;
  if (typeof view === 'string') {
    const bytes = Uint8Array.from(atob(view), c => c.charCodeAt(0));
    return new Float64Array(bytes.buffer);
  }
  const buffer = view.buffer.slice(view.byteOffset, view.byteOffset + view.byteLength);
  return new Float64Array(buffer);
}

function h(tag: string, cls?: string, html?: string): HTMLElement {
  const el = document.createElement(tag);
  if (cls) el.className = cls;
  if (html !== undefined) el.innerHTML = html;
  return el;
}

interface ISegmented extends HTMLElement {
  set(value: string): void;
}

function segmented(name: string, options: Array<[string, string]>, onPick: (value: string) => void): ISegmented {
  const el = h('span', 'jt-segmented') as ISegmented;
  el.dataset.testid = `jt-opt-${name}`;
  for (const [value, label] of options) {
    const b = h('button', 'jt-seg', escapeHtml(label)) as HTMLButtonElement;
    b.type = 'button';
    b.dataset.value = value;
    b.addEventListener("click", () => onPick(value));
    el.append(b);
  }
  el.set = (value: string) => {
    for (const b of el.querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.value === value));
  };
  return el;
}

/** The Metrics section of the run view under ``root``; ``view.logY`` is the y scale, shared
 * by the views of one widget. */
export class MetricsSection {
  private charts = new Map<string, { card: HTMLElement; chart: LineChart }>();
  private chipsBox: HTMLElement;
  private xCtl: ISegmented;
  private aggCtl: ISegmented;
  private yCtl: ISegmented;

  constructor(private root: HTMLElement, private model: IViewModel<IRunTraits>, private view: { logY: boolean }) {
    this.xCtl = segmented('x', [['step', 'Step'], ['time', 'Wall time']], v => this.setOption('x', v));
    this.aggCtl = segmented('agg', [['ranks', 'Per rank'], ['mean', 'Mean']], v => this.setOption('agg', v));
    this.yCtl = segmented('y', [['linear', 'Linear'], ['log', 'Log']], v => {
      view.logY = v === 'log';
      this.yCtl.set(v);
      this.drawCharts();
    });
    this.$('.jt-chart-controls').append(this.xCtl, this.aggCtl, this.yCtl);
    // Chips are kept across updates, and so are the elements inside them (only their text
    // and state change): Chromium fires no click once the element pressed on has left the
    // page, so a click whose press and release straddle an update would be lost.
    // An update can also move the chip pressed on from under a pointer that has not moved
    // (a value above grows or shrinks): the release then lands elsewhere in the chips, and the
    // click goes to the chips' box. A release where the press was still toggles that chip.
    this.chipsBox = this.$('[data-testid=jt-metric-chips]');
    let pressed: { chip: HTMLElement; x: number; y: number } | null = null;
    this.chipsBox.addEventListener('pointerdown', event => {
      const chip = (event.target as HTMLElement).closest('button.jt-metric-chip') as HTMLElement | null;
      pressed = chip && event.button === 0 ? { chip, x: event.clientX, y: event.clientY } : null;
    });
    this.chipsBox.addEventListener('click', event => {
      const still = pressed && Math.hypot(event.clientX - pressed.x, event.clientY - pressed.y) <= 4;
      const chip =
        ((event.target as HTMLElement).closest('button.jt-metric-chip') as HTMLElement | null) ??
        (still && pressed?.chip.isConnected ? pressed.chip : null);
      pressed = null;
      if (!chip) return;
      const names = (model.get('metrics') || []).map(m => m.name);
      const next = this.selectedMetrics();
      const name = chip.dataset.metric as string;
      if (next.has(name)) next.delete(name);
      else next.add(name);
      this.setOption('selected', names.filter(n => next.has(n)));
      this.renderChips();
    });
  }

  /** Draw what the model has now. */
  render(): void {
    this.renderChips();
    this.drawCharts();
  }

  destroy(): void {
    for (const { chart } of this.charts.values()) chart.destroy();
  }

  private $(sel: string): HTMLElement {
    return this.root.querySelector(sel) as HTMLElement;
  }

  private setOption(key: string, value: unknown): void {
    const opts = { ...(this.model.get('chart_options') || {}), [key]: value };
    this.model.set('chart_options', opts);
    this.model.save_changes();
  }

  /** The metrics shown: the user's last choice, which the feeder's charts may not have
   * caught up with yet; until there is one, the feeder's default. */
  private selectedMetrics(): Set<string> {
    const chosen = this.model.get('chart_options')?.selected;
    return new Set(Array.isArray(chosen) ? chosen : this.model.get('charts')?.selected || []);
  }

  private renderChips(): void {
    const selected = this.selectedMetrics();
    const metrics = this.model.get('metrics') || [];
    const have = [...this.chipsBox.querySelectorAll('button.jt-metric-chip')].map(b => (b as HTMLElement).dataset.metric);
    const names = metrics.map(m => m.name);
    if (have.join('\u0000') !== names.join('\u0000')) {
      const chipOf = (name: string): HTMLElement => {
        const b = h('button', 'jt-chip jt-metric-chip');
        b.setAttribute('type', 'button');
        b.dataset.metric = name;
        b.append(name, ' ', h('b'), ' ', h('span', 'jt-chip-who'));
        return b;
      };
      // a metric logged for the first time comes last: the chips there are kept
      if (have.every((name, k) => name === names[k])) this.chipsBox.append(...names.slice(have.length).map(chipOf));
      else this.chipsBox.replaceChildren(...names.map(chipOf));
    }
    const mode: ChartMode = this.model.get('chart_options')?.agg === 'mean' ? 'mean' : 'ranks';
    const setText = (el: Element, text: string): void => {
      if (el.textContent !== text) el.textContent = text;
    };
    metrics.forEach((m, k) => {
      const b = this.chipsBox.children[k] as HTMLElement;
      const chip = chipParts(m, mode);
      setText(b.querySelector('b') as HTMLElement, chip.value);
      setText(b.querySelector('.jt-chip-who') as HTMLElement, chip.who);
      b.title = chip.title;
      b.classList.toggle('jt-on', selected.has(m.name));
    });
    this.renderTexts();
    const note = this.$('.jt-metrics-note');
    const loading = this.model.get('loading') ? ' · reading history…' : '';
    note.textContent = metrics.length ? `${selected.size} of ${metrics.length} shown${loading}` : `none logged yet — jt.log(step=…, loss=…)${loading}`;
    const opts = this.model.get('chart_options') || {};
    this.xCtl.set(opts.x || 'step');
    this.aggCtl.set(opts.agg || 'ranks');
    this.yCtl.set(this.view.logY ? 'log' : 'linear');
  }

  private renderTexts(): void {
    // Text metrics (jt.log(phase="train")) are not charted: their last value on each rank.
    const texts: { [name: string]: { [rank: string]: string } } = this.model.get('texts') || {};
    const table = this.$('[data-testid=jt-text-metrics]');
    const names = Object.keys(texts);
    table.hidden = !names.length;
    const html = names.map(name => `<tr data-metric="${escapeHtml(name)}"><th>${escapeHtml(name)} <span class="jt-muted">(text, not charted)</span></th>${Object.entries(texts[name]).map(([rank, value]) => `<td><span class="jt-muted">rank ${escapeHtml(rank)}</span> ${escapeHtml(value)}</td>`).join('')}</tr>`).join('');
    if (table.innerHTML !== html) table.innerHTML = html;
  }

  private drawCharts(): void {
    const payload = this.model.get('charts') || {};
    const data = payload.charts || {};
    const area = this.$('[data-testid=jt-charts]');
    // on wall time, a point without an attempt of its own is of the attempt started by then
    const state = this.model.get('state') || {};
    const attempts = state.attempts || [];
    const starts = payload.x === 'time' && attempts.length > 1
      ? attempts.map(a => (a.start ?? 0) - (state.created ?? 0)) : [];
    for (const [name, entry] of this.charts) {
      if (!(name in data)) {
        entry.chart.destroy();
        entry.card.remove();
        this.charts.delete(name);
      }
    }
    for (const name of payload.selected || []) {
      const chart = data[name];
      if (!chart) continue;
      let entry = this.charts.get(name);
      if (!entry) {
        const card = h('div', 'jt-chart-card');
        card.dataset.metric = name;
        card.innerHTML = `<div class="jt-chart-head"><span class="jt-chart-title">${escapeHtml(name)}</span><span class="jt-chart-stats"></span></div><div class="jt-chart-legend"></div><div class="jt-chart-area"></div><div class="jt-chart-foot jt-muted"></div>`;
        area.append(card);
        entry = { card, chart: new LineChart(card.querySelector('.jt-chart-area') as HTMLElement) };
        this.charts.set(name, entry);
      }
      const series = splitAttempts(chart.series.map((s, k) => {
        const x = toFloats(s.x);
        return {
          label: s.label,
          color: PALETTE[(s.rank ?? k) % PALETTE.length],
          x,
          y: toFloats(s.y),
          attempt: s.attempts?.length ? attemptOfPoints(s.attempts, x.length) : undefined
        };
      }), starts);
      const colorOf = (s: IChartSeries, k: number): string => PALETTE[(s.rank ?? k) % PALETTE.length];
      const first: Partial<IChartSeries> = chart.series[0] || {};
      const part = (sel: string): HTMLElement => (entry as { card: HTMLElement }).card.querySelector(sel) as HTMLElement;
      const mean = first.rank === null;
      part('.jt-chart-stats').innerHTML = chartStatsHtml(chart.series, mean ? 'mean' : 'ranks', chart.ranks);
      part('.jt-chart-legend').innerHTML = chart.series.length > 1 || first.rank === null
        ? chart.series.map((s, k) => `<span class="jt-legend-item"><span class="jt-swatch" style="background:${colorOf(s, k)}"></span>${escapeHtml(s.label)} <b>${formatNumber(s.last)}</b></span>`).join('') : '';
      if (series.some(s => s.earlier)) {
        part('.jt-chart-legend').insertAdjacentHTML('beforeend', '<span class="jt-legend-item jt-muted" data-testid="jt-attempts-legend"><span class="jt-dash-swatch"></span>an earlier attempt</span>');
      }
      const total = chart.series.reduce((n, s) => n + (s.count || 0), 0);
      const drawn = chart.series.reduce((n, s) => n + s.points, 0);
      const perSeries = pointsText(chart.series.map(s => s.count ?? 0));
      const nonFinite = chart.series.reduce((n, s) => n + (s.non_finite || 0), 0);
      entry.chart.update({ series, xKind: payload.x === 'time' ? 'time' : 'step', logY: this.view.logY });
      entry.chart.canvas.dataset.count = String(total);
      const nonPositive = Number(entry.chart.canvas.dataset.nonPositive || 0);
      const thinned = drawn < total;
      part('.jt-chart-foot').textContent = perSeries +
        (nonFinite ? ` · ${nonFinite.toLocaleString()} NaN/inf (×, not drawn)` : '') +
        (nonPositive ? ` · ${thinned ? '' : `${nonPositive.toLocaleString()} `}value${nonPositive === 1 && !thinned ? '' : 's'} ≤ 0 (×, not drawn on a log scale)` : '') +
        (thinned ? ` · ${drawn.toLocaleString()} drawn (min/max per bucket)` : '') +
        (chart.ranks > chart.series.length && first.rank !== null ? ` · first ${chart.series.length} of ${chart.ranks} ranks` : '');
    }
    const order: string[] = (payload.selected || []).filter((n: string) => this.charts.has(n));
    for (const n of order) area.append((this.charts.get(n) as { card: HTMLElement }).card);
  }
}
