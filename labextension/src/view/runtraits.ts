/**
 * The run view's traits, as the kernel's ``RunMonitor`` and the server's view feed send them
 * (``frontends/views``), and the launch form's (``frontends/widgets/form.py``).
 */
import type { LogLine } from './logview';
import type { IChartStat, IMetricRow } from './rankstats';

/** A log delta: lines ``start``..``end`` of generation ``gen`` (all of them when ``reset``). */
export interface ILogPayload {
  gen?: number;
  start: number;
  end: number;
  reset?: boolean;
  lines: LogLine[];
  max_lines?: number;
  ranks?: number[];
  skipped_bytes?: number;
  selection?: string;
}

export interface IEnvironmentInfo {
  name?: string;
  version?: string | number;
  built?: boolean;
  build_seconds?: number;
  python?: string;
  python_version?: string;
  torch?: string;
}

/** What the run was launched with. */
export interface IRunInfo {
  name?: string;
  target?: string;
  launcher?: string;
  nodes?: number;
  procs?: number;
  backend?: string;
  environment?: IEnvironmentInfo;
  params?: { [name: string]: unknown };
  source?: string;
  data?: string;
  owner?: string | null;
  /** Why this user may not cancel the run (another user's run); empty when they may. */
  read_only?: string;
}

export interface IStage {
  name: string;
  start: number;
  end?: number | null;
}

/** One start of the ranks: the first, and each restart after a failure. */
export interface IAttempt {
  attempt: number;
  start: number | null;
  end: number | null;
  failed_rank: number | null;
  error: string | null;
}

/** A rank with no progress for the stall timeout (views/health.py). */
export interface IStall {
  rank: number;
  seconds: number | null;
  since: number | null;
  last_step: number | null;
  host?: string;
  stack?: string | null;
  waiting?: boolean;
  /** The innermost frame of the user's own code in its stack (a cell's, or a snapshot
   * file's), which the supervisor finds; else the stack's innermost frame is named. */
  frame?: { function: string; file: string; line: number } | null;
  /** Its GPU has idled for the stall timeout while another rank's worked. */
  gpu_idle?: { since: number; util: number; own?: boolean; watts?: number; limit?: number } | null;
}

/** A metric that became NaN or inf (--stop-on-nan). */
export interface INonFinite {
  metric: string;
  rank: number;
  step: number | null;
  value: string;
}

/** A rank that waits in a debugger (views/health.py ``debugging_of``). */
export interface IDebugging {
  rank: number;
  host?: string | null;
  where?: string | null;
  since?: number | null;
  until?: number | null;
  attached?: boolean;
}

export interface IRunState {
  status?: string;
  now?: number;
  created?: number;
  ended?: number | null;
  error?: string | null;
  reason?: string | null;
  traceback?: string | null;
  frames?: string | null;
  failed_rank?: number | null;
  stages?: IStage[];
  staging?: Array<{ text: string; state?: string }>;
  outputs?: { folder: string; files?: Array<{ path: string; bytes: number }> } | null;
  attempts?: IAttempt[];
  max_restarts?: number;
  stalled?: IStall[];
  debugging?: IDebugging[];
  stall_timeout?: number | null;
  on_stall?: string | null;
  stacks?: { [rank: string]: string } | null;
  /** views/collectives_text.py: the ranks' collective dumps analysed (docs/hangs.md). */
  collectives?: { verdict: string; behind?: number[]; op?: string | null; seq?: number | null } | null;
  non_finite?: INonFinite[];
  stop_on_nan?: string[];
  /** views/cost.py: what the run has cost, and will have when done; null without a price. */
  cost?: { so_far: number; projected: number | null; currency: string; units: number; unit: string; rate: number } | null;
}

export interface IProgress {
  done?: number;
  total?: number | null;
  rate?: number | null;
  eta?: number | null;
  ranks?: number;
}

/** The reader's chart settings (the view sets them; the feeder answers with ``charts``). */
export interface IChartOptions {
  x?: string;
  agg?: string;
  selected?: string[] | null;
}

/** A series' values: a DataView (kernel message buffers), base64 (WebSocket), or floats. */
export type SeriesValues = DataView | Float64Array | string | null;

/** A chart's series: one rank's, or (rank ``null``) the ranks' mean. */
export interface IChartSeries extends IChartStat {
  label: string;
  x: SeriesValues;
  y: SeriesValues;
  /** A restarted run's attempts: [index of its first point in x and y, attempt (0 is the
   * first start)] of each attempt's run of points, in order; absent: one attempt (or, on
   * wall time, the attempt that had started by then). */
  attempts?: Array<[number, number]>;
  points: number;
}

/** One metric's chart, and how many ranks logged the metric. */
export interface IChart {
  series: IChartSeries[];
  ranks: number;
}

export interface IChartsPayload {
  x?: string;
  selected?: string[];
  charts?: { [metric: string]: IChart };
}

/** One figure's chart in the System section: a line per rank, x in seconds since creation. */
export interface ISystemChart {
  name: string;
  title: string;
  unit: string;
  ranks: number;
  series: Array<{ rank: number; x: number[]; y: number[] }>;
}

/** What views/system_view.py sends: the charts, each rank's newest figures (by rank, then
 * figure name), the ranks whose GPU is idle while the others' work. */
export interface ISystemPayload {
  charts: ISystemChart[];
  latest: { [rank: string]: { [figure: string]: number } };
  idle: number[];
  hints?: string[];
  samples: number;
}

export interface IRunTraits {
  run_id: string;
  key: string;
  mode: string;
  log: ILogPayload;
  log_selection: string;
  state: IRunState;
  info: IRunInfo;
  notice: string;
  progress: IProgress;
  cancel_state: string | boolean | null;
  metrics: IMetricRow[];
  texts: { [name: string]: { [rank: string]: string } };
  system: ISystemPayload;
  chart_options: IChartOptions;
  charts: IChartsPayload;
  loading: boolean;
}
