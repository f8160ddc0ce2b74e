/**
 * A chart's series as uPlot takes them, and what of them cannot be drawn: NaN, ±inf, and on
 * a log axis zero and below. Those are marked on the chart with a cross and counted under
 * it, never silently left out. Pure, so it is unit-tested in node.
 */
import type uPlot from 'uplot';

export interface ISeries {
  label: string;
  color?: string;
  x: Float64Array;
  y: Float64Array;
  /** Each point's attempt of a restarted run (1 where not given). */
  attempt?: Float64Array;
  /** An attempt before the last, drawn faded and dashed under the one that went on. */
  earlier?: boolean;
}

/** Each point's attempt, as the run view names it (1 for the first start), from the feed's
 * runs of points: [index of the run's first point, attempt counted from 0], in order. */
export function attemptOfPoints(runs: Array<[number, number]>, points: number): Float64Array {
  const out = new Float64Array(points).fill(1);
  runs.forEach(([start, attempt], k) => {
    const end = k + 1 < runs.length ? runs[k + 1][0] : points;
    out.fill(attempt + 1, Math.max(0, start), Math.min(points, end));
  });
  return out;
}

/** Each series split at the run's attempts, so a restarted run's attempts are never joined
 * by a line (on wall time) or drawn over each other unlabelled (on steps): one series per
 * attempt, labelled with it ("rank 0 · attempt 1"), those before the last ``earlier``.
 * A point's attempt is its ``attempt`` value; where the series has none, the last attempt
 * that started at or before its x, when ``starts`` gives them (wall time only). A series of
 * one attempt is kept as it is. */
export function splitAttempts(series: ISeries[], starts: number[] = []): ISeries[] {
  return series.flatMap(s => {
    const of = (i: number): number => {
      if (s.attempt && i < s.attempt.length) return s.attempt[i] || 1;
      let n = 1;
      starts.forEach((start, k) => {
        if (s.x[i] >= start) n = k + 1;
      });
      return n;
    };
    const attempts = Array.from(s.x, (_x, i) => of(i));
    const numbers = [...new Set(attempts)].sort((a, b) => a - b);
    if (numbers.length < 2) return [s];
    const latest = numbers[numbers.length - 1];
    return numbers.map(n => {
      const keep = attempts.map((a, i) => (a === n ? i : -1)).filter(i => i >= 0);
      return {
        label: `${s.label} · attempt ${n}`,
        color: s.color,
        x: Float64Array.from(keep, i => s.x[i]),
        y: Float64Array.from(keep, i => s.y[i]),
        earlier: n !== latest
      };
    });
  });
}

/** Whether ``y`` can be drawn: finite, and above zero on a log axis. */
export function drawable(y: number, logY: boolean): boolean {
  return Number.isFinite(y) && (!logY || y > 0);
}

/** Per series, the x of each value that cannot be drawn (NaN, ±inf, and zero or below on a
 * log axis): each is marked with a cross, never silently left out. */
export function undrawnMarks(series: ISeries[], logY: boolean): { marks: number[][]; nonFinite: number; nonPositive: number } {
  let nonFinite = 0;
  let nonPositive = 0;
  const marks = series.map(s => {
    const xs: number[] = [];
    s.y.forEach((y, i) => {
      if (drawable(y, logY)) return;
      if (Number.isFinite(y)) nonPositive++;
      else nonFinite++;
      xs.push(s.x[i]);
    });
    return xs;
  });
  return { marks, nonFinite, nonPositive };
}

/** The series on one x axis: the sorted union of their x values. Where a series has no
 * point at an x its value is undefined (uPlot joins the line across it); where its value is
 * NaN or ±inf (or not positive on a log axis) it is null, a gap in the line. */
export function alignSeries(series: ISeries[], logY: boolean): uPlot.AlignedData {
  const xs = Array.from(new Set(series.flatMap(s => Array.from(s.x)))).sort((a, b) => a - b);
  const where = new Map(xs.map((x, i) => [x, i]));
  const columns = series.map(s => {
    const column: Array<number | null | undefined> = new Array(xs.length).fill(undefined);
    for (let i = 0; i < s.x.length; i++) {
      const y = s.y[i];
      column[where.get(s.x[i]) as number] = drawable(y, logY) ? y : null;
    }
    return column;
  });
  return [xs, ...columns] as uPlot.AlignedData;
}
