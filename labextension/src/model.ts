/**
 * The data layer of the Training Runs panel list: what the REST API returns, and the pure
 * functions that turn it into what the list shows. No DOM and no JupyterLab imports, so
 * it is unit-tested with node's test runner.
 */

import { formatNumber } from './view/chart.js';

export interface IRunRow {
  id: string;
  name: string;
  status: string;
  target: string;
  launcher: string;
  nodes: number;
  procs: number;
  created: number;
  started: number | null;
  ended: number | null;
  failed_rank: number | null;
  /** Who started the run: the Unix user, and the JupyterHub user when there was one. */
  owner?: string | null;
  hub_user?: string | null;
  /** The sweep this run is a trial of, and its number there; null for a run of its own. */
  sweep?: string | null;
  trial?: number | null;
}

export interface IRunPage {
  runs: IRunRow[];
  limit: number;
  offset: number;
  more: boolean;
}

export function runDuration(row: { created: number; ended?: number | null }, now: number): number {
  return Math.max(0, (row.ended || now) - row.created);
}

/** A run id without its name: ``train-20261124-101502-3fa2c1`` shows ``20261124-101502-3fa2c1``,
 * which tells apart two runs of one name. */
export function shortId(id: string): string {
  const match = /(\d{8}-\d{6}-[0-9a-f]+)$/.exec(id);
  return match ? match[1] : id;
}

/** When a run started, as the list shows it: the time today, else the date and time (UTC
 * offsets are the browser's). */
export function startedAt(created: number, now: number): string {
  const when = new Date(created * 1000);
  const today = new Date(now * 1000);
  const pad = (n: number): string => String(n).padStart(2, '0');
  const time = `${pad(when.getHours())}:${pad(when.getMinutes())}:${pad(when.getSeconds())}`;
  if (when.toDateString() === today.toDateString()) {
    return time;
  }
  return `${when.getFullYear()}-${pad(when.getMonth() + 1)}-${pad(when.getDate())} ${time}`;
}

export interface IListFilter {
  status?: string;
  name?: string;
  limit?: number;
  offset?: number;
  /** Runs only: 0 leaves out the runs that are trials of a sweep. */
  trials?: number;
  /** Runs only: "mine" lists only this user's runs; empty lists everyone's. */
  owner?: string;
}

/** Query string of the runs (or sweeps) list: only the filters that are set. */
export function runsQuery(filter: IListFilter): string {
  const params: string[] = [];
  for (const key of ['status', 'name', 'limit', 'offset', 'trials', 'owner'] as const) {
    const value = filter[key];
    if (value !== undefined && value !== '' && value !== null) {
      params.push(`${key}=${encodeURIComponent(String(value))}`);
    }
  }
  return params.length ? `?${params.join('&')}` : '';
}

/** A list row's owner as shown: the JupyterHub user where there is one, else the Unix user. */
export function ownerOf(row: { owner?: string | null; hub_user?: string | null }): string {
  return row.hub_user || row.owner || '';
}

/** A run id as the server accepts it; anything else is refused before a request is made. */
export function isValidRunId(id: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(id) && id.indexOf('..') < 0;
}

/** Whether the server extension matches this front end; a message with the fix if not. */
export function versionMismatch(frontend: string, server: string | null): string | null {
  if (server === null) {
    return 'The jupyter_trainer server extension is not answering. Install the Python package ' +
      'in the environment that runs JupyterLab (pip install jupyter_trainer) and restart JupyterLab.';
  }
  if (frontend !== server) {
    return `The Training Runs panel is version ${frontend} but the server extension is ` +
      `${server}. Reinstall one jupyter_trainer in JupyterLab's environment and restart ` +
      'JupyterLab, then reload this page.';
  }
  return null;
}

export interface ISweepBest {
  number: number;
  run: string;
  params: { [key: string]: unknown };
  objective: number;
}

