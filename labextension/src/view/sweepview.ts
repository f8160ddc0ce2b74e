/**
 * The sweep view: a header (status, trials started of the total, a bar and counts by
 * status, the best objective and its params, Cancel), the best-so-far and parallel-
 * coordinates charts, and the trials table (each param, status, objective, step, duration,
 * why a trial was pruned or failed). A click on a trial asks for its run: the notebook
 * widget then shows the trial's run monitor below (``monitor.sweep_widget``); another host
 * (the Lab panel) passes ``onOpen``. The model has the anywidget model's methods and the
 * traits ``sweep_id``, ``spec``, ``state``, ``charts``, ``notice``, ``cancel_state`` and
 * ``selected``.
 */
import { escapeHtml } from './ansi.js';
import { formatDuration, formatNumber } from './chart.js';
import { FrameScheduler, type Handlers, askBeforeCancel, listen, showCancel } from './viewparts';
import type { IViewModel } from './viewmodel';
import { BestChart, ParallelPlot } from './sweepcharts';
import {
  type IChartData, type ISweepSpec, type ISweepState, type ITrial, SWEEP_TERMINAL, bestHtml, countsList, formatParam, isActive,
  noBestText, objectiveHtml, paramKeys, settingsList, sortTrials, startedText, trialDuration, trialNote
} from './sweepformat';

export interface ISweepViewOptions {
  /** Said when the model's connection is gone (kernel restarted, server stopped). */
  goneText?: string;
  /** Show trial ``trial``'s run; by default the model is asked (``{type: "open"}``). */
  onOpen?: (trial: ITrial) => void;
}

/** The sweep view's traits, as the kernel's ``SweepView`` and the server's sweep feed send
 * them. */
export interface ISweepTraits {
  sweep_id: string;
  key: string;
  state: ISweepState;
  spec: ISweepSpec;
  /** The trial whose run is shown below the table. */
  selected: number | null;
  cancel_state: string;
  notice: string;
  charts: IChartData;
}

const BAR_STATUSES = ['completed', 'pruned', 'failed', 'canceled', 'running', 'starting'];

function setHtml(el: HTMLElement, html: string): void {
  if (el.innerHTML !== html) el.innerHTML = html;
}

