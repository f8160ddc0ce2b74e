/** The left-sidebar Training Runs panel: every run in the store, live. */

import { Widget } from '@lumino/widgets';

import { TrainerClient } from './api';
import { IRunRow, runDuration, shortId, startedAt, versionMismatch } from './model';
import { formatDuration } from './view/chart.js';
import { IStall, attemptLabel, stallBadge, stallTitle } from './view/health';
import { VERSION } from './version';

const POLL_MS = 1500;

export interface IRunsPanelActions {
  open(id: string): void;
  attach(id: string): void;
}

type Row = IRunRow & {
  progress?: { done: number; total: number | null; fraction: number | null } | null;
  attempt?: number | null;
  max_restarts?: number;
  stalled?: IStall[];
};

function escape(text: string): string {
  return text.replace(/[&<>"']/g, c => `&#${c.charCodeAt(0)};`);
}

export class RunsPanel extends Widget {
  private timer: number | undefined;
  private rows: Row[] = [];
  private filter = { status: '', name: '' };
  private body: HTMLElement;
  private banner: HTMLElement;

  constructor(private client: TrainerClient, private actions: IRunsPanelActions) {
    super();
    this.addClass('jt-runs-panel');
    this.node.innerHTML = `
      <div class="jt-runs-header">
        <span class="jt-runs-title">Training Runs</span>
        <button class="jt-runs-refresh jp-Button" title="Refresh" data-testid="jt-runs-refresh">⟳</button>
      </div>
      <div class="jt-runs-banner" hidden data-testid="jt-runs-banner"></div>
      <div class="jt-runs-filters">
        <input class="jt-runs-name" type="search" placeholder="Filter by name" data-testid="jt-runs-name">
        <select class="jt-runs-status" data-testid="jt-runs-status">
          <option value="">all</option><option value="running">running</option>
          <option value="queued">queued</option><option value="completed">completed</option>
          <option value="failed">failed</option><option value="canceled">canceled</option>
          <option value="lost">lost</option>
        </select>
      </div>
      <div class="jt-runs-body" data-testid="jt-runs-body"></div>`;
    this.body = this.node.querySelector('.jt-runs-body') as HTMLElement;
    this.banner = this.node.querySelector('.jt-runs-banner') as HTMLElement;
    (this.node.querySelector('.jt-runs-refresh') as HTMLElement).onclick = () => void this.refresh();
    const name = this.node.querySelector('.jt-runs-name') as HTMLInputElement;
    name.oninput = () => { this.filter.name = name.value; void this.refresh(); };
    const status = this.node.querySelector('.jt-runs-status') as HTMLSelectElement;
    status.onchange = () => { this.filter.status = status.value; void this.refresh(); };
    this.body.onclick = event => this.onClick(event);
    void this.checkVersion();
  }

  private async checkVersion(): Promise<void> {
    const problem = versionMismatch(VERSION, await this.client.version());
    this.banner.hidden = problem === null;
    this.banner.textContent = problem || '';
  }

  protected onAfterShow(): void {
    void this.refresh();
    this.timer = window.setInterval(() => void this.refresh(), POLL_MS);
  }

  protected onBeforeHide(): void {
    window.clearInterval(this.timer);
  }

  dispose(): void {
    window.clearInterval(this.timer);
    super.dispose();
  }

  async refresh(): Promise<void> {
    try {
      const page = await this.client.runs({ ...this.filter, limit: 100 });
      this.rows = page.runs as Row[];
      this.render();
    } catch (error) {
      this.body.innerHTML = `<div class="jt-runs-empty">Cannot list runs: ${escape(String(error))}</div>`;
    }
  }

  private render(): void {
    if (!this.rows.length) {
      this.body.innerHTML = '<div class="jt-runs-empty">No runs yet. Start one with <code>%%train</code> ' +
        'in a notebook or <code>jupyter-trainer submit</code>.</div>';
      return;
    }
    const now = Date.now() / 1000;
    this.body.innerHTML = this.rows.map(row => {
      const fraction = row.progress?.fraction;
      const status = escape(row.status);
      const bar = fraction === null || fraction === undefined ? '' :
        `<div class="jt-runs-progress" data-testid="jt-runs-progress" data-status="${status}" data-fraction="${fraction.toFixed(4)}">` +
        `<div style="width:${(100 * fraction).toFixed(1)}%"></div></div>`;
      const stall = stallBadge(row.stalled);
      const attempt = row.attempt ? attemptLabel(row.attempt, row.max_restarts || 0) : null;
      return `
        <div class="jt-runs-row" data-run="${escape(row.id)}" data-testid="jt-runs-row" title="${escape(row.id)}">
          <div class="jt-runs-line">
            <span class="jt-badge jt-status-${status}" data-testid="jt-runs-status-badge">${status}</span>
            <span class="jt-runs-name">${escape(row.name)}</span>
            <span class="jt-runs-duration">${formatDuration(runDuration(row, now))}</span>
          </div>
          <div class="jt-runs-line jt-runs-meta">
            <span data-testid="jt-runs-when">started ${escape(startedAt(row.created, now))} · <code class="jt-runs-id" data-testid="jt-runs-id">${escape(shortId(row.id))}</code></span>
          </div>
          ${stall || attempt ? `<div class="jt-runs-line jt-runs-meta">
            ${stall ? `<span class="jt-runs-stall" data-testid="jt-runs-stalled" title="${escape(stallTitle(row.stalled))}">⚠ ${escape(stall)}</span>` : ''}
            ${attempt ? `<span class="jt-runs-attempt" data-testid="jt-runs-attempt">${escape(attempt)}</span>` : ''}
          </div>` : ''}
          <div class="jt-runs-line jt-runs-meta">
            <span>${escape(row.target)} · ${escape(row.launcher)} · ${row.nodes}×${row.procs}</span>
            <button class="jt-runs-attach" data-action="attach" data-testid="jt-runs-attach" title="Insert and run a cell that shows this run, in the notebook you used last">Attach in notebook</button>
          </div>
          ${bar}
        </div>`;
    }).join('');
  }

  private onClick(event: MouseEvent): void {
    const target = event.target as HTMLElement;
    const row = target.closest('.jt-runs-row') as HTMLElement | null;
    if (!row || !row.dataset.run) {
      return;
    }
    if (target.dataset.action === 'attach') {
      this.actions.attach(row.dataset.run);
    } else {
      this.actions.open(row.dataset.run);
    }
  }
}
