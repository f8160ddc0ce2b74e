/**
 * The run view: header, parameters, stage timeline, progress with rate and ETA, metric
 * charts with chips and switches, text metrics, per-rank logs, failure banner, stalled
 * ranks, restarts and first NaN/inf values (``health``), outputs and Cancel; the Metrics
 * section is ``metricsview``. Written once; the notebook widget (anywidget, kernel
 * messages) and the Lab panel's main-area view (a WebSocket to the server) both mount it on a model with the
 * anywidget model's methods, and the Python side (``monitor.feeder``) fills both alike.
 */
import { formatBytes, formatDuration, formatNumber } from './chart.js';
import { type LogLine, LogView } from './logview.js';
import { paramChip, showsBackend } from './runinfo';
import { ansiToHtml, escapeHtml } from './ansi.js';
import { type IHealthParts, renderHealth, tickHealth } from './health';
import { MetricsSection } from './metricsview';
import { SystemSection } from './systemview';
import { costText, money } from './cost';
import type { IRunState, IRunTraits, IStage } from './runtraits';
import type { IViewModel } from './viewmodel';
import { FrameScheduler, type Handlers, askBeforeCancel, listen, showCancel } from './viewparts';

/** What the run view reads and writes. */
export type IRunModel = IViewModel<IRunTraits>;

export interface IViewOptions {
  /** Said when the model's connection is gone (kernel restarted, server stopped). */
  goneText?: string;
}

interface ILogStore {
  gen: number | null;
  end: number;
  lines: LogLine[];
  listeners: Set<(event: ILogEvent | null) => void>;
  search: string;
  logY: boolean;
  maxLines: number;
  ranks?: number[];
  skipped?: number;
  selection?: string;
}
interface ILogEvent {
  reset?: boolean;
  append?: LogLine[];
}

const STAGE_NAMES = ['preparing', 'queued', 'running', 'finalizing'];
const TERMINAL = ['completed', 'failed', 'canceled', 'lost'];
const ended = (status: string | undefined): boolean => status !== undefined && TERMINAL.includes(status);
/** Seconds without any word from a live run's feeder (it sends its state every 5 s)
 * after which the view says its connection is gone. */
const SILENT_S = 16;
// What the views of one widget share (log lines, view settings), by the widget's key: the
// model objects handed to initialize() and render() are not the same JS object.
const STORES = new Map<string, ILogStore>();

function storeFor(model: IRunModel): ILogStore {
  const key = model.get('key') || model.get('run_id') || '';
  let store = STORES.get(key);
  if (!store) {
    store = { gen: null, end: 0, lines: [], listeners: new Set(), search: '', logY: false, maxLines: 2000 };
    STORES.set(key, store);
  }
  return store;
}

// Log payloads are deltas ({gen, start, end, reset, lines}); a gap (a reload, a missed
// update) asks the kernel for the whole bounded tail again.
export function ingestLog(model: IRunModel): void {
  const store = storeFor(model);
  const p = model.get('log');
  if (p?.gen === undefined) return;
  store.maxLines = p.max_lines || store.maxLines;
  let event: ILogEvent | null = null;
  if (p.reset) {
    Object.assign(store, { gen: p.gen, end: p.end, lines: p.lines.slice() });
    event = { reset: true };
  } else if (p.gen !== store.gen || p.start > store.end) {
    try {
      model.send({ type: 'log_resync' });
    } catch {
      // the connection is gone: the view says so on its next tick
    }
    return;
  } else if (p.end > store.end) {
    const fresh: LogLine[] = p.lines.slice(store.end - p.start);
    store.lines.push(...fresh);
    store.end = p.end;
    event = { append: fresh };
  } else {
    return;
  }
  if (store.lines.length > store.maxLines) store.lines.splice(0, store.lines.length - store.maxLines);
  store.ranks = p.ranks || [];
  store.skipped = p.skipped_bytes || 0;
  store.selection = p.selection;
  for (const listener of store.listeners) listener(event);
}

