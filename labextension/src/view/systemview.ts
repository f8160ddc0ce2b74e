/**
 * The run view's System section: what each rank's hardware does (rankside/observe/system.py samples
 * it, views/system_view.py sends it). A table of each rank's newest figures, with a rank
 * whose GPU sits idle while the others' work marked, and a compact chart per figure with a
 * line per rank. Hidden until a rank has reported a figure.
 */
import { PALETTE, distinctLabels, formatBytes, formatNumber, formatTick, integerTicks, niceTicks } from './chart.js';
import { escapeHtml } from './ansi.js';
import { LineChart } from './linechart';
import type { IRunTraits, ISystemChart, ISystemPayload } from './runtraits';
import type { IViewModel } from './viewmodel';

type Figures = { [name: string]: number };

/** A figure as the table shows it: bytes in binary units, percentages and watts whole. */
export function formatFigure(name: string, value: number | undefined): string {
  if (value === undefined || value === null || !Number.isFinite(value)) return '–';
  if (name.endsWith('_bytes')) return formatBytes(value);
  if (name.endsWith('_bytes_per_s')) return `${formatBytes(value)}/s`;
  if (name.endsWith('_percent')) return `${Math.round(value)}%`;
  if (name.endsWith('_watts')) return `${Math.round(value)} W`;
  if (name.endsWith('_c')) return `${Math.round(value)} °C`;
  if (name.endsWith('_mhz')) return `${Math.round(value)} MHz`;
  return formatNumber(value);
}

const BYTE_UNITS: Array<[string, number]> = [['TiB', 2 ** 40], ['GiB', 2 ** 30], ['MiB', 2 ** 20], ['KiB', 2 ** 10], ['B', 1]];

/** The unit a byte axis from ``min`` to ``max`` is labelled in (the table's, in 1024s). */
export function byteUnit(min: number, max: number): [string, number] {
  const top = Math.max(Math.abs(min), Math.abs(max));
  return BYTE_UNITS.find(([, scale]) => top >= scale) ?? ['B', 1];
}

/** Ticks of a byte axis: round numbers of its unit, whole bytes below a KiB. */
export function byteTicks(min: number, max: number, count = 4): number[] {
  const [, scale] = byteUnit(min, max);
  if (scale === 1) return integerTicks(min, max, count);
  return niceTicks(min / scale, max / scale, count).map(v => v * scale);
}

/** Labels of a byte axis's ticks, all in one unit: "0 KiB 2.5 KiB 5 KiB" (``/s`` after
 * each for a rate). */
export function byteLabels(ticks: number[], rate = false): string[] {
  if (!ticks.length) return [];
  const [unit, scale] = byteUnit(Math.min(...ticks), Math.max(...ticks));
  return distinctLabels(ticks.map(v => v / scale), v => String(Number(v.toPrecision(4)))).map(v => `${v} ${unit}${rate ? '/s' : ''}`);
}

/** How a System chart's y axis is ticked and labelled, for its figure's ``unit``: bytes
 * as the table shows them, a percentage or watts with its sign. */
export function yAxisOf(unit: string): { ySplits?: (min: number, max: number) => number[]; yLabels?: (ticks: number[]) => string[]; ySize?: number } {
  if (unit === 'bytes' || unit === 'bytes/s') return { ySplits: byteTicks, yLabels: ticks => byteLabels(ticks, unit === 'bytes/s'), ySize: 66 };
  if (unit === '%' || unit === 'W') return { yLabels: ticks => distinctLabels(ticks, formatTick).map(v => (unit === '%' ? `${v}%` : `${v} W`)) };
  return {};
}

/** The x range every System chart shares: the first to the last sample of any figure. */
export function sharedRange(charts: ISystemChart[]): [number, number] | undefined {
  const xs = charts.flatMap(c => c.series.flatMap(s => (s.x.length ? [s.x[0], s.x[s.x.length - 1]] : [])));
  return xs.length ? [Math.min(...xs), Math.max(...xs)] : undefined;
}

/** The table's columns: a rank's CPU and memory, and its GPU's where any rank has one. */
export function systemColumns(latest: { [rank: string]: Figures }): Array<[string, string, (f: Figures) => string]> {
  const gpu = Object.values(latest).some(f => 'gpu_index' in f);
  const columns: Array<[string, string, (f: Figures) => string]> = [
    ['cpu', 'CPU', f => formatFigure('cpu_percent', f.cpu_percent)],
    ['memory', 'memory', f => formatFigure('rss_bytes', f.rss_bytes)],
    ['node', 'node free', f => formatFigure('node_mem_available_bytes', f.node_mem_available_bytes)]
  ];
  const pair = (a: string, b: string) => (f: Figures) => (f[a] === undefined && f[b] === undefined ? '–' : `${formatFigure(a, f[a])} / ${formatFigure(b, f[b])}`);
  if (Object.values(latest).some(f => 'disk_read_bytes_per_s' in f)) {
    columns.push(['disk', 'disk read / write', pair('disk_read_bytes_per_s', 'disk_write_bytes_per_s')]);
  }
  if (Object.values(latest).some(f => 'node_net_rx_bytes_per_s' in f)) {
    columns.push(['network', 'node net in / out', pair('node_net_rx_bytes_per_s', 'node_net_tx_bytes_per_s')]);
  }
  if (gpu) {
    columns.push(
      ['gpu', 'GPU', f => ('gpu_index' in f ? String(f.gpu_index) : '–')],
      ['util', 'util', f => formatFigure('gpu_util_percent', f.gpu_util_percent)],
      ['gpu-memory', 'GPU memory', f => (f.gpu_mem_used_bytes === undefined ? '–' : `${formatBytes(f.gpu_mem_used_bytes)} / ${formatFigure('gpu_mem_total_bytes', f.gpu_mem_total_bytes)}`)],
      ['power', 'power', f => (f.gpu_power_watts === undefined ? '–' : formatFigure('gpu_power_watts', f.gpu_power_watts) + (f.gpu_power_limit_watts ? ` / ${formatFigure('gpu_power_limit_watts', f.gpu_power_limit_watts)}` : ''))],
      ['temp', 'temp', f => formatFigure('gpu_temp_c', f.gpu_temp_c)],
      ['clock', 'SM clock', f => formatFigure('gpu_sm_clock_mhz', f.gpu_sm_clock_mhz)]
    );
  }
  return columns;
}