/** One sweep in the list (``GET sweeps``): its trials counted, not listed. */
export interface ISweepRow {
  id: string;
  name: string;
  status: string;
  metric: string;
  goal: string;
  trials_started: number;
  trials_done: number;
  trials_total: number | null;
  parallel: number | null;
  counts: { [status: string]: number };
  best: ISweepBest | null;
  created: number;
  owner?: string | null;
  hub_user?: string | null;
  started: number | null;
  ended: number | null;
  error: string | null;
}

export interface ISweepPage {
  sweeps: ISweepRow[];
  limit: number;
  offset: number;
  more: boolean;
}

/** One trial of a sweep (``GET sweeps/ID``, as ``sweep show --json`` prints it). */
export interface ITrialRow {
  number: number;
  run: string | null;
  params: { [key: string]: unknown };
  status: string;
  objective: number | null;
  step: number | null;
  pruned_at: number | null;
  reason: string | null;
  duration: number | null;
  /** What a trial without an objective reported (``server.sweeps.with_reported``). */
  reported?: { value: number; step?: number | null; kind: string } | null;
}

export interface ISweepDetail {
  id: string;
  status: string;
  best: ISweepBest | null;
  counts: { [status: string]: number };
  trials_total: number | null;
  error: string | null;
  trials: ITrialRow[];
}

/** The sweep status that the list's run status filter stands for: a sweep is ``created``
 * until its driver starts it (as a run is queued) and ``interrupted`` when its driver is
 * gone (as a run is lost). */
export function sweepStatus(runStatus: string): string {
  return ({ queued: 'created', lost: 'interrupted' } as { [s: string]: string })[runStatus] ?? runStatus;
}

export type ListItem = { kind: 'run'; row: IRunRow } | { kind: 'sweep'; row: ISweepRow };

/** Runs and sweeps in one list, newest first (a sweep where it was created). */
export function mergeNewestFirst(runs: IRunRow[], sweeps: ISweepRow[]): ListItem[] {
  const items: ListItem[] = [
    ...runs.map(row => ({ kind: 'run' as const, row })),
    ...sweeps.map(row => ({ kind: 'sweep' as const, row }))
  ];
  return items.sort((a, b) => b.row.created - a.row.created);
}

/** ``3/12 trials``: ended of the total (started, while the total is not known). */
export function trialsText(row: ISweepRow): string {
  const total = row.trials_total ?? row.trials_started;
  return `${row.trials_done}/${total} trial${total === 1 ? '' : 's'}`;
}

/** Trials by status besides the completed ones, ``2 running · 1 pruned``. */
export function countsText(counts: { [status: string]: number }): string {
  return ['starting', 'running', 'pruned', 'failed', 'canceled']
    .filter(status => counts[status])
    .map(status => `${counts[status]} ${status}`).join(' · ');
}

/** A param's value: numbers as the charts show them, text as is. */
export function paramText(value: unknown): string {
  if (typeof value === 'number') {
    return formatNumber(value);
  }
  return typeof value === 'string' ? value : JSON.stringify(value);
}

/** A trial's params in one line, ``hidden=64 lr=0.013486``, keys in order. */
export function paramsText(params: { [key: string]: unknown }): string {
  return Object.keys(params).sort().map(key => `${key}=${paramText(params[key])}`).join(' ');
}

/** The best objective so far, ``best val_acc 0.91 (#3)``; null before a trial completed. */
export function bestText(row: { metric: string; best: ISweepBest | null }): string | null {
  return row.best ? `best ${row.metric} ${formatNumber(row.best.objective)} (#${row.best.number})` : null;
}

/** Why a trial ended as it did (pruned, failed, canceled), for its tooltip. */
export function trialNote(trial: ITrialRow): string {
  if (trial.reason) {
    return trial.reason;
  }
  return trial.status === 'pruned' && trial.pruned_at !== null ? `pruned at step ${trial.pruned_at}` : '';
}

/** The cell "Attach in notebook" inserts for a run or a sweep: plain Python, so it works
 * whether or not the notebook loaded the %train magics. */
export function attachSource(kind: 'run' | 'sweep', id: string): string {
  return `import jupyter_trainer\njupyter_trainer.${kind === 'sweep' ? 'get_sweep' : 'get_run'}(${JSON.stringify(id)}).monitor()`;
}
