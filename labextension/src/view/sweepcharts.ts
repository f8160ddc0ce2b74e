/**
 * The sweep view's two charts. ``BestChart`` (uPlot): the best objective so far against the
 * number of trials completed, a step line, with each completed trial's own objective as a
 * dot. ``ParallelPlot`` (SVG): one axis per swept param and one for the objective, a line
 * per trial coloured by its objective (pruned, failed and running trials dashed); hovering a
 * line names the trial, clicking it opens the trial. Both follow the JupyterLab theme and
 * the width of their card.
 */
import uPlot from 'uplot';

import { formatNumber, integerTicks, niceTicks } from './chart.js';
import { ContainerWidth, axisStyle, cssVar, markStyle, placeTip } from './linechart';
import { onThemeChange } from './theme';
import { type IChartData, type IPlotLayout, parallelLayout } from './sweepformat';

const SVG = 'http://www.w3.org/2000/svg';

type BestPoint = { n: number; number: number; objective: number; best: number };

export class BestChart {
  private plot: uPlot | null = null;
  private pending: IChartData | null = null;
  private points: BestPoint[] = [];
  private metric = '';
  private empty: HTMLElement;
  private tip: HTMLElement;
  private width: ContainerWidth;
  private data: IChartData = {};
  private style = { fg: '', grid: '' };
  private unwatchTheme: () => void;

  constructor(private container: HTMLElement, private height = 200) {
    this.empty = document.createElement('div');
    this.empty.className = 'jt-chart-empty jt-muted';
    this.empty.style.height = `${height}px`;
    this.empty.textContent = 'waiting for the first completed trial…';
    this.tip = document.createElement('div');
    this.tip.className = 'jt-chart-tip';
    this.tip.hidden = true;
    container.append(this.empty, this.tip);
    this.width = new ContainerWidth(container, () => {
      if (this.pending) this.update(this.pending);
      else this.plot?.setSize(this.size());
    });
    this.unwatchTheme = onThemeChange(() => this.restyle());
  }

  /** Draw again in the theme's colours, if they changed since the chart was drawn. */
  restyle(): void {
    if (!this.plot) return;
    const { fg, grid } = axisStyle(this.container);
    if (fg === this.style.fg && grid === this.style.grid) return;
    this.plot.destroy();
    this.plot = null;
    this.update(this.data);
  }

  /** What the chart says while it has no point to draw. */
  setEmptyText(text: string): void {
    if (this.empty.textContent !== text) this.empty.textContent = text;
  }

  update(data: IChartData): void {
    this.data = data;
    if (!this.container.isConnected) {
      this.pending = data; // drawn once the card is in the page, in the theme's colours
      return;
    }
    this.pending = null;
    const points = data.best || [];
    this.points = points;
    this.metric = data.metric || 'objective';
    this.empty.hidden = points.length > 0;
    if (!points.length) {
      this.plot?.destroy();
      this.plot = null;
      return;
    }
    const aligned: uPlot.AlignedData = [points.map(p => p.n), points.map(p => p.best), points.map(p => p.objective)];
    if (!this.plot) {
      this.plot = new uPlot(this.options(), aligned, this.container);
      this.container.append(this.tip);
      markStyle(this.plot.ctx.canvas, this.style);
    } else {
      this.plot.setData(aligned);
    }
    const canvas = this.plot.ctx.canvas;
    canvas.dataset.testid = 'jt-sweep-best-canvas';
    canvas.dataset.points = String(points.length);
    canvas.dataset.best = String(points[points.length - 1].best);
  }

  destroy(): void {
    this.width.disconnect();
    this.unwatchTheme();
    this.plot?.destroy();
    this.empty.remove();
    this.tip.remove();
  }

  private size(): { width: number; height: number } {
    return { width: Math.max(200, this.width.get()), height: this.height };
  }

