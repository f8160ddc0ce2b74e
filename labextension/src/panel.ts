/** The left-sidebar Training Runs panel: every run and sweep in the store, live. A sweep is
 * one row that expands to its trials; its trials are not listed as runs of their own. Below
 * them, the registered models (models.ts), each expanding to its versions and their runs. */

import { Dialog, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { Widget } from '@lumino/widgets';

import type { TrainerClient } from './api';
import {
  type IRunRow, type ISweepDetail, type ISweepRow, type ITrialRow, bestText, countsText, mergeNewestFirst, paramsText,
  ownerOf, runDuration, shortId, startedAt, sweepStatus, trialNote, trialsText, versionMismatch
} from './model';
import { ModelsSection } from './models';
import { morphChildren } from './morph';
import { escapeHtml } from './view/ansi.js';
import { formatDuration, formatNumber } from './view/chart.js';
import { type IStall, attemptLabel, stallBadge, stallTitle } from './view/health';
import { VERSION } from './version';

const POLL_MS = 1500;
const SWEEP_ACTIVE = ['created', 'running', 'interrupted'];

export interface IRunsPanelActions {
  open(id: string): void;
  openSweep(id: string): void;
  attach(id: string, kind: 'run' | 'sweep'): void;
}

type Row = IRunRow & {
  progress?: { done: number; total: number | null; fraction: number | null } | null;
  attempt?: number | null;
  max_restarts?: number;
  stalled?: IStall[];
  /** Why a queued run waits: the scheduler's reason, expected start and place in the queue. */
  waiting?: string | null;
};

export class RunsPanel extends Widget {
  private timer: number | undefined;
  private rows: Row[] = [];
  private sweeps: ISweepRow[] = [];
  /** The trials of each expanded sweep, as last read. */
  private details = new Map<string, ISweepDetail>();
  private expanded = new Set<string>();
  private seq = 0;
  private shown = '';
  /** While a button is pressed on the list, a new list waits (a click pressed on one
   * list and released on the next would be lost). */
  private pressed = false;
  private pending: string | null = null;
  private filter = { status: '', name: '', owner: '' };
  private body: HTMLElement;
  private banner: HTMLElement;
  private models: ModelsSection;

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
        <select class="jt-runs-owner" data-testid="jt-runs-owner" title="Whose runs to list">
          <option value="">everyone</option><option value="mine">mine</option>
        </select>
      </div>
      <div class="jt-runs-body" data-testid="jt-runs-body"></div>`;
    this.body = this.node.querySelector('.jt-runs-body') as HTMLElement;
    this.banner = this.node.querySelector('.jt-runs-banner') as HTMLElement;
    this.models = new ModelsSection(client, id => this.actions.open(id));
    this.node.appendChild(this.models.node);
    (this.node.querySelector('.jt-runs-refresh') as HTMLElement).onclick = () => void this.refresh();
    const name = this.node.querySelector('.jt-runs-name') as HTMLInputElement;
    name.oninput = () => { this.filter.name = name.value; void this.refresh(); };
    const status = this.node.querySelector('.jt-runs-status') as HTMLSelectElement;
    status.onchange = () => { this.filter.status = status.value; void this.refresh(); };
    const owner = this.node.querySelector('.jt-runs-owner') as HTMLSelectElement;
    owner.onchange = () => { this.filter.owner = owner.value; void this.refresh(); };
    this.body.onclick = event => this.onClick(event);
    this.body.onkeydown = event => this.onKey(event);
    this.body.onpointerdown = () => { this.pressed = true; };
    window.addEventListener('pointerup', this.onRelease);
    window.addEventListener('pointercancel', this.onRelease);
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
    window.removeEventListener('pointerup', this.onRelease);
    window.removeEventListener('pointercancel', this.onRelease);
    super.dispose();
  }

  async refresh(): Promise<void> {
    const seq = ++this.seq;
    void this.models.refresh();
    try {
      const [page, sweeps] = await Promise.all([
        this.client.runs({ ...this.filter, limit: 100, trials: 0 }),
        this.client.sweeps({ status: sweepStatus(this.filter.status), name: this.filter.name, owner: this.filter.owner, limit: 100 })
      ]);
      const open = sweeps.sweeps.filter(sweep => this.expanded.has(sweep.id)).map(sweep => sweep.id);
      const details = await Promise.all(open.map(id => this.client.sweep(id).catch(() => null)));
      if (seq !== this.seq) {
        return; // a later refresh has begun: its answer is the newer one
      }
      this.rows = page.runs as Row[];
      this.sweeps = sweeps.sweeps;
      this.details = new Map(details.filter((d): d is ISweepDetail => d !== null).map(d => [d.id, d]));
      this.render();
    } catch (error) {
      if (seq === this.seq) {
        this.setList(`<div class="jt-runs-empty">Cannot list runs: ${escapeHtml(String(error))}</div>`);
      }
    }
  }

  /** After the click that ends the press: the list that waited. */
  private onRelease = (): void => {
    if (!this.pressed) {
      return;
    }
    this.pressed = false;
    window.setTimeout(() => {
      const html = this.pending;
      this.pending = null;
      if (html !== null) {
        this.setList(html);
      }
    }, 0);
  };

  /** Show the list, changing in place only what differs from the one shown: a row stays
   * the same element across refreshes, so a selected id, the focus and a press outlive them. */
  private setList(html: string): void {
    if (this.pressed) {
      this.pending = html;
      return;
    }
    this.pending = null; // a list that waited is older than this one
    if (html !== this.shown) {
      this.shown = html;
      morphChildren(this.body, html);
    }
  }

  /** The filters that are set, as the list says them ("" for none). */
  private filterText(): string {
    const { name, status, owner } = this.filter;
    return [name && `name “${name}”`, status && `status ${status}`, owner === 'mine' && 'only mine']
      .filter(Boolean).join(', ');
  }

  private clearFilter(): void {
    this.filter = { status: '', name: '', owner: '' };
    (this.node.querySelector('.jt-runs-name') as HTMLInputElement).value = '';
    (this.node.querySelector('.jt-runs-status') as HTMLSelectElement).value = '';
    (this.node.querySelector('.jt-runs-owner') as HTMLSelectElement).value = '';
    void this.refresh();
  }

  private render(): void {
    if (!this.rows.length && !this.sweeps.length) {
      const filter = this.filterText();
      this.setList(filter
        ? `<div class="jt-runs-empty" data-testid="jt-runs-empty">No runs match ${escapeHtml(filter)}. ` +
          '<button class="jt-runs-attach" data-action="clear-filter" data-testid="jt-runs-clear">Clear filter</button></div>'
        : '<div class="jt-runs-empty" data-testid="jt-runs-empty">No runs yet. Start one with <code>%%train</code> ' +
          'in a notebook or <code>jupyter-trainer submit</code>.</div>');
      return;
    }
    const now = Date.now() / 1000;
    this.setList(mergeNewestFirst(this.rows, this.sweeps).map(item =>
      item.kind === 'run' ? this.runHtml(item.row as Row, now) : this.sweepHtml(item.row, now)).join(''));
  }

  private runHtml(row: Row, now: number): string {
    const fraction = row.progress?.fraction;
    const status = escapeHtml(row.status);
    const bar = fraction === null || fraction === undefined ? '' : progressBar('jt-runs-progress', status, fraction);
    const stall = stallBadge(row.stalled);
    const attempt = row.attempt ? attemptLabel(row.attempt, row.max_restarts || 0) : null;
    const owner = ownerOf(row);
    const where = [row.target, `${row.nodes}×${row.procs}`, owner].filter(Boolean).join(' · ');
    const title = [row.id, `started ${startedAt(row.created, now)}`, `${owner ? `by ${owner} · ` : ''}${row.target} · ${row.launcher} · ${row.nodes} node${row.nodes === 1 ? '' : 's'} × ${row.procs} proc${row.procs === 1 ? '' : 's'}`].join('\n');
    return `
        <div class="jt-runs-row" data-key="run:${escapeHtml(row.id)}" data-run="${escapeHtml(row.id)}" data-testid="jt-runs-row" title="${escapeHtml(title)}">
          <div class="jt-runs-line">
            <span class="jt-badge jt-status-${status}" data-testid="jt-runs-status-badge">${status}</span>
            <span class="jt-runs-name">${escapeHtml(row.name)}</span>
            <span class="jt-runs-duration">${formatDuration(runDuration(row, now))}</span>
          </div>
          <div class="jt-runs-line jt-runs-meta">
            <code class="jt-runs-id" data-testid="jt-runs-id">${escapeHtml(shortId(row.id))}</code>
            <span class="jt-runs-where" data-testid="jt-runs-where">${escapeHtml(owner ? where.slice(0, -owner.length) : where)}${owner ? `<span class="jt-runs-owner-name" data-testid="jt-runs-row-owner">${escapeHtml(owner)}</span>` : ''}</span>
            <button class="jt-runs-attach" data-action="attach" data-testid="jt-runs-attach" title="Insert and run a cell that shows this run, in the notebook you used last" aria-label="Attach ${escapeHtml(row.name)} in the notebook you used last">Attach</button>
          </div>
          ${row.waiting ? `<div class="jt-runs-line jt-runs-meta"><span class="jt-runs-waiting" data-testid="jt-runs-waiting">${escapeHtml(row.waiting)}</span></div>` : ''}
          ${stall || attempt ? `<div class="jt-runs-line jt-runs-meta">
            ${stall ? `<span class="jt-runs-stall" data-testid="jt-runs-stalled" title="${escapeHtml(stallTitle(row.stalled))}">⚠ ${escapeHtml(stall)}</span>` : ''}
            ${attempt ? `<span class="jt-runs-attempt" data-testid="jt-runs-attempt">${escapeHtml(attempt)}</span>` : ''}
          </div>` : ''}
          ${bar}
        </div>`;
  }

  private sweepHtml(row: ISweepRow, now: number): string {
    const id = escapeHtml(row.id);
    const status = escapeHtml(row.status);
    const open = this.expanded.has(row.id);
    const best = bestText(row);
    const counts = countsText(row.counts);
    const total = row.trials_total ?? 0;
    const bar = total ? progressBar('jt-sweeps-progress', status, row.trials_done / total) : '';
    return `
        <div class="jt-sweeps-row" data-key="sweep:${id}" data-sweep="${id}" data-status="${status}" data-testid="jt-sweeps-row" aria-expanded="${open}">
          <div class="jt-sweeps-head" data-action="toggle" title="${id}, started ${escapeHtml(startedAt(row.created, now))}: click to ${open ? 'hide' : 'show'} its trials">
            <div class="jt-runs-line">
              <button class="jt-sweeps-toggle" data-action="toggle" data-testid="jt-sweeps-toggle" aria-expanded="${open}" aria-label="${open ? 'Hide' : 'Show'} the trials of ${escapeHtml(row.name)}">${open ? '▾' : '▸'}</button>
              <span class="jt-badge jt-status-${status}" data-testid="jt-sweeps-status-badge">${status}</span>
              <span class="jt-sweeps-kind">sweep</span>
              <span class="jt-runs-duration">${formatDuration(runDuration(row, now))}</span>
            </div>
            <div class="jt-runs-line jt-sweeps-name-line">
              <span class="jt-runs-name jt-sweeps-name" data-testid="jt-sweeps-name" title="${escapeHtml(row.name)}">${escapeHtml(row.name)}</span>
            </div>
            <div class="jt-runs-line jt-runs-meta">
              <span class="jt-sweeps-trials" data-testid="jt-sweeps-trials" data-done="${row.trials_done}" data-total="${total}">${escapeHtml(trialsText(row))}${counts ? ` · ${escapeHtml(counts)}` : ''}</span>${ownerOf(row) ? `<span class="jt-runs-owner-name" data-testid="jt-sweeps-owner">${escapeHtml(ownerOf(row))}</span>` : ''}
            </div>
            <div class="jt-runs-line jt-runs-meta">
              <span class="jt-sweeps-best" data-testid="jt-sweeps-best"${row.best ? ` data-objective="${row.best.objective}" data-run="${escapeHtml(row.best.run)}"` : ''}>${best ? `<span class="jt-sweeps-star">★</span> ${escapeHtml(best)}` : `${row.goal === 'min' ? 'minimize' : 'maximize'} ${escapeHtml(row.metric)}: no trial completed${SWEEP_ACTIVE.includes(row.status) ? ' yet' : ''}`}</span>
            </div>
            <div class="jt-runs-line jt-runs-meta">
              <code class="jt-runs-id">${escapeHtml(shortId(row.id))}</code><span class="jt-runs-where">started ${escapeHtml(startedAt(row.created, now))}</span>
            </div>
            <div class="jt-runs-line jt-runs-meta jt-sweeps-actions">
              <button class="jt-runs-attach" data-action="open-sweep" data-testid="jt-sweeps-open" title="Open the sweep's view: its trials table, best so far and parallel coordinates">Open sweep</button>
              <button class="jt-runs-attach" data-action="attach-sweep" data-testid="jt-sweeps-attach" title="Insert and run a cell that shows this sweep, in the notebook you used last">Attach in notebook</button>
            </div>
            ${row.error ? `<div class="jt-sweeps-error">${escapeHtml(row.error)}</div>` : ''}
            ${bar}
          </div>
          ${open ? this.trialsHtml(row) : ''}
        </div>`;
  }

  private trialsHtml(row: ISweepRow): string {
    const detail = this.details.get(row.id);
    const cancel = SWEEP_ACTIVE.includes(row.status) ?
      `<button class="jt-sweeps-cancel" data-action="cancel-sweep" data-testid="jt-sweeps-cancel" title="Cancel the sweep and its running trials">Cancel sweep</button>` : '';
    if (!detail) {
      return `<div class="jt-sweeps-list" data-testid="jt-sweeps-list"><div class="jt-sweeps-none">Reading the trials…</div>${cancel}</div>`;
    }
    const trials = detail.trials.map(trial => this.trialHtml(trial, row)).join('');
    return `
          <div class="jt-sweeps-list" data-testid="jt-sweeps-list" role="list">
            ${trials || '<div class="jt-sweeps-none">No trial started yet.</div>'}
            ${cancel}
          </div>`;
  }

  private trialHtml(trial: ITrialRow, row: ISweepRow): string {
    const status = escapeHtml(trial.status);
    const best = row.best !== null && row.best.number === trial.number;
    const note = trialNote(trial);
    const params = paramsText(trial.params);
    const title = [trial.run ? `run ${trial.run}` : 'its run is starting', params, note].filter(Boolean).join('\n');
    const reported = trial.objective === null && trial.reported ? trial.reported : null;
    const objective = trial.objective !== null ? escapeHtml(formatNumber(trial.objective))
      : reported ? `<span class="jt-sweep-reported" data-reported="${reported.value}">${escapeHtml(formatNumber(reported.value))} <span class="jt-sweep-reported-kind">${escapeHtml(reported.kind)}</span></span>` : '–';
    return `
            <div class="jt-sweeps-trial${best ? ' jt-sweeps-best-trial' : ''}" data-key="trial:${trial.number}" role="listitem" data-testid="jt-sweeps-trial" data-status="${status}" data-number="${trial.number}"${trial.run ? ` data-run="${escapeHtml(trial.run)}" tabindex="0"` : ''}${trial.objective === null ? '' : ` data-objective="${trial.objective}"`} title="${escapeHtml(title)}">
              <span class="jt-sweeps-number">${best ? '★' : ''}#${trial.number}</span>
              <span class="jt-badge jt-status-${status}" data-testid="jt-sweeps-trial-status">${status}</span>
              <span class="jt-sweeps-params" data-testid="jt-sweeps-params">${escapeHtml(params)}</span>
              <span class="jt-sweeps-objective" data-testid="jt-sweeps-objective"${reported ? ` title="the ${escapeHtml(reported.kind)} value it reported, not an objective: the best trial is among the completed ones"` : ''}>${objective}</span>
            </div>`;
  }

  private onClick(event: MouseEvent): void {
    const target = event.target as HTMLElement;
    const trial = target.closest('.jt-sweeps-trial') as HTMLElement | null;
    if (trial) {
      if (trial.dataset.run) {
        this.actions.open(trial.dataset.run);
      }
      return;
    }
    if (target.closest('[data-action=clear-filter]')) {
      this.clearFilter();
      return;
    }
    const sweep = target.closest('.jt-sweeps-row') as HTMLElement | null;
    if (sweep?.dataset.sweep) {
      const action = (target.closest('[data-action]') as HTMLElement | null)?.dataset.action;
      if (action === 'cancel-sweep') {
        void this.cancelSweep(sweep.dataset.sweep);
      } else if (action === 'open-sweep') {
        this.actions.openSweep(sweep.dataset.sweep);
      } else if (action === 'attach-sweep') {
        this.actions.attach(sweep.dataset.sweep, 'sweep');
      } else if (action === 'toggle') {
        this.toggle(sweep.dataset.sweep);
      }
      return;
    }
    const row = target.closest('.jt-runs-row') as HTMLElement | null;
    if (!row?.dataset.run) {
      return;
    }
    if (target.dataset.action === 'attach') {
      this.actions.attach(row.dataset.run, 'run');
    } else {
      this.actions.open(row.dataset.run);
    }
  }

  /** Enter or space on a trial opens its run, as a click does. */
  private onKey(event: KeyboardEvent): void {
    const trial = (event.target as HTMLElement).closest('.jt-sweeps-trial') as HTMLElement | null;
    if (trial?.dataset.run && (event.key === 'Enter' || event.key === ' ')) {
      event.preventDefault();
      this.actions.open(trial.dataset.run);
    }
  }

  private toggle(id: string): void {
    if (!this.expanded.delete(id)) {
      this.expanded.add(id);
    }
    this.render();
    void this.refresh();
  }

  private async cancelSweep(id: string): Promise<void> {
    const answer = await showDialog({
      title: 'Cancel sweep',
      body: `Cancel sweep ${id} and its running trials? Trials that ended keep their results.`,
      buttons: [Dialog.cancelButton({ label: 'Keep running' }), Dialog.warnButton({ label: 'Cancel sweep' })]
    });
    if (!answer.button.accept) {
      return;
    }
    try {
      await this.client.cancelSweep(id);
    } catch (error) {
      await showErrorMessage('Cancel sweep', String((error as Error).message || error));
    }
    void this.refresh();
  }
}

function progressBar(testid: string, status: string, fraction: number): string {
  return `<div class="jt-runs-progress" data-testid="${testid}" data-status="${status}" data-fraction="${fraction.toFixed(4)}">` +
    `<div style="width:${(100 * fraction).toFixed(1)}%"></div></div>`;
}
