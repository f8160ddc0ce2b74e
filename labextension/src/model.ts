/**
 * The data layer of the Training Runs panel: what the REST API returns, and the pure
 * functions that turn it into what the panel shows. No DOM and no JupyterLab imports, so
 * it is unit-tested with node's test runner.
 */

export const TERMINAL = ['completed', 'failed', 'canceled', 'lost'];
export const STAGES = ['preparing', 'queued', 'running', 'finalizing'];

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

export interface IStage {
  start: number;
  end?: number;
}

export interface IRunState {
  status: string;
  created: number;
  ended?: number;
  stages?: { [name: string]: IStage };
  failed_rank?: number | null;
  error?: string;
  traceback?: string | null;
  reason?: string;
  queue?: { reason?: string; job_id?: string };
  launcher?: { job_id?: string };
  [key: string]: unknown;
}

export interface IRunDetail {
  id: string;
  spec: {
    name: string;
    target: { name: string };
    launch: { launcher: string; nodes: number; procs: number; backend: string | null };
    env: { name: string | null; version?: string | null };
    params: { [key: string]: unknown };
  };
  state: IRunState;
  ranks: number[];
}

export interface IEvent {
  kind: string;
  t: number;
  step?: number | null;
  values?: { [name: string]: number | string };
  done?: number;
  total?: number | null;
}

export function isTerminal(status: string): boolean {
  return TERMINAL.indexOf(status) >= 0;
}

export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !isFinite(seconds)) {
    return '–';
  }
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = String(s % 60).padStart(2, '0');
  return h ? `${h}:${String(m).padStart(2, '0')}:${r}` : `${m}:${r}`;
}

/** Seconds from creation to the end, or to ``now`` for a run that goes on. */
export function runDuration(row: { created: number; ended?: number | null }, now: number): number {
  return Math.max(0, (row.ended || now) - row.created);
}

/** Each stage that happened, with its duration (open stages run until ``now``). */
export function stageDurations(state: IRunState, now: number): Array<[string, number]> {
  const out: Array<[string, number]> = [];
  for (const name of STAGES) {
    const stage = state.stages ? state.stages[name] : undefined;
    if (stage) {
      out.push([name, (stage.end || state.ended || now) - stage.start]);
    }
  }
  return out;
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

/** Where a resumed event stream starts, per rank: byte offsets of events and of logs. */
export interface IStreamFrom {
  events: ReadonlyMap<number, number>;
  logs: ReadonlyMap<number, number>;
}

/** ``?events=0:1234,1:88&logs=0:4096`` for the stream endpoint; '' when nothing was read. */
export function streamQuery(from: IStreamFrom): string {
  const params: string[] = [];
  for (const key of ['events', 'logs'] as const) {
    const pairs: string[] = [];
    from[key].forEach((offset, rank) => {
      if (offset > 0) {
        pairs.push(`${rank}:${offset}`);
      }
    });
    if (pairs.length) {
      params.push(`${key}=${encodeURIComponent(pairs.sort().join(','))}`);
    }
  }
  return params.length ? `?${params.join('&')}` : '';
}

/** A run id as the server accepts it; anything else is refused before a request is made. */
export function isValidRunId(id: string): boolean {
  return /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(id) && id.indexOf('..') < 0;
}

export interface IPoint {
  x: number;
  y: number;
}

/**
 * Metric series and progress of one run, built incrementally from event batches of each
 * rank (the REST API returns them with byte offsets).
 */
export class RunData {
  readonly offsets = new Map<number, number>();
  readonly series = new Map<string, Map<number, IPoint[]>>();
  readonly progress = new Map<number, { done: number; total: number | null }>();

  ingest(rank: number, events: IEvent[], offset: number): number {
    let added = 0;
    for (const event of events) {
      if (event.kind === 'metric' && event.values) {
        for (const name of Object.keys(event.values)) {
          const value = event.values[name];
          if (typeof value !== 'number') {
            continue;
          }
          let byRank = this.series.get(name);
          if (!byRank) {
            byRank = new Map();
            this.series.set(name, byRank);
          }
          let points = byRank.get(rank);
          if (!points) {
            points = [];
            byRank.set(rank, points);
          }
          const x = typeof event.step === 'number' ? event.step : points.length;
          points.push({ x, y: value });
          added += 1;
        }
      } else if (event.kind === 'progress' && typeof event.done === 'number') {
        this.progress.set(rank, { done: event.done, total: event.total ?? null });
      }
    }
    this.offsets.set(rank, offset);
    return added;
  }

  /** The slowest rank's fraction done, or null when no rank reported a total. */
  fraction(): number | null {
    let worst: number | null = null;
    this.progress.forEach(p => {
      if (p.total) {
        const f = Math.min(1, p.done / p.total);
        worst = worst === null ? f : Math.min(worst, f);
      }
    });
    return worst;
  }

  metricNames(): string[] {
    return Array.from(this.series.keys()).sort();
  }

  /** Rank ``rank``'s points of ``name``, downsampled for drawing. */
  points(name: string, rank: number, maxPoints = 1000): IPoint[] {
    const points = this.series.get(name)?.get(rank) || [];
    return downsample(points, maxPoints);
  }
}

/**
 * At most ``maxPoints`` points: the minimum and maximum of each bucket, in order, so
 * spikes survive; the first and last points are always kept exactly.
 */
export function downsample(points: IPoint[], maxPoints: number): IPoint[] {
  if (points.length <= maxPoints || maxPoints < 4) {
    return points.slice();
  }
  const buckets = Math.floor((maxPoints - 2) / 2);
  const inner = points.slice(1, -1);
  const size = inner.length / buckets;
  const out: IPoint[] = [points[0]];
  for (let b = 0; b < buckets; b++) {
    const chunk = inner.slice(Math.floor(b * size), Math.floor((b + 1) * size));
    if (!chunk.length) {
      continue;
    }
    let lo = chunk[0];
    let hi = chunk[0];
    for (const p of chunk) {
      if (p.y < lo.y) {
        lo = p;
      }
      if (p.y > hi.y) {
        hi = p;
      }
    }
    out.push(...(lo.x <= hi.x ? [lo, hi] : [hi, lo]).filter((p, i, a) => i === 0 || p !== a[0]));
  }
  out.push(points[points.length - 1]);
  return out;
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