  private options(): uPlot.Options {
    const el = this.container;
    const { fg, grid, font, axis } = axisStyle(el);
    this.style = { fg, grid };
    const accent = cssVar(el, '--jp-brand-color1', '#1976d2');
    const pad = (min: number, max: number): uPlot.Range.MinMax =>
      min === max ? [min - (Math.abs(min) || 1) * 0.05, max + (Math.abs(max) || 1) * 0.05] : [min - (max - min) * 0.08, max + (max - min) * 0.08];
    return {
      ...this.size(),
      legend: { show: false },
      cursor: { drag: { x: false, y: false, setScale: false }, points: { size: 7 } },
      scales: { x: { time: false, range: (_u, min, max) => [Math.min(0.5, min - 0.5), max + 0.5] }, y: { range: (_u, min, max) => pad(min, max) } },
      axes: [
        { ...axis, space: 40, label: 'trials completed', labelSize: 18, labelFont: font, splits: (_u, _i, min, max) => integerTicks(min, max, 6), values: (_u, splits) => splits.map(v => formatNumber(v)) },
        { ...axis, size: 54, splits: (_u, _i, min, max) => niceTicks(min, max, 4), values: (_u, splits) => splits.map(v => formatNumber(Number(v.toPrecision(4)))) }
      ],
      series: [
        {},
        { label: 'best so far', stroke: accent, width: 2, paths: uPlot.paths.stepped?.({ align: 1 }), points: { show: false } },
        { label: this.metric, stroke: fg, width: 0, paths: () => null, points: { show: true, size: 6, width: 1, stroke: fg, fill: cssVar(el, '--jp-layout-color1', '#fff') } }
      ],
      hooks: { setCursor: [u => this.showTip(u)] }
    };
  }

  private showTip(u: uPlot): void {
    const idx = u.cursor.idx;
    const point = idx === null || idx === undefined ? undefined : this.points[idx];
    if (!point || u.cursor.left === undefined || u.cursor.left < 0) {
      this.tip.hidden = true;
      return;
    }
    this.tip.innerHTML = `<div class="jt-tip-head">after ${point.n} trial${point.n === 1 ? '' : 's'}</div>` +
      `<div>best so far: <b>${formatNumber(point.best)}</b></div><div>trial #${point.number}: ${formatNumber(point.objective)}</div>`;
    this.tip.hidden = false;
    placeTip(this.tip, u, this.container);
  }
}

export interface IParallelOptions {
  height?: number;
  /** A line was clicked: the trial's number. */
  onPick?: (trial: number) => void;
  /** Text of the tip for a trial's line (its params and objective). */
  describe?: (trial: number) => string;
}

export class ParallelPlot {
  readonly svg: SVGSVGElement;
  private data: IChartData = {};
  private best: number | null = null;
  private highlighted: number | null = null;
  private tip: HTMLElement;
  private empty: HTMLElement;
  private width: ContainerWidth;

  constructor(private container: HTMLElement, private options: IParallelOptions = {}) {
    this.svg = document.createElementNS(SVG, 'svg');
    this.svg.classList.add('jt-parallel-svg');
    this.svg.dataset.testid = 'jt-sweep-parallel-svg';
    this.empty = document.createElement('div');
    this.empty.className = 'jt-chart-empty jt-muted';
    this.empty.style.height = `${this.height}px`;
    this.empty.textContent = 'waiting for the first trial…';
    this.tip = document.createElement('div');
    this.tip.className = 'jt-chart-tip';
    this.tip.hidden = true;
    container.append(this.empty, this.svg, this.tip);
    this.svg.addEventListener('mouseover', event => this.hover(event as MouseEvent));
    this.svg.addEventListener('mouseleave', () => this.hover(null));
    this.svg.addEventListener('click', event => {
      const number = this.lineAt(event.target);
      if (number !== null) this.options.onPick?.(number);
    });
    this.width = new ContainerWidth(container, () => this.draw());
  }

  private get height(): number {
    return this.options.height || 200;
  }

  update(data: IChartData, best: number | null): void {
    this.data = data;
    this.best = best;
    this.draw();
  }

  /** Bring trial ``number``'s line forward (a table row is hovered); null for none. */
  highlight(number: number | null): void {
    this.highlighted = number;
    this.svg.querySelectorAll('path.jt-pc-line').forEach(p => {
      p.classList.toggle('jt-pc-hot', Number((p as SVGElement).dataset.number) === number);
    });
    this.svg.classList.toggle('jt-pc-hovering', number !== null);
  }

