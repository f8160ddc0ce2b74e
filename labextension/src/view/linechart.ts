/**
 * One metric's chart in the run view, drawn by uPlot: one line per series (a rank, or the
 * mean), against step or wall time, linear or log y, a hover read-out, responsive width,
 * colours from the JupyterLab theme. The series come downsampled (min/max per bucket) from
 * the feeder; each may have its own x values, so they are aligned on the union of them.
 */
import uPlot from 'uplot';

import { escapeHtml } from './ansi.js';
import { PALETTE, distinctLabels, formatDuration, formatNumber, formatTick, integerTicks, logTicks, niceTicks, timeTicks } from './chart.js';
import { type ISeries, alignSeries, undrawnMarks } from './series';
import { onThemeChange } from './theme';

export type { ISeries } from './series';

export interface IChartSpec {
  series: ISeries[];
  xKind: 'step' | 'time';
  logY: boolean;
  /** The x range drawn, when charts side by side share one; else the data's. */
  xRange?: [number, number];
}

/** A chart's y axis where its figure has a unit: its ticks, their labels, its width. */
export interface IChartOptions {
  height?: number;
  testid?: string;
  ySplits?: (min: number, max: number) => number[];
  yLabels?: (ticks: number[]) => string[];
  ySize?: number;
}

export function cssVar(el: Element, name: string, fallback: string): string {
  return getComputedStyle(el).getPropertyValue(name).trim() || fallback;
}

/** The theme's look of a chart's axes, read from the view's own colours (``--jt-muted`` and
 * ``--jt-border``, which follow the JupyterLab theme) when the chart is drawn, and again
 * when the theme changes. */
export function axisStyle(el: Element): { fg: string; grid: string; font: string; axis: uPlot.Axis } {
  const fg = cssVar(el, '--jt-muted', cssVar(el, '--jp-ui-font-color2', '#616161'));
  const grid = cssVar(el, '--jt-border', cssVar(el, '--jp-border-color2', '#e0e0e0'));
  const font = `11px ${cssVar(el, '--jp-ui-font-family', 'system-ui, sans-serif')}`;
  return { fg, grid, font, axis: { stroke: fg, font, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1, size: 4 } } };
}

/** Note on a chart's canvas the colours it was drawn in (tests read them). */
export function markStyle(canvas: HTMLCanvasElement, style: { fg: string; grid: string }): void {
  canvas.dataset.axisColor = style.fg;
  canvas.dataset.gridColor = style.grid;
}

/** Put a chart's hover box beside the cursor, on the side with more room. */
export function placeTip(tip: HTMLElement, u: uPlot, container: HTMLElement): void {
  const over = u.over.getBoundingClientRect();
  const box = container.getBoundingClientRect();
  const cursor = u.cursor.left || 0;
  const left = over.left - box.left + cursor;
  const flip = cursor > over.width / 2;
  tip.style.left = flip ? '' : `${left + 12}px`;
  tip.style.right = flip ? `${box.width - left + 12}px` : '';
  tip.style.top = `${over.top - box.top + 4}px`;
}

/**
 * The width a chart is drawn at: its container's, as laid out. While the container is not
 * laid out (JupyterLab hides its whole shell for a frame as a theme is applied, when every
 * chart redraws in the new colours), the width it last had: a chart sized in that frame
 * would be drawn at its minimum width and stay so, as the container comes back at the
 * width its ResizeObserver last reported, which then reports nothing. ``onResize`` runs
 * when the container changes to another width it can be drawn at, never to none.
 */
export class ContainerWidth {
  private last = 0;
  private observer: ResizeObserver;

  constructor(private el: HTMLElement, onResize: () => void) {
    this.observer = new ResizeObserver(() => {
      const before = this.last;
      if (this.get() && this.last !== before) onResize();
    });
    this.observer.observe(el);
  }

  /** The container's width now, or the last one it had while it is not laid out (0 if
   * it never was). */
  get(): number {
    const width = Math.floor(this.el.clientWidth);
    if (width > 0) this.last = width;
    return this.last;
  }

  disconnect(): void {
    this.observer.disconnect();
  }
}

/** ``color`` (``#rrggbb``) at half its opacity; another colour as it is. */
export function faded(color: string): string {
  return /^#[0-9a-f]{6}$/i.test(color) ? `${color}80` : color;
}

