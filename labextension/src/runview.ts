/** The main-area view of one run: header, stages, progress, failure banner, charts, logs. */

import { Widget } from '@lumino/widgets';

import { IRunDetail, TrainerClient } from './api';
import { formatDuration, isTerminal, RunData, runDuration, stageDurations } from './model';
import { ansiToHtml, escapeHtml } from './shared/ansi.js';
import { LineChart, PALETTE } from './shared/chart.js';
import { LogView } from './shared/logview.js';

const POLL_MS = 700;
const MAX_LOG_LINES = 2000;

export class RunView extends Widget {
  private data = new RunData();
  private detail: IRunDetail | null = null;
  private charts = new Map<string, LineChart>();
  private logOffsets = new Map<number, number>();
  private logView: LogView;
  private logSelection = 'all';
  private timer: number | undefined;
  private busy = false;
  private finished = false;
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
  }

  protected onAfterAttach(): void {
    void this.poll();
    this.timer = window.setInterval(() => void this.poll(), POLL_MS);
  }

  protected onBeforeDetach(): void {
    window.clearInterval(this.timer);
  }

  dispose(): void {
    window.clearInterval(this.timer);
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

  private async poll(): Promise<void> {
    if (this.busy || this.finished) {
      return;
    }
    this.busy = true;
    try {
      const detail = await this.client.run(this.runId);
      let fresh = 0;
      const lines: Array<[number, string]> = [];
      for (const rank of detail.ranks) {
        const events = await this.client.events(this.runId, rank, this.data.offsets.get(rank) || 0);
        fresh += this.data.ingest(rank, events.events, events.offset);
        const logs = await this.client.logs(this.runId, rank, this.logOffsets.get(rank) || 0);
        this.logOffsets.set(rank, logs.offset);
        for (const line of logs.text.split('\n').slice(0, -1)) {
          lines.push([rank, line]);
        }
      }
      this.detail = detail;
      this.render(fresh > 0);
      this.logView.setRanks(detail.ranks, this.logSelection);
      this.logView.append(this.logSelection === 'all' ? lines :
        lines.filter(([rank]) => String(rank) === this.logSelection));
      this.finished = isTerminal(detail.state.status) && fresh === 0 && lines.length === 0;
    } catch (error) {
      this.showBanner(`Cannot read run ${escapeHtml(this.runId)}: ${escapeHtml(String(error))}`);
    } finally {
      this.busy = false;
    }
  }

  private showBanner(html: string): void {
    this.els.banner.hidden = false;
    this.els.banner.innerHTML = html;
  }

  private render(chartsChanged: boolean): void {
    const detail = this.detail as IRunDetail;
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
    const fraction = this.data.fraction();
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
    for (const name of this.data.metricNames()) {
      let chart = this.charts.get(name);
      if (!chart) {
        const box = document.createElement('div');
        box.className = 'jt-chart';
        box.innerHTML = `<div class="jt-chart-title">${escapeHtml(name)}</div>`;
        this.els.charts.append(box);
        chart = new LineChart(box, { height: 180 });
        this.charts.set(name, chart);
      }
      const ranks = Array.from(this.data.series.get(name)?.keys() || []).sort((a, b) => a - b);
      chart.update({
        xKind: 'step',
        logY: false,
        series: ranks.map(rank => {
          const points = this.data.points(name, rank, 1000);
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
