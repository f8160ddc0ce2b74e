/**
 * The data layer of the Training Runs panel list: what the REST API returns, and the pure
 * functions that turn it into what the list shows. No DOM and no JupyterLab imports, so
 * it is unit-tested with node's test runner.
 */

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

/** Query string of the runs list: only the filters that are set. */
export function runsQuery(filter: { status?: string; name?: string; limit?: number; offset?: number }): string {
  const params: string[] = [];
  for (const key of ['status', 'name', 'limit', 'offset'] as const) {
    const value = filter[key];
    if (value !== undefined && value !== '' && value !== null) {
      params.push(`${key}=${encodeURIComponent(String(value))}`);
    }
  }
  return params.length ? `?${params.join('&')}` : '';
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
