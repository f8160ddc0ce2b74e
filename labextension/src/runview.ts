/**
 * The main-area view of one run: header, stages, progress, failure banner, charts, logs.
 * A RunFeed follows the run (event stream, or polling where the stream fails); updates are
 * drawn at most every RENDER_MS, however fast they come.
 */

import { Widget } from '@lumino/widgets';

import { TrainerClient } from './api';
import { IFeedUpdate, RunFeed } from './feed';
import { formatDuration, IRunDetail, isTerminal, runDuration, stageDurations } from './model';
import { ansiToHtml, escapeHtml } from './shared/ansi.js';
import { LineChart, PALETTE } from './shared/chart.js';
import { LogView } from './shared/logview.js';

const RENDER_MS = 150;
const CLOCK_MS = 1000;
const MAX_LOG_LINES = 2000;

export class RunView extends Widget {
  private feed: RunFeed;
  private charts = new Map<string, LineChart>();
  private logView: LogView;
  private logSelection = 'all';
  private pendingLines: Array<[number, string]> = [];
  private chartsDirty = false;
  private renderTimer: number | undefined;
  private clock: number | undefined;
  private els: { [key: string]: HTMLElement } = {};

  constructor(private client: TrainerClient, readonly runId: string) {
    super();
    this.addClass('jt-run-view');
    this.addClass('jt-monitor');
    this.id = `jt-run-${runId}`;
    this.title.label = runId;
    this.title.closable = true;
    this.node.innerHTML = `
      <div class="jt-header">
        <span class="jt-status" data-testid="jt-status"></span>
        <span class="jt-title" data-testid="jt-title"></span>
        <span class="jt-spacer"></span>
        <button class="jt-cancel jp-Button" data-testid="jt-cancel">Cancel</button>
      </div>
      <div class="jt-meta" data-testid="jt-meta"></div>
      <div class="jt-stages" data-testid="jt-stages"></div>
      <div class="jt-progress" data-testid="jt-progress"><div class="jt-progress-bar"></div><span class="jt-progress-text"></span></div>
      <div class="jt-banner" data-testid="jt-banner" hidden></div>
      <div class="jt-charts" data-testid="jt-charts"></div>
      <div class="jt-logs"></div>`;
    for (const name of ['status', 'title', 'meta', 'stages', 'progress', 'banner', 'charts', 'cancel']) {
      this.els[name] = this.node.querySelector(`[data-testid="jt-${name}"]`) as HTMLElement;
    }
    this.els.cancel.onclick = () => void this.cancel();
    const onSelect = (selection: string): void => { this.logSelection = selection; };
    // The shared module is plain JS: its option types are inferred from defaults.
    this.logView = new LogView(this.node.querySelector('.jt-logs') as HTMLElement,
      { maxLines: MAX_LOG_LINES, onSelect } as any);
    this.feed = new RunFeed(client, runId, {
      onUpdate: update => this.onUpdate(update),
      onError: error => this.showBanner(`Cannot read run ${escapeHtml(this.runId)}: ${escapeHtml(String(error))}`)
    });
  }

  protected onAfterAttach(): void {
    if (this.feed.mode === 'starting') {
      void this.feed.start();
    }
    // Durations of a run that goes on advance even while nothing else changes.
    this.clock = window.setInterval(() => {
      if (this.feed.mode === 'stream' || this.feed.mode === 'poll') {
        this.onUpdate({ fresh: 0, lines: [] });
      }
    }, CLOCK_MS);
  }

  protected onBeforeDetach(): void {
    window.clearInterval(this.clock);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.feed.close();
    window.clearInterval(this.clock);
    window.clearTimeout(this.renderTimer);
    this.charts.forEach(chart => chart.destroy());
    super.dispose();
  }

  private async cancel(): Promise<void> {
    (this.els.cancel as HTMLButtonElement).disabled = true;
    try {
      await this.client.cancel(this.runId);
      this.els.cancel.textContent = 'Canceling…';
    } catch (error) {
      this.showBanner(`Cancel failed: ${escapeHtml(String(error))}`);
    }
  }

  private onUpdate(update: IFeedUpdate): void {
    this.chartsDirty = this.chartsDirty || update.fresh > 0;
    this.pendingLines = this.pendingLines.concat(update.lines);
    if (this.renderTimer === undefined) {
      this.renderTimer = window.setTimeout(() => this.flush(), RENDER_MS);
    }
  }