/** The value of ``column`` at ``idx``, or at the nearest index that has one. */
function nearest(column: Array<number | null | undefined>, idx: number): number | null {
  for (let d = 0; d < column.length; d++) {
    const before = column[idx - d];
    const after = column[idx + d];
    if (typeof before === 'number') return before;
    if (typeof after === 'number') return after;
  }
  return null;
}

export class LineChart {
  readonly tip: HTMLElement;
  private plot: uPlot | null = null;
  private shape = '';
  private spec: IChartSpec = { series: [], xKind: 'step', logY: false };
  private empty: HTMLElement;
  private width: ContainerWidth;
  private colors: string[] = [];
  private marks: number[][] = []; // per series: the x of each value not drawn (NaN, ±inf, ≤ 0 on log)
  private labels: string[] = [];
  private spans: Array<[number, number]> = []; // per series: its first and last x
  private style = { fg: '', grid: '' };
  private unwatchTheme: () => void;

  constructor(private container: HTMLElement, private options: IChartOptions = {}) {
    this.empty = document.createElement('div');
    this.empty.className = 'jt-chart-empty jt-muted';
    this.empty.textContent = 'waiting for data…';
    this.tip = document.createElement('div');
    this.tip.className = 'jt-chart-tip';
    this.tip.hidden = true;
    container.append(this.empty, this.tip);
    this.width = new ContainerWidth(container, () => this.plot?.setSize(this.size()));
    this.unwatchTheme = onThemeChange(() => this.restyle());
  }

  /** Draw again in the theme's colours, if they changed since the chart was drawn. */
  restyle(): void {
    if (!this.plot) return;
    const { fg, grid } = axisStyle(this.container);
    if (fg === this.style.fg && grid === this.style.grid) return;
    this.shape = '';
    this.update(this.spec);
  }

  /** The canvas drawn on (tests read its pixels and data-* attributes). */
  get canvas(): HTMLCanvasElement {
    return this.plot ? this.plot.ctx.canvas : (this.empty as unknown as HTMLCanvasElement);
  }

  update(spec: IChartSpec): void {
    this.spec = spec;
    const shown = spec.series.filter(s => s.x.length);
    this.empty.hidden = shown.length > 0;
    if (!shown.length) {
      this.plot?.destroy();
      this.plot = null;
      this.shape = '';
      return;
    }
    const data = alignSeries(shown, spec.logY);
    this.spans = shown.map(s => [Math.min(...s.x), Math.max(...s.x)]);
    const undrawn = undrawnMarks(shown, spec.logY);
    this.marks = undrawn.marks;
    const shape = JSON.stringify([shown.map(s => [s.label, s.color, !!s.earlier]), spec.xKind, spec.logY]);
    if (!this.plot || shape !== this.shape) {
      this.plot?.destroy();
      this.plot = new uPlot(this.plotOptions(shown), data, this.container);
      this.container.append(this.tip);
      this.shape = shape;
      markStyle(this.plot.ctx.canvas, this.style);
    } else {
      this.plot.setData(data);
    }
    const canvas = this.plot.ctx.canvas;
    canvas.dataset.testid = this.options.testid || 'jt-chart';
    canvas.dataset.points = String(shown.reduce((n, s) => n + s.x.length, 0));
    canvas.dataset.x = spec.xKind;
    canvas.dataset.series = String(shown.length);
    canvas.dataset.nonFinite = String(undrawn.nonFinite);
    canvas.dataset.nonPositive = String(undrawn.nonPositive);
  }

  destroy(): void {
    this.width.disconnect();
    this.unwatchTheme();
    this.plot?.destroy();
    this.empty.remove();
    this.tip.remove();
  }

  private size(): { width: number; height: number } {
    return { width: Math.max(160, this.width.get()), height: this.options.height || 190 };
  }

