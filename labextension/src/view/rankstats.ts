/**
 * Which rank a figure of the run view is of. A chart's header gives the last, minimum and
 * maximum over the ranks its chart shows (or of their mean), each naming its rank; a chip
 * gives the same over every rank that logged the metric, in the mode the charts are in.
 * The feeder summarizes a metric's ranks with the same rule (``monitor.rankstats``). Pure,
 * so it is unit-tested in node.
 */
import { escapeHtml } from './ansi.js';
import { counted, formatNumber } from './chart.js';

/** One rank's series (a chart series or a metric's rank): values may be ``"nan"``/``"inf"``. */
export interface IRankStat {
  rank: number;
  last: number | string | null;
  min: number | string | null;
  max: number | string | null;
  count?: number;
  non_finite?: number;
}

/** A chart series' figures: one rank's, or (``rank`` null) the ranks' mean. */
export type IChartStat = Omit<IRankStat, 'rank'> & { rank: number | null };

const ofOneRank = (s: IChartStat): s is IRankStat => s.rank !== null;

/** A metric's figures over some ranks, each with its rank (``monitor.rankstats.rank_summary``). */
export interface IRankSummary {
  ranks: number[];
  last: { lo: number | null; lo_rank: number | null; hi: number | null; hi_rank: number | null; non_finite: Array<[number, string]> };
  min: number | null;
  min_rank: number | null;
  max: number | null;
  max_rank: number | null;
  count: number;
  non_finite: number;
}

/** The ranks' mean (``monitor.feed``'s ``mean``, or a Mean chart's one series). */
export interface IMeanStat {
  ranks: number[];
  last: number | string | null;
  min: number | string | null;
  max: number | string | null;
  count?: number;
  non_finite?: number;
}

export type ChartMode = 'ranks' | 'mean';

const finite = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

/** The figures of ``stats`` (one per rank): the finite last values' span, the finite
 * minimum and maximum, each with its rank (the lowest on a tie), and the ranks whose last
 * value is NaN or inf. */
export function summarizeRanks(stats: IRankStat[]): IRankSummary {
  const ordered = stats.slice().sort((a, b) => a.rank - b.rank);
  const pick = (key: 'last' | 'min' | 'max', better: (a: number, b: number) => boolean): IRankStat | null => {
    let found: IRankStat | null = null;
    for (const s of ordered) {
      const v = s[key];
      if (finite(v) && (found === null || better(v, found[key] as number))) found = s;
    }
    return found;
  };
  const lo = pick('last', (a, b) => a < b);
  const hi = pick('last', (a, b) => a > b);
  const low = pick('min', (a, b) => a < b);
  const high = pick('max', (a, b) => a > b);
  return {
    ranks: ordered.map(s => s.rank),
    last: {
      lo: lo ? (lo.last as number) : null, lo_rank: lo ? lo.rank : null,
      hi: hi ? (hi.last as number) : null, hi_rank: hi ? hi.rank : null,
      non_finite: ordered.filter(s => !finite(s.last)).map(s => [s.rank, String(s.last ?? 'nan')] as [number, string])
    },
    min: low ? (low.min as number) : null, min_rank: low ? low.rank : null,
    max: high ? (high.max as number) : null, max_rank: high ? high.rank : null,
    count: Math.max(0, ...ordered.map(s => s.count || 0)),
    non_finite: ordered.reduce((n, s) => n + (s.non_finite || 0), 0)
  };
}

/** ``rank 0``, ``ranks 0–3``, ``ranks 0, 2, 5``; ``ranks 0–7 of 16`` when ``total`` is more. */
export function ranksLabel(ranks: number[], total?: number): string {
  const sorted = ranks.slice().sort((a, b) => a - b);
  let text: string;
  if (sorted.length === 1) text = `rank ${sorted[0]}`;
  else if (sorted.length > 2 && sorted[sorted.length - 1] - sorted[0] === sorted.length - 1) text = `ranks ${sorted[0]}–${sorted[sorted.length - 1]}`;
  else text = `ranks ${sorted.join(', ')}`;
  return total !== undefined && total > sorted.length ? `${text} of ${total}` : text;
}

/** What a mean is of: ``mean of 2 ranks``. */
export function meanLabel(ranks: number): string {
  return `mean of ${ranks} rank${ranks === 1 ? '' : 's'}`;
}