  private flush(): void {
    this.renderTimer = undefined;
    if (this.isDisposed || !this.feed.detail) {
      return;
    }
    this.node.dataset.feed = this.feed.mode;
    this.render(this.chartsDirty);
    this.chartsDirty = false;
    const lines = this.pendingLines;
    this.pendingLines = [];
    this.logView.setRanks(this.feed.ranks(), this.logSelection);
    // The log view keeps its last MAX_LOG_LINES lines: a long history is cut before it.
    this.logView.append((this.logSelection === 'all' ? lines :
      lines.filter(([rank]) => String(rank) === this.logSelection)).slice(-MAX_LOG_LINES));
  }

  private showBanner(html: string): void {
    this.els.banner.hidden = false;
    this.els.banner.innerHTML = html;
  }

  private render(chartsChanged: boolean): void {
    const detail = this.feed.detail as IRunDetail;
    const { state, spec } = detail;
    const now = Date.now() / 1000;
    this.els.status.textContent = state.status;
    this.els.status.className = `jt-status jt-status-${state.status}`;
    this.els.title.textContent = `${spec.name} · ${detail.id}`;
    const env = spec.env.name ? `${spec.env.name}${spec.env.version ? ' @' + String(spec.env.version).slice(0, 15) : ''}` : 'kernel Python';
    this.els.meta.textContent = `${spec.target.name} · ${spec.launch.launcher} · ${spec.launch.nodes}×${spec.launch.procs} · ` +
      `${String(state.backend || spec.launch.backend || 'auto')} · env ${env} · ${formatDuration(runDuration(state, now))}`;
    this.els.stages.innerHTML = stageDurations(state, now)
      .map(([name, seconds]) => `<span class="jt-stage">${name} ${formatDuration(seconds)}</span>`).join(' → ');
    const fraction = this.feed.data.fraction();
    const bar = this.els.progress.querySelector('.jt-progress-bar') as HTMLElement;
    bar.style.width = `${(100 * (fraction ?? 0)).toFixed(1)}%`;
    this.els.progress.dataset.fraction = fraction === null ? '' : fraction.toFixed(4);
    (this.els.progress.querySelector('.jt-progress-text') as HTMLElement).textContent =
      fraction === null ? '' : `${(100 * fraction).toFixed(0)}%`;
    (this.els.cancel as HTMLButtonElement).hidden = isTerminal(state.status);
    if (state.status === 'failed' || state.status === 'lost') {
      const who = state.failed_rank !== undefined && state.failed_rank !== null ? `rank ${state.failed_rank} failed first: ` : '';
      this.showBanner(`<div class="jt-banner-title">${escapeHtml(who + (state.error || state.status))}</div>` +
        (state.traceback ? `<pre class="jt-traceback">${ansiToHtml(state.traceback, '')}</pre>` : ''));
    } else if (state.status === 'queued' && state.queue?.reason) {
      this.showBanner(`Queued: ${escapeHtml(state.queue.reason)}${state.queue.job_id ? ` (job ${escapeHtml(state.queue.job_id)})` : ''}`);
    } else if (state.status !== 'queued' && this.els.banner.dataset.kind !== 'error') {
      this.els.banner.hidden = true;
    }
    if (chartsChanged) {
      this.drawCharts();
    }
  }

  private drawCharts(): void {
    for (const name of this.feed.data.metricNames()) {
      let chart = this.charts.get(name);
      if (!chart) {
        const box = document.createElement('div');
        box.className = 'jt-chart';
        box.innerHTML = `<div class="jt-chart-title">${escapeHtml(name)}</div>`;
        this.els.charts.append(box);
        chart = new LineChart(box, { height: 180 });
        this.charts.set(name, chart);
      }
      const ranks = Array.from(this.feed.data.series.get(name)?.keys() || []).sort((a, b) => a - b);
      chart.update({
        xKind: 'step',
        logY: false,
        series: ranks.map(rank => {
          const points = this.feed.data.points(name, rank, 1000);
          return {
            label: `rank ${rank}`,
            color: PALETTE[rank % PALETTE.length],
            x: Float64Array.from(points.map(p => p.x)),
            y: Float64Array.from(points.map(p => p.y))
          };
        })
      });
    }
  }
}