export class SystemSection {
  private charts = new Map<string, { card: HTMLElement; chart: LineChart }>();
  private table: HTMLElement;
  private area: HTMLElement;
  private note: HTMLElement;
  private hints: HTMLElement;
  private html = '';

  constructor(private section: HTMLElement, private model: IViewModel<IRunTraits>) {
    this.table = section.querySelector('[data-testid=jt-system-table]') as HTMLElement;
    this.area = section.querySelector('[data-testid=jt-system-charts]') as HTMLElement;
    this.note = section.querySelector('.jt-system-note') as HTMLElement;
    this.hints = section.querySelector('[data-testid=jt-system-hints]') as HTMLElement;
  }

  render(): void {
    const payload: ISystemPayload = this.model.get('system') || { charts: [], latest: {}, idle: [], samples: 0 };
    const ranks = Object.keys(payload.latest || {}).sort((a, b) => Number(a) - Number(b));
    this.section.hidden = !ranks.length;
    if (!ranks.length) return;
    const idle = new Set((payload.idle || []).map(String));
    const notes = idle.size ? [`GPU idle on rank${idle.size > 1 ? 's' : ''} ${[...idle].join(', ')} while the others work`] : [];
    this.note.textContent = notes.join(' · ');
    this.note.classList.toggle('jt-warn-text', idle.size > 0);
    const hints = payload.hints || [];
    this.hints.hidden = !hints.length;
    const hintHtml = hints.map(h => `<div class="jt-system-hint">${escapeHtml(h)}</div>`).join('');
    if (this.hints.innerHTML !== hintHtml) this.hints.innerHTML = hintHtml;
    const columns = systemColumns(payload.latest);
    const head = `<tr><th>rank</th>${columns.map(([, label]) => `<th>${escapeHtml(label)}</th>`).join('')}</tr>`;
    const rows = ranks.map(rank => {
      const figures = payload.latest[rank];
      const cls = idle.has(rank) ? ' class="jt-gpu-idle" title="its GPU is idle while the other ranks\' GPUs work"' : '';
      return `<tr data-rank="${escapeHtml(rank)}"${cls}><td>${escapeHtml(rank)}</td>${columns.map(([key, , cell]) => `<td data-col="${key}">${escapeHtml(cell(figures))}</td>`).join('')}</tr>`;
    });
    const html = head + rows.join('');
    if (html !== this.html) {
      this.table.innerHTML = html;
      this.html = html;
    }
    this.drawCharts(payload);
  }

  destroy(): void {
    for (const { chart } of this.charts.values()) chart.destroy();
  }

  private drawCharts(payload: ISystemPayload): void {
    const xRange = sharedRange(payload.charts);
    const names = new Set(payload.charts.map(c => c.name));
    for (const [name, entry] of this.charts) {
      if (!names.has(name)) {
        entry.chart.destroy();
        entry.card.remove();
        this.charts.delete(name);
      }
    }
    for (const chart of payload.charts) {
      let entry = this.charts.get(chart.name);
      if (!entry) {
        const card = document.createElement('div');
        // classes and test ids of its own: the Metrics section's are the metrics' alone
        card.className = 'jt-system-card';
        card.dataset.figure = chart.name;
        card.innerHTML = `<div class="jt-chart-head"><span class="jt-system-title">${escapeHtml(chart.title)}</span><span class="jt-system-stats"></span></div><div class="jt-chart-area"></div>`;
        this.area.append(card);
        const area = card.querySelector('.jt-chart-area') as HTMLElement;
        entry = { card, chart: new LineChart(area, { height: 110, testid: 'jt-system-chart', ...yAxisOf(chart.unit) }) };
        this.charts.set(chart.name, entry);
      }
      const series = chart.series.map(s => ({
        label: `rank ${s.rank}`,
        color: PALETTE[s.rank % PALETTE.length],
        x: Float64Array.from(s.x),
        y: Float64Array.from(s.y)
      }));
      const last = chart.series.map(s => `<span class="jt-system-legend"><span class="jt-swatch" style="background:${PALETTE[s.rank % PALETTE.length]}"></span>rank ${s.rank} <b>${escapeHtml(formatFigure(chart.name, s.y[s.y.length - 1]))}</b></span>`);
      const stats = (entry.card.querySelector('.jt-system-stats') as HTMLElement);
      const more = chart.ranks > chart.series.length ? ` · first ${chart.series.length} of ${chart.ranks} ranks` : '';
      const html = last.join(' ') + more;
      if (stats.innerHTML !== html) stats.innerHTML = html;
      entry.chart.update({ series, xKind: 'time', logY: false, xRange });
    }
    for (const chart of payload.charts) this.area.append((this.charts.get(chart.name) as { card: HTMLElement }).card);
  }
}