/** The last value(s) of a summary: ``0.5``, or the span ``0.49–0.51``, then any NaN/inf. */
export function lastText(summary: IRankSummary): string {
  const { lo, hi, non_finite: bad } = summary.last;
  const parts: string[] = [];
  if (lo !== null && hi !== null) parts.push(lo === hi ? formatNumber(lo) : `${formatNumber(lo)}–${formatNumber(hi)}`);
  const several = summary.ranks.length > 1;
  for (const [rank, value] of bad) parts.push(several ? `${formatNumber(value)} (rank ${rank})` : formatNumber(value));
  return parts.join(', ') || '–';
}

function withRank(value: number | null, rank: number | null, several: boolean): string {
  if (value === null) return '–';
  return several ? `${formatNumber(value)} (rank ${rank})` : formatNumber(value);
}

/** The whole of a summary in words, each figure with its rank (a tooltip). */
export function summaryTitle(summary: IRankSummary, label: string): string {
  const several = summary.ranks.length > 1;
  const { lo, hi, lo_rank: loRank, hi_rank: hiRank } = summary.last;
  let last = lastText(summary);
  if (several && lo !== null && hi !== null && lo !== hi) last = `${withRank(lo, loRank, true)} to ${withRank(hi, hiRank, true)}`;
  return `${label}: last ${last} · min ${withRank(summary.min, summary.min_rank, several)} · max ${withRank(summary.max, summary.max_rank, several)}` +
    (summary.count ? ` · ${counted(summary.count, 'point')}${several ? ' per rank' : ''}` : '');
}

/** A chart's header: whose figures they are, then last, min and max, each min and max with
 * its rank when the chart shows several. ``shown`` are the chart's series; ``total`` the
 * ranks that logged the metric. */
export function chartStatsHtml(shown: IChartStat[], mode: ChartMode, total: number): string {
  if (mode === 'mean' && shown.length === 1 && total > 1) {
    const s = shown[0];
    return `<span class="jt-stats-who">${meanLabel(total)}</span> · last <b>${formatNumber(s.last)}</b> · min ${formatNumber(s.min)} · max ${formatNumber(s.max)}`;
  }
  const summary = summarizeRanks(shown.filter(ofOneRank));
  const several = summary.ranks.length > 1;
  return `<span class="jt-stats-who">${escapeHtml(ranksLabel(summary.ranks, total))}</span> · last <b>${escapeHtml(lastText(summary))}</b>` +
    ` · min ${escapeHtml(withRank(summary.min, summary.min_rank, several))} · max ${escapeHtml(withRank(summary.max, summary.max_rank, several))}`;
}

/** A metric as the feeder sends it: its summary over every rank, and its ranks' mean. */
export interface IMetricRow extends IRankSummary {
  name: string;
  step?: number | null;
  mean?: IMeanStat | null;
}

/** A chip's value, whose it is and its tooltip, in the charts' mode: the ranks' mean in
 * Mean mode (for a metric several ranks logged), else the span over every rank. */
export function chipParts(metric: IMetricRow, mode: ChartMode): { value: string; who: string; title: string } {
  const mean = metric.mean;
  if (mode === 'mean' && mean && mean.ranks.length > 1) {
    const who = meanLabel(mean.ranks.length);
    return {
      value: formatNumber(mean.last), who: 'mean',
      title: `${who}: last ${formatNumber(mean.last)} · min ${formatNumber(mean.min)} · max ${formatNumber(mean.max)}` +
        (mean.count ? ` · ${counted(mean.count, 'point')}` : '')
    };
  }
  const who = ranksLabel(metric.ranks);
  return { value: lastText(metric), who, title: summaryTitle(metric, who) };
}

/** How many points a chart's series hold, each rank's own: "12 points", "12 points per
 * rank · 2 ranks", or "10–12 points per rank · 2 ranks" where the ranks logged more or less. */
export function pointsText(counts: number[]): string {
  if (counts.length < 2) return counted(counts[0] ?? 0, 'point');
  const lo = Math.min(...counts);
  const hi = Math.max(...counts);
  const per = lo === hi ? counted(lo, 'point') : `${lo.toLocaleString('en-US')}–${hi.toLocaleString('en-US')} points`;
  return `${per} per rank · ${counts.length} ranks`;
}