  private plotOptions(series: ISeries[]): uPlot.Options {
    const { axis, fg, grid } = axisStyle(this.container);
    this.style = { fg, grid };
    const { xKind, logY } = this.spec;
    const { ySplits, yLabels } = this.options;
    const yLabel = (v: number): string => (logY ? formatNumber(Number(v.toPrecision(6))) : formatTick(v));
    const labelsOf = (ticks: number[]): string[] => (yLabels ? yLabels(ticks) : distinctLabels(ticks, yLabel));
    const xSplits = (u: uPlot, _i: number, min: number, max: number): number[] => {
      const count = Math.max(1, Math.floor(u.bbox.width / devicePixelRatio / 70));
      // steps are whole numbers: never a tick at step 2.5; times are whole seconds a clock reads
      return xKind === 'step' ? integerTicks(min, max, count) : timeTicks(min, max, count);
    };
    this.colors = series.map((s, k) => s.color || PALETTE[k % PALETTE.length]);
    this.labels = series.map(s => escapeHtml(s.label));
    return {
      ...this.size(),
      legend: { show: false },
      cursor: { drag: { x: false, y: false, setScale: false }, points: { size: 6 } },
      scales: {
        x: { time: false, range: (_u, min, max) => this.spec.xRange ?? [min, max] },
        y: logY
          ? { distr: 3, range: (_u, min, max) => [min / 1.1, max * 1.1] }
          : { range: (_u, min, max) => (min === max ? [min - (Math.abs(min) || 1) * 0.05, max + (Math.abs(max) || 1) * 0.05] : [min - (max - min) * 0.06, max + (max - min) * 0.06]) }
      },
      axes: [
        {
          ...axis,
          space: 60,
          splits: xSplits,
          values: (u, splits) => {
            const labels = xKind === 'time' ? (splits as number[]).map(formatDuration) : distinctLabels(splits as number[], formatTick);
            u.ctx.canvas.dataset.xTicks = labels.filter(Boolean).join(' ');
            return labels;
          }
        },
        {
          ...axis,
          size: this.options.ySize ?? 50,
          filter: (_u, splits) => splits,
          splits: (_u, _i, min, max) => (logY ? logTicks(Math.log10(min), Math.log10(max), 4).map(t => 10 ** t) : ySplits ? ySplits(min, max) : niceTicks(min, max, 4)),
          values: (u, splits) => {
            const labels = labelsOf(splits as number[]);
            u.ctx.canvas.dataset.yTicks = labels.filter(Boolean).join(' ');
            return labels;
          }
        }
      ],
      series: [{}, ...series.map((s, k) => ({
        label: s.label,
        // an attempt before the last: faded and dashed, under the one that went on
        stroke: s.earlier ? faded(this.colors[k]) : this.colors[k],
        dash: s.earlier ? [5, 4] : undefined,
        width: 1.5,
        spanGaps: false,
        points: { show: s.x.length === 1 }
      }))],
      hooks: {
        setCursor: [u => this.showTip(u)],
        draw: [
          u => this.drawMarks(u),
          u => {
            u.ctx.canvas.dataset.xRange = `${u.scales.x.min} ${u.scales.x.max}`; // tests read it
          }
        ]
      }
    };
  }

  /** NaN and ±inf are facts, not gaps to hide: a cross under the line where each one was. */
  private drawMarks(u: uPlot): void {
    const ctx = u.ctx;
    const { top, height } = u.bbox;
    const size = 4 * devicePixelRatio;
    ctx.save();
    ctx.lineWidth = 1.5 * devicePixelRatio;
    this.marks.forEach((xs, k) => {
      ctx.strokeStyle = this.colors[k];
      for (const x of xs) {
        const px = u.valToPos(x, 'x', true);
        const py = top + height - size - 1;
        ctx.beginPath();
        ctx.moveTo(px - size, py - size);
        ctx.lineTo(px + size, py + size);
        ctx.moveTo(px + size, py - size);
        ctx.lineTo(px - size, py + size);
        ctx.stroke();
      }
    });
    ctx.restore();
  }

  /** The values nearest the cursor, in a box beside it. */
  private showTip(u: uPlot): void {
    const idx = u.cursor.idx;
    if (idx === null || idx === undefined || u.cursor.left === undefined || u.cursor.left < 0) {
      this.tip.hidden = true;
      return;
    }
    const rows: string[] = [];
    const x = u.data[0][idx];
    this.colors.forEach((color, k) => {
      // a series says nothing where it has no points (an attempt that had ended, or not begun)
      const [first, last] = this.spans[k] ?? [x, x];
      if (x < first || x > last) return;
      const value = nearest(u.data[k + 1] as Array<number | null | undefined>, idx);
      if (value !== null) {
        rows.push(`<div><span class="jt-swatch" style="background:${color}"></span>${this.labels[k]}: <b>${formatNumber(value)}</b></div>`);
      }
    });
    const head = this.spec.xKind === 'time' ? `t = ${formatDuration(x)}` : `step ${formatNumber(x)}`;
    this.tip.innerHTML = `<div class="jt-tip-head">${head}</div>${rows.join('')}`;
    this.tip.hidden = false;
    placeTip(this.tip, u, this.container);
  }
}
