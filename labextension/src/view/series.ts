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