  destroy(): void {
    this.width.disconnect();
    this.svg.remove();
    this.empty.remove();
    this.tip.remove();
  }

  private draw(): void {
    const lines = this.data.lines || [];
    this.empty.hidden = lines.length > 0;
    this.svg.style.display = lines.length ? '' : 'none';
    if (!lines.length) return;
    const width = Math.max(240, this.width.get());
    const height = this.height;
    const layout = parallelLayout(this.data, width, height, this.best);
    this.svg.setAttribute('width', String(width));
    this.svg.setAttribute('height', String(height));
    this.svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    this.svg.innerHTML = this.markup(layout);
    this.svg.dataset.lines = String(layout.lines.filter(l => l.d).length);
    this.svg.dataset.axes = String(layout.axes.length);
    if (this.highlighted !== null) this.highlight(this.highlighted);
  }

  private markup(layout: IPlotLayout): string {
    const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
    const axes = layout.axes.map((axis, i) => {
      const last = i === layout.axes.length - 1;
      const out = axis.side === 'left' ? -1 : 1;
      const ticks = axis.ticks.map(t => `<g class="jt-pc-tick"><line x1="${axis.x}" x2="${axis.x + 3 * out}" y1="${t.y}" y2="${t.y}"/>` +
        `<text x="${axis.x + 5 * out}" y="${t.y}" dy="0.32em" text-anchor="${out < 0 ? 'end' : 'start'}">${esc(t.label)}</text></g>`).join('');
      return `<g class="jt-pc-axis${last ? ' jt-pc-objective' : ''}" data-axis="${esc(axis.name)}"><line class="jt-pc-rule" x1="${axis.x}" x2="${axis.x}" y1="${layout.top}" y2="${layout.bottom}"/>` +
        `<text class="jt-pc-name" x="${axis.x}" y="${layout.top - 8}" text-anchor="middle">${esc(axis.name)}</text>${ticks}</g>`;
    }).join('');
    const drawn = layout.lines.filter(l => l.d);
    const lines = drawn.map(l => {
      const cls = `jt-pc-line jt-pc-${l.color ? 'done' : l.status}${l.best ? ' jt-pc-best' : ''}`;
      const stroke = l.color ? ` style="stroke:${l.color}"` : '';
      return `<path class="${cls}" data-number="${l.number}" data-status="${esc(l.status)}" d="${l.d}"${stroke}/>`;
    }).join('');
    // a value reported without being an objective: a hollow mark on the objective axis
    const marks = drawn.filter(l => l.reported).map(l => {
      const at = l.reported as { x: number; y: number };
      return `<circle class="jt-pc-reported jt-pc-${esc(l.status)}" data-number="${l.number}" cx="${at.x.toFixed(1)}" cy="${at.y.toFixed(1)}" r="4"/>`;
    }).join('');
    // wide, invisible copies on top take the pointer, so a thin line is easy to hover
    const hits = drawn.map(l => `<path class="jt-pc-hit" data-number="${l.number}" d="${l.d}"/>`).join('');
    return `${axes}<g class="jt-pc-lines">${lines}${marks}</g><g class="jt-pc-hits">${hits}</g>`;
  }

  private lineAt(target: EventTarget | null): number | null {
    const el = target as SVGElement | null;
    if (!el?.classList || !(el.classList.contains('jt-pc-line') || el.classList.contains('jt-pc-hit'))) return null;
    return Number(el.dataset.number);
  }

  private hover(event: MouseEvent | null): void {
    const number = event ? this.lineAt(event.target) : null;
    this.highlight(number);
    if (number === null || !event) {
      this.tip.hidden = true;
      return;
    }
    this.tip.innerHTML = this.options.describe ? this.options.describe(number) : `trial #${number}`;
    this.tip.hidden = false;
    const box = this.container.getBoundingClientRect();
    const x = event.clientX - box.left;
    const flip = x > box.width / 2;
    this.tip.style.left = flip ? '' : `${x + 12}px`;
    this.tip.style.right = flip ? `${box.width - x + 12}px` : '';
    this.tip.style.top = `${Math.max(0, event.clientY - box.top - 10)}px`;
  }
}