/** Draw the sweep of ``model`` into ``root``; returns the function that takes it down. */
export function mountSweepView(root: HTMLElement, model: IViewModel<ISweepTraits>, options: ISweepViewOptions = {}): () => void {
  root.classList.add('jt-monitor', 'jt-sweep');
  root.dataset.testid = 'jt-sweep';
  root.innerHTML = `
    <div class="jt-head">
      <div class="jt-head-main">
        <span class="jt-badge" data-testid="jt-sweep-status"></span>
        <span class="jt-name" data-testid="jt-sweep-name"></span>
        <code class="jt-runid" data-testid="jt-sweep-id" title="sweep id: %train attach SWEEP"></code>
        <span class="jt-spacer"></span>
        <span class="jt-elapsed" data-testid="jt-sweep-elapsed" title="elapsed"></span>
        <button type="button" class="jt-button jt-danger" data-testid="jt-sweep-cancel">Cancel</button>
      </div>
      <div class="jt-meta" data-testid="jt-sweep-meta"></div>
      <div class="jt-sweep-progress">
        <div class="jt-sweep-bar" data-testid="jt-sweep-bar"></div>
        <span class="jt-sweep-started" data-testid="jt-sweep-started"></span>
        <span class="jt-sweep-counts" data-testid="jt-sweep-counts"></span>
        <span class="jt-sweep-cost" data-testid="jt-sweep-cost" title="what the trials cost together, at their targets' prices" hidden></span>
      </div>
      <div class="jt-sweep-best" data-testid="jt-sweep-best"></div>
      <div class="jt-notice" data-testid="jt-sweep-notice" hidden></div>
    </div>
    <div class="jt-banner" data-testid="jt-sweep-banner" hidden></div>
    <div class="jt-sweep-charts">
      <div class="jt-chart-card" data-testid="jt-sweep-best-chart">
        <div class="jt-chart-head"><span class="jt-chart-title">Best so far</span><span class="jt-chart-stats jt-best-stats"></span></div>
        <div class="jt-chart-area jt-best-area"></div>
      </div>
      <div class="jt-chart-card" data-testid="jt-sweep-parallel">
        <div class="jt-chart-head"><span class="jt-chart-title jt-pc-title">Parameters</span><span class="jt-chart-stats jt-pc-stats"></span></div>
        <div class="jt-chart-area jt-pc-area"></div>
        <div class="jt-chart-foot jt-muted jt-pc-key"></div>
      </div>
    </div>
    <section class="jt-section">
      <div class="jt-section-head"><span class="jt-section-title">Trials</span><span class="jt-muted jt-sweep-hint"></span></div>
      <div class="jt-sweep-table-wrap">
        <table class="jt-sweep-table" data-testid="jt-sweep-trials"><thead></thead><tbody></tbody></table>
      </div>
    </section>`;
  const $ = (sel: string): HTMLElement => root.querySelector(sel) as HTMLElement;
  const cancel = $('[data-testid=jt-sweep-cancel]') as HTMLButtonElement;
  const thead = $('.jt-sweep-table thead');
  const tbody = $('.jt-sweep-table tbody');
  const rows = new Map<number, HTMLTableRowElement>();
  let sortBy: 'number' | 'objective' = 'number';
  let cancelClicked = false;
  let clock = { offset: 0 }; // the kernel's time - the browser's, from the last state
  let gone = '';
  let shownNow: number | null = null; // the clock as last shown (the kernel's time)
  let frozenNow: number | null = null; // where it stopped once the connection was gone

  const state = (): ISweepState => model.get('state') || {};
  const spec = (): ISweepSpec => model.get('spec') || {};
  const trials = (): ITrial[] => state().trials || [];
  const now = (): number => Date.now() / 1000 + clock.offset;

  const send = (content: unknown): boolean => {
    try {
      model.send(content);
      return true;
    } catch {
      markGone();
      return false;
    }
  };

  const describe = (number: number): string => {
    const trial = trials().find(t => t.number === number);
    if (!trial) return `trial #${number}`;
    const params = Object.entries(trial.params || {}).map(([k, v]) => `<div>${escapeHtml(k)} = <b>${escapeHtml(formatParam(v))}</b></div>`).join('');
    const metric = escapeHtml(spec().metric || 'objective');
    const objective = typeof trial.objective === 'number' ? ` · ${metric} <b>${formatNumber(trial.objective)}</b>`
      : trial.reported ? ` · ${metric} <b>${formatNumber(trial.reported.value)}</b> (${escapeHtml(trial.reported.kind)} reported, not an objective)` : '';
    return `<div class="jt-tip-head">trial #${number} · ${escapeHtml(trial.status)}${objective}</div>${params}`;
  };
  const best = new BestChart($('.jt-best-area'));
  const parallel = new ParallelPlot($('.jt-pc-area'), { onPick: n => openTrial(n), describe });

  function openTrial(number: number): void {
    const trial = trials().find(t => t.number === number);
    if (!trial?.run) return;
    if (options.onOpen) {
      options.onOpen(trial);
      return;
    }
    send(model.get('selected') === number ? { type: 'close_trial' } : { type: 'open', number });
  }

  askBeforeCancel(cancel, {
    question: () => {
      const name = spec().name;
      const id = escapeHtml(model.get('sweep_id') || state().id || '');
      return name ? `Cancel sweep <b>${escapeHtml(name)}</b> (<code>${id}</code>) and its running trials?` : `Cancel sweep <code>${id}</code> and its running trials?`;
    },
    detail: 'Trials that ended keep their results.',
    confirm: 'Cancel sweep',
    onConfirm: () => {
      cancelClicked = true;
      showCancel(cancel, { ended: false, gone: '', pressed: true, title: '' });
      send({ type: 'cancel' });
    }
  });
  tbody.addEventListener('click', event => {
    const row = (event.target as HTMLElement).closest('tr[data-number]') as HTMLElement | null;
    if (row) openTrial(Number(row.dataset.number));
  });
  tbody.addEventListener('keydown', event => {
    const row = (event.target as HTMLElement).closest('tr[data-number]') as HTMLElement | null;
    if (row && (event.key === 'Enter' || event.key === ' ')) {
      event.preventDefault();
      openTrial(Number(row.dataset.number));
    }
  });
  tbody.addEventListener('mouseover', event => {
    const row = (event.target as HTMLElement).closest('tr[data-number]') as HTMLElement | null;
    parallel.highlight(row ? Number(row.dataset.number) : null);
  });
  tbody.addEventListener('mouseleave', () => parallel.highlight(null));
  thead.addEventListener('click', event => {
    const th = (event.target as HTMLElement).closest('th[data-sort]') as HTMLElement | null;
    if (!th) return;
    sortBy = th.dataset.sort as 'number' | 'objective';
    renderTable();
  });

  function markGone(): void {
    if (gone || SWEEP_TERMINAL.includes(state().status || '')) return;
    gone = (options.goneText || 'no connection: this is what the sweep looked like last')
      .replace('%train attach SWEEP', `%train attach ${model.get('sweep_id') || state().id || 'SWEEP'}`);
    frozenNow = shownNow; // the clock stops where it was, never set back
    schedule('head');
  }

  function renderHead(): void {
    const s = state();
    const sp = spec();
    const status = s.status || 'created';
    const badge = $('[data-testid=jt-sweep-status]');
    badge.textContent = gone ? `${status}?` : status;
    badge.className = `jt-badge jt-status-${gone ? 'unknown' : status}`;
    root.classList.toggle('jt-gone', !!gone);
    $('[data-testid=jt-sweep-name]').textContent = sp.name ? `sweep ${sp.name}` : 'sweep';
    $('[data-testid=jt-sweep-id]').textContent = model.get('sweep_id') || s.id || '';
    const space = Object.entries(sp.space || {}).map(([k, v]) => `<span class="jt-chip jt-param-chip" title="${escapeHtml(`${k} = ${v}`)}"><span class="jt-muted">${escapeHtml(k)}</span> ${escapeHtml(v)}</span>`).join('');
    setHtml($('[data-testid=jt-sweep-meta]'), settingsList(sp).map(p => `<span>${escapeHtml(p)}</span>`).join('<span class="jt-dot">·</span>') +
      `<span class="jt-sweep-space">${space}</span>`);
    const total = s.trials_total ?? sp.trials ?? 0;
    const counts = s.counts || {};
    setHtml($('[data-testid=jt-sweep-bar]'), BAR_STATUSES.filter(st => counts[st])
      .map(st => `<div class="jt-sweep-seg jt-status-${st}" data-status="${st}" style="width:${((100 * counts[st]) / Math.max(1, total)).toFixed(2)}%" title="${counts[st]} ${st}"></div>`).join(''));
    $('[data-testid=jt-sweep-started]').textContent = startedText(s, sp);
    setHtml($('[data-testid=jt-sweep-counts]'), countsList(counts)
      .map(([st, n]) => `<span class="jt-sweep-count" data-status="${st}"><span class="jt-dotmark jt-status-${st}"></span>${n} ${escapeHtml(st)}</span>`).join(''));
    const cost = $('[data-testid=jt-sweep-cost]');
    cost.textContent = s.cost || '';
    cost.hidden = !s.cost;
    setHtml($('[data-testid=jt-sweep-best]'), bestHtml(s, sp));
    const terminal = SWEEP_TERMINAL.includes(status);
    showCancel(cancel, { ended: terminal, gone, pressed: cancelClicked, title: 'cancel the sweep and every trial still running' });
    const cancelState = model.get('cancel_state') || '';
    const notice = $('[data-testid=jt-sweep-notice]');
    notice.textContent = gone || model.get('notice') || (cancelState && cancelState !== 'requested' ? cancelState : '');
    notice.hidden = !notice.textContent;
    renderBanner(s);
    tick();
  }

  function renderBanner(s: ISweepState): void {
    const banner = $('[data-testid=jt-sweep-banner]');
    const id = model.get('sweep_id') || s.id || 'SWEEP';
    if (s.status === 'failed') {
      banner.className = 'jt-banner jt-banner-error';
      setHtml(banner, `<div class="jt-banner-title">Sweep failed: ${escapeHtml(s.error || 'unknown error')}</div>`);
    } else if (s.status === 'interrupted') {
      banner.className = 'jt-banner jt-banner-error';
      setHtml(banner, `<div class="jt-banner-title">The sweep's driver is gone before the sweep ended</div>` +
        `<div>resume it with <code>jupyter-trainer sweep resume ${escapeHtml(id)}</code></div>`);
    } else if (s.status === 'canceled') {
      banner.className = 'jt-banner jt-banner-muted';
      setHtml(banner, `<div class="jt-banner-title">Canceled${s.reason ? `: ${escapeHtml(s.reason)}` : ''}</div>`);
    } else {
      banner.hidden = true;
      return;
    }
    banner.hidden = false;
  }

  function renderTable(): void {
    const sp = spec();
    const all = trials();
    const keys = paramKeys(sp, all);
    const metric = sp.metric || 'objective';
    const arrow = sp.goal === 'min' ? '↓' : '↑';
    const sortMark = (by: string): string => (sortBy === by ? ' ▾' : '');
    setHtml(thead, `<tr><th class="jt-num" data-sort="number" title="sort by trial number">#${sortMark('number')}</th>` +
      keys.map(k => `<th class="jt-sweep-param-head">${escapeHtml(k)}</th>`).join('') +
      `<th>status</th><th class="jt-num" data-sort="objective" title="sort by ${escapeHtml(metric)}, the best first">${escapeHtml(metric)} ${arrow}${sortMark('objective')}</th>` +
      '<th class="jt-num">step</th><th class="jt-num">time</th><th>note</th></tr>');
    const s = state();
    const bestNumber = s.best ? s.best.number : null;
    const selected = model.get('selected');
    const t = now();
    const order = sortTrials(all, sortBy, sp.goal);
    for (const trial of order) {
      let row = rows.get(trial.number);
      if (!row) {
        row = document.createElement('tr');
        row.dataset.testid = 'jt-sweep-trial';
        row.dataset.number = String(trial.number);
        rows.set(trial.number, row);
      }
      const cells = [
        `<td class="jt-num">${trial.number}</td>`,
        ...keys.map(k => `<td class="jt-sweep-param">${escapeHtml(formatParam(trial.params?.[k]))}</td>`),
        `<td><span class="jt-badge jt-status-${escapeHtml(trial.status)}">${escapeHtml(trial.status)}</span></td>`,
        `<td class="jt-num jt-sweep-objective">${trial.number === bestNumber ? '<span class="jt-sweep-star" title="the best trial so far">★</span> ' : ''}${objectiveHtml(trial, metric)}</td>`,
        `<td class="jt-num">${formatNumber(trial.step)}</td>`,
        `<td class="jt-num jt-sweep-dur">${trialDuration(trial, t)}</td>`,
        `<td class="jt-sweep-note">${escapeHtml(trialNote(trial))}</td>`
      ].join('');
      setHtml(row, cells);
      row.dataset.status = trial.status;
      row.dataset.run = trial.run || '';
      row.classList.toggle('jt-sweep-best-row', trial.number === bestNumber);
      row.classList.toggle('jt-sweep-openable', !!trial.run);
      row.setAttribute('aria-selected', String(selected === trial.number));
      row.tabIndex = trial.run ? 0 : -1;
      row.title = trial.run ? `run ${trial.run}: click to ${selected === trial.number ? 'close' : 'show'} its run monitor` : 'its run is starting';
    }
    for (const trial of order) tbody.append(rows.get(trial.number) as HTMLTableRowElement);
    setHtml($('.jt-sweep-hint'), all.length
      ? (selected !== null && selected !== undefined ? `trial #${selected}'s run is shown below; click its row again to close it` : 'click a trial to see its run')
      : 'no trial started yet');
  }

  function renderCharts(): void {
    const data = model.get('charts') || {};
    const s = state();
    best.setEmptyText(noBestText(s));
    best.update(data);
    const points = data.best || [];
    setHtml($('.jt-best-stats'), points.length ? `best <b>${formatNumber(points[points.length - 1].best)}</b> after ${points.length} completed` : '');
    parallel.update(data, s.best ? s.best.number : null);
    const metric = escapeHtml(data.metric || 'objective');
    $('.jt-pc-title').textContent = `Parameters → ${data.metric || 'objective'}`;
    const lines = data.lines || [];
    setHtml($('.jt-pc-stats'), lines.length ? `${lines.length} trial${lines.length === 1 ? '' : 's'}` : '');
    setHtml($('.jt-pc-key'), lines.length
      ? `worse <span class="jt-pc-ramp"></span> better ${metric} · dashed: running, pruned, failed or canceled` +
        `${lines.some((l: { reported?: unknown; objective: unknown }) => l.reported && l.objective === null) ? ' · ○ the value it reported, not an objective' : ''} · click a line for its run` : '');
  }

  // Durations of running trials and the sweep's elapsed time advance every second.
  function tick(): void {
    const s = state();
    const t = frozenNow ?? (gone ? s.now || now() : now());
    shownNow = t;
    const start = s.started || s.created;
    $('[data-testid=jt-sweep-elapsed]').textContent = start ? formatDuration((s.ended || t) - start) : '';
    for (const trial of trials()) {
      if (!isActive(trial.status)) continue;
      const cell = rows.get(trial.number)?.querySelector('.jt-sweep-dur');
      if (cell) cell.textContent = trialDuration(trial, t);
    }
  }

  const frames = new FrameScheduler(dirty => {
    if (dirty.has('table')) renderTable();
    if (dirty.has('head')) renderHead();
    if (dirty.has('charts')) renderCharts();
  });
  const schedule = (part: string): void => frames.schedule(part);
  const handlers: Handlers = {
    'change:state': () => {
      const s = state();
      if (s.now) clock = { offset: s.now - Date.now() / 1000 };
      ['head', 'table', 'charts'].forEach(schedule);
    },
    'change:spec': () => ['head', 'table', 'charts'].forEach(schedule),
    'change:sweep_id': () => schedule('head'),
    'change:notice': () => schedule('head'),
    'change:cancel_state': () => {
      cancelClicked = model.get('cancel_state') === 'requested'; // else it says why not
      schedule('head');
    },
    'change:selected': () => schedule('table'),
    'change:charts': () => schedule('charts')
  };
  const unlisten = listen(model, handlers, markGone);
  handlers['change:state']();
  ['head', 'table', 'charts'].forEach(schedule);
  frames.flush();
  const timer = setInterval(tick, 1000);
  return () => {
    clearInterval(timer);
    frames.cancel();
    unlisten();
    best.destroy();
    parallel.destroy();
  };
}