/** Draw the run of ``model`` into ``root``; returns the function that takes it down. */
export function mountRunView(root: HTMLElement, model: IRunModel, options: IViewOptions = {}): () => void {
  const store = storeFor(model);
  root.innerHTML = `
    <div class="jt-head">
      <div class="jt-head-main">
        <span class="jt-badge" data-testid="jt-status"></span>
        <span class="jt-chip jt-attempt-chip" data-testid="jt-attempt" hidden></span>
        <span class="jt-name" data-testid="jt-name"></span>
        <code class="jt-runid" data-testid="jt-run-id" title="run id: %train attach RUN"></code>
        <span class="jt-spacer"></span>
        <span class="jt-cost jt-muted" data-testid="jt-cost" hidden></span>
        <span class="jt-elapsed" data-testid="jt-elapsed" title="elapsed"></span>
        <button type="button" class="jt-button jt-danger" data-testid="jt-cancel">Cancel</button>
      </div>
      <div class="jt-meta" data-testid="jt-meta"></div>
      <div class="jt-params" data-testid="jt-params"></div>
      <div class="jt-source jt-muted" data-testid="jt-source" hidden></div>
      <div class="jt-source jt-muted" data-testid="jt-data" hidden></div>
      <ul class="jt-staging" data-testid="jt-staging" hidden></ul>
      <div class="jt-notice" hidden></div>
    </div>
    <div class="jt-stall" data-testid="jt-stall" role="alert" hidden></div>
    <div class="jt-banner" data-testid="jt-banner" hidden></div>
    <div class="jt-outputs" data-testid="jt-outputs" hidden></div>
    <ol class="jt-stages" data-testid="jt-stages"></ol>
    <div class="jt-attempts" data-testid="jt-attempts" hidden></div>
    <div class="jt-progress">
      <div class="jt-bar"><div class="jt-bar-fill" data-testid="jt-progress-fill"></div></div>
      <div class="jt-progress-text" data-testid="jt-progress-text"></div>
    </div>
    <section class="jt-section">
      <div class="jt-section-head"><span class="jt-section-title">Metrics</span><span class="jt-muted jt-metrics-note"></span><span class="jt-spacer"></span><span class="jt-chart-controls"></span></div>
      <div class="jt-nonfinite" data-testid="jt-non-finite" role="status" hidden></div>
      <div class="jt-chips" data-testid="jt-metric-chips"></div>
      <table class="jt-texts" data-testid="jt-text-metrics" hidden></table>
      <div class="jt-charts" data-testid="jt-charts"></div>
    </section>
    <section class="jt-section" data-testid="jt-system" hidden>
      <div class="jt-section-head"><span class="jt-section-title">System</span><span class="jt-muted jt-system-note"></span></div>
      <div class="jt-system-hints" data-testid="jt-system-hints" hidden></div>
      <table class="jt-system-table" data-testid="jt-system-table"></table>
      <div class="jt-charts jt-system-charts" data-testid="jt-system-charts"></div>
    </section>
    <section class="jt-section">
      <div class="jt-section-head"><span class="jt-section-title">Logs</span></div>
      <div class="jt-log-slot"></div>
    </section>`;
  const $ = (sel: string): HTMLElement => root.querySelector(sel) as HTMLElement;
  const cancel = $('[data-testid=jt-cancel]') as HTMLButtonElement;
  const health: IHealthParts = {
    stall: $('[data-testid=jt-stall]'), attempts: $('[data-testid=jt-attempts]'),
    chip: $('[data-testid=jt-attempt]'), nonFinite: $('[data-testid=jt-non-finite]')
  };
  let clock = { offset: 0 }; // feeder's time - browser time, from the last state
  let cancelClicked = false;
  let heard = Date.now(); // when the model last changed
  let gone = ''; // why the model's connection is gone, once it is
  let shownNow: number | null = null; // the clock as last shown (the feeder's time)
  let frozenNow: number | null = null; // where the clock stopped once the connection was gone

  const send = (content: unknown): boolean => {
    try {
      model.send(content);
      return true;
    } catch {
      markGone(); // "Cannot send": the kernel or the server is gone
      return false;
    }
  };
  const metrics = new MetricsSection(root, model, store);
  const system = new SystemSection($('[data-testid=jt-system]'), model);

  const logs = new LogView($('.jt-log-slot'), {
    maxLines: store.maxLines,
    onSelect: (sel: string) => {
      model.set('log_selection', sel);
      model.save_changes();
    }
  });
  logs.search.addEventListener('input', () => {
    store.search = logs.search.value;
  });
  logs.setSearch(store.search);
  const onLog = (event: ILogEvent | null): void => {
    heard = Date.now();
    logs.setRanks(store.ranks || [], model.get('log_selection'));
    logs.setNote(store.skipped ? 'newest lines only — the whole log: %train logs RUN' : '');
    if (!event || event.reset) logs.setLines(store.lines);
    else logs.append(event.append || []);
  };
  store.listeners.add(onLog);
  onLog(null);

  askBeforeCancel(cancel, {
    question: () => {
      const name = model.get('info')?.name;
      const id = escapeHtml(model.get('run_id') || '');
      return name ? `Cancel run <b>${escapeHtml(name)}</b> (<code>${id}</code>)?` : `Cancel run <code>${id}</code>?`;
    },
    detail: 'Every rank is stopped; what it wrote so far is kept.',
    confirm: 'Cancel run',
    onConfirm: () => {
      cancelClicked = true;
      showCancel(cancel, { ended: false, gone: '', pressed: true, title: '' });
      send({ type: 'cancel' });
    }
  });

  /** The kernel (or server) that fed this view is gone: show its last state as such, its
   * clock stopped where it was (never set back to the last state's time). */
  function markGone(): void {
    if (gone || ended(model.get('state')?.status)) return;
    gone = (options.goneText || 'no connection: this is what the run looked like last')
      .replace('%train attach RUN', `%train attach ${model.get('run_id') || 'RUN'}`);
    frozenNow = shownNow;
    schedule('head');
  }

  function renderHead(): void {
    const info = model.get('info') || {};
    const state = model.get('state') || {};
    const status: string = state.status || 'created';
    logs.setFinished(ended(status));
    const badge = $('[data-testid=jt-status]');
    badge.textContent = gone ? `${status}?` : status;
    badge.className = `jt-badge jt-status-${gone ? 'unknown' : status}`;
    badge.title = gone ? `last known status: ${status}` : '';
    root.classList.toggle('jt-gone', !!gone);
    $('[data-testid=jt-name]').textContent = info.name || '';
    $('[data-testid=jt-run-id]').textContent = model.get('run_id') ?? '';
    const env = info.environment || {};
    const kernelEnv = env.name === 'kernel' || !env.name;
    let envText = kernelEnv ? "kernel's Python" : `env <b>${escapeHtml(env.name)}</b>${env.version ? `@${escapeHtml(String(env.version).slice(0, 12))}` : ''}`;
    if (!kernelEnv && env.built === true) envText += env.build_seconds ? ` (built in ${formatNumber(env.build_seconds)} s)` : ' (built)';
    else if (!kernelEnv && env.built === false) envText += ' (cached)';
    const parts = [`target <b>${escapeHtml(info.target || '?')}</b>`, escapeHtml(info.launcher || ''),
      `${info.nodes || 1} node${(info.nodes ?? 1) > 1 ? 's' : ''} × ${info.procs || 1} proc${(info.procs ?? 1) > 1 ? 's' : ''}`,
      info.owner ? `by <b>${escapeHtml(info.owner)}</b>` : '',
      showsBackend(info) ? `backend ${escapeHtml(info.backend || '')}` : '', envText];
    const envTitle = [env.python, env.python_version && `Python ${env.python_version}`, env.torch && `torch ${env.torch}`].filter(Boolean).join(' · ');
    $('[data-testid=jt-meta]').innerHTML = parts.filter(Boolean)
      .map((p, i, all) => `<span${i === all.length - 1 ? ` title="${escapeHtml(envTitle)}"` : ''}>${p}</span>`)
      .join('<span class="jt-dot">·</span>');
    const params = Object.entries(info.params || {});
    $('[data-testid=jt-params]').innerHTML = params.length
      ? params.map(([k, v]) => {
        const chip = paramChip(k, v);
        return `<span class="jt-chip jt-param-chip" title="${escapeHtml(chip.title)}"><span class="jt-muted">${escapeHtml(k)}</span> <span class="jt-param-value">${escapeHtml(chip.text)}</span></span>`;
      }).join('')
      : '<span class="jt-muted">no hyperparameters</span>';
    const source = $('[data-testid=jt-source]');
    source.textContent = info.source || '';
    source.hidden = !info.source;
    const data = $('[data-testid=jt-data]');
    data.textContent = info.data || '';
    data.hidden = !info.data;
    const terminal = ended(status);
    showCancel(cancel, { ended: terminal, gone: gone || info.read_only || '', pressed: cancelClicked, title: '' });
    const notice = $('.jt-notice');
    notice.dataset.testid = 'jt-notice';
    notice.textContent = gone || model.get('notice') || (terminal ? '' : info.read_only || '');
    notice.hidden = !notice.textContent;
    renderBanner(state);
    renderHealth(health, state, state.now || Date.now() / 1000, model.get('run_id') || '');
    renderOutputs(state);
    renderStaging(state);
    tick();
  }

  function renderStaging(state: IRunState): void {
    // While the run prepares: each data input's copy to each node (bytes, rate, cached).
    const box = $('[data-testid=jt-staging]');
    const rows = state.staging || [];
    box.hidden = !rows.length || !(state.status === 'created' || state.status === 'preparing');
    if (box.hidden) return;
    const html = rows.map(r => `<li data-state="${escapeHtml(r.state || '')}">${escapeHtml(r.text)}</li>`).join('');
    if (box.innerHTML !== html) box.innerHTML = html;
  }

  function renderOutputs(state: IRunState): void {
    // Once the run ended: what it left in outputs/ (model.pt, ...), and where.
    const box = $('[data-testid=jt-outputs]');
    const out = state.outputs;
    box.hidden = !out;
    if (!out) return;
    const files: Array<{ path: string; bytes: number }> = out.files || [];
    const html = `<span class="jt-section-title">Outputs</span> <span class="jt-muted" title="${escapeHtml(out.folder)}">${escapeHtml(out.folder)}</span>` +
      (files.length ? `<ul>${files.map(f => `<li data-path="${escapeHtml(f.path)}"><code>${escapeHtml(f.path)}</code> <span class="jt-muted">${formatBytes(f.bytes)}</span></li>`).join('')}</ul>`
        : ' <span class="jt-muted">(empty)</span>');
    if (box.innerHTML !== html) box.innerHTML = html;
  }

  function renderBanner(state: IRunState): void {
    const banner = $('[data-testid=jt-banner]');
    const status = state.status;
    const rank = state.failed_rank !== null && state.failed_rank !== undefined ? state.failed_rank : null;
    if (status === 'failed' || status === 'lost') {
      const who = rank !== null ? `Rank ${rank} failed first` : `Run ${status}`;
      banner.className = 'jt-banner jt-banner-error';
      banner.innerHTML = `<div class="jt-banner-title">${escapeHtml(who)}: ${escapeHtml(state.error || 'unknown error')}</div>` +
        (state.traceback ? `<details open><summary>Traceback${rank !== null ? ` of rank ${rank}` : ''}</summary><pre class="jt-traceback">${ansiToHtml(state.traceback)}</pre></details>` : '') +
        (state.frames ? `<details data-testid="jt-frames"><summary>Variables of each frame${rank !== null ? ` of rank ${rank}` : ''}</summary><pre class="jt-traceback">${escapeHtml(state.frames)}</pre></details>` : '');
      banner.hidden = false;
    } else if (status === 'canceled') {
      banner.className = 'jt-banner jt-banner-muted';
      banner.innerHTML = `<div class="jt-banner-title">Canceled${state.reason ? `: ${escapeHtml(state.reason)}` : ''}</div>`;
      banner.hidden = false;
    } else {
      banner.hidden = true;
    }
  }

  // Durations that are still running advance every second without a message; a live run
  // whose feeder fell silent is one whose kernel or server is gone.
  function tick(): void {
    const state = model.get('state') || {};
    const terminal = ended(state.status);
    if (!terminal && !gone && Date.now() - heard > SILENT_S * 1000) markGone();
    const now = frozenNow ?? (gone ? state.now || Date.now() / 1000 : Date.now() / 1000 + clock.offset);
    shownNow = now;
    const end = state.ended || now;
    $('[data-testid=jt-elapsed]').textContent = state.created ? formatDuration(end - state.created) : '';
    const cost = $('[data-testid=jt-cost]');
    cost.hidden = !state.cost;
    if (state.cost) {
      cost.textContent = costText(state.cost);
      cost.title = `${state.cost.units} ${state.cost.unit}${state.cost.units === 1 ? '' : 's'} at ${money(state.cost.rate, state.cost.currency)} an hour`;
    }
    tickHealth(health, end);
    const byName: { [name: string]: IStage } = Object.fromEntries((state.stages || []).map(s => [s.name, s]));
    const reached = Math.max(-1, ...STAGE_NAMES.map((n, i) => (byName[n] ? i : -1)));
    const items = STAGE_NAMES.map((name, i) => {
      const s = byName[name];
      let cls = 'jt-stage-pending';
      let text = '';
      if (s) {
        const done = s.end !== null && s.end !== undefined;
        cls = done || terminal ? 'jt-stage-done' : 'jt-stage-active';
        text = formatSeconds((s.end ?? (terminal ? end : now)) - s.start);
      } else if (terminal || i < reached) {
        cls = 'jt-stage-skipped';
      }
      return `<li class="jt-stage ${cls}" data-stage="${name}"><span class="jt-stage-name">${name}</span><span class="jt-stage-time">${text}</span></li>`;
    });
    if (terminal) items.push(`<li class="jt-stage jt-stage-end jt-status-${state.status}"><span class="jt-stage-name">${escapeHtml(state.status)}</span></li>`);
    const list = $('[data-testid=jt-stages]');
    const html = items.join('');
    if (list.innerHTML !== html) list.innerHTML = html;
  }

  function renderProgress(): void {
    const p = model.get('progress') || {};
    const state = model.get('state') || {};
    const fill = $('[data-testid=jt-progress-fill]');
    const text = $('[data-testid=jt-progress-text]');
    fill.className = `jt-bar-fill jt-status-${state.status || 'created'}`;
    if (p.done === undefined) {
      fill.style.width = '0%';
      fill.dataset.fraction = '0';
      // Ranks take seconds to start (imports, rendezvous): only a run that ended without any
      // progress was one that never called it.
      const hint = ended(state.status)
        ? 'no progress was reported (call <code>jt.progress(done, total)</code> in the loop to see it here)'
        : state.status === 'running'
          ? 'waiting for the first <code>jt.progress(done, total)</code> from the ranks'
          : 'the ranks are not started yet';
      text.innerHTML = `<span class="jt-muted">${hint}</span>`;
      return;
    }
    const fraction = p.total ? Math.min(1, p.done / p.total) : null;
    fill.style.width = fraction === null ? '100%' : `${(fraction * 100).toFixed(1)}%`;
    fill.classList.toggle('jt-indeterminate', fraction === null && !ended(state.status) && !gone);
    fill.dataset.fraction = String(fraction ?? 0);
    const parts = [fraction !== null ? `${formatNumber(p.done)} / ${formatNumber(p.total)} (${(fraction * 100).toFixed(0)}%)` : `${formatNumber(p.done)} done`];
    if (p.rate) parts.push(`${Number(p.rate.toPrecision(3))} steps/s`);
    if (p.eta !== null && p.eta !== undefined && !ended(state.status) && !gone) parts.push(`ETA ${formatDuration(p.eta)}`);
    if (p.ranks && p.ranks > 1) parts.push(`slowest of ${p.ranks} ranks`);
    text.textContent = parts.join('  ·  ');
  }

  const frames = new FrameScheduler(dirty => {
    if (dirty.has('head')) renderHead();
    if (dirty.has('progress') || dirty.has('head')) renderProgress();
    if (dirty.has('charts')) metrics.render();
    if (dirty.has('system')) system.render();
  });
  const schedule = (part: string): void => frames.schedule(part);
  const heardFrom = (fn: () => void) => () => {
    heard = Date.now();
    fn();
  };
  const handlers: Handlers = {
    'change:state': heardFrom(() => {
      const state = model.get('state') || {};
      if (state.now) clock = { offset: state.now - Date.now() / 1000 };
      schedule('head');
    }),
    'change:info': heardFrom(() => schedule('head')),
    'change:notice': heardFrom(() => schedule('head')),
    'change:cancel_state': heardFrom(() => {
      cancelClicked = !!model.get('cancel_state');
      schedule('head');
    }),
    'change:progress': heardFrom(() => schedule('progress')),
    'change:run_id': heardFrom(() => schedule('head')),
    'change:metrics': heardFrom(() => schedule('charts')),
    'change:texts': heardFrom(() => schedule('charts')),
    'change:system': heardFrom(() => schedule('system')),
    'change:charts': heardFrom(() => schedule('charts')),
    'change:loading': heardFrom(() => schedule('charts')),
    // the chips follow the chosen mode at once; the charts when the feeder answers
    'change:chart_options': () => schedule('charts'),
    'change:log_selection': () => logs.setRanks(store.ranks || [], model.get('log_selection'))
  };
  const unlisten = listen(model, handlers, markGone);
  handlers['change:state']();
  ['head', 'progress', 'charts', 'system'].forEach(schedule);
  frames.flush();
  const timer = setInterval(tick, 1000);
  return () => {
    clearInterval(timer);
    frames.cancel();
    unlisten();
    logs.dispose();
    store.listeners.delete(onLog);
    metrics.destroy();
    system.destroy();
  };
}

/** Ask for the whole log tail again once a view is mounted (a reload, a late view). */
export function resyncLog(model: IRunModel): void {
  const store = storeFor(model);
  if (store.gen !== null) return;
  if (model.get('log')?.reset) ingestLog(model);
  else model.send({ type: 'log_resync' });
}

/** A hyperparameter as the notebook wrote it (Python literals, not JSON). */
function formatSeconds(s: number): string {
  if (!Number.isFinite(s)) return '';
  return s < 60 ? `${s.toFixed(s < 10 ? 1 : 0)} s` : formatDuration(s);
}
