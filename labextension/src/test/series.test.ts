import assert from 'node:assert/strict';
import { test } from 'node:test';

import { integerTicks } from '../view/chart.js';
import { alignSeries, attemptOfPoints, splitAttempts, undrawnMarks } from '../view/series';

const series = (ys: number[]) => ({ label: 'rank 0', x: Float64Array.from(ys.map((_y, i) => i)), y: Float64Array.from(ys) });

test('steps are labelled with whole numbers, never 0.2 or 2.5', () => {
  assert.deepEqual(integerTicks(0, 3, 4), [0, 1, 2, 3]);
  assert.deepEqual(integerTicks(0, 1, 4), [0, 1]);
  assert.deepEqual(integerTicks(0, 5, 2), [0, 5]);
  assert.deepEqual(integerTicks(0, 7, 4), [0, 2, 4, 6]);
  assert.deepEqual(integerTicks(-0.2, 2.7, 4), [0, 1, 2]);
  assert.deepEqual(integerTicks(0, 999, 5), [0, 200, 400, 600, 800]);
  assert.deepEqual(integerTicks(5, 5, 4), [5]);
  for (const [lo, hi, n] of [[0, 10, 4], [0, 25, 3], [3, 1e6, 6], [0, 2, 8]]) {
    assert.ok(integerTicks(lo, hi, n).every(Number.isInteger), `${lo}..${hi}`);
  }
});

test('on a log axis zero and negative values are marked and counted, as NaN and inf are', () => {
  const s = series([1, 0, 0.5, -2, NaN, Infinity, 3]);
  const log = undrawnMarks([s], true);
  assert.deepEqual(log.marks, [[1, 3, 4, 5]]);
  assert.deepEqual([log.nonFinite, log.nonPositive], [2, 2]);
  const linear = undrawnMarks([s], false);
  assert.deepEqual(linear.marks, [[4, 5]]);
  assert.deepEqual([linear.nonFinite, linear.nonPositive], [2, 0]);
  assert.deepEqual(alignSeries([s], true)[1], [1, null, 0.5, null, null, null, 3]);
});

const attemptSeries = (x: number[], attempt?: number[]) => ({
  label: 'rank 0', color: '#1f77b4', x: Float64Array.from(x), y: Float64Array.from(x.map(v => v * 10)),
  attempt: attempt ? Float64Array.from(attempt) : undefined
});

test("a restarted run's attempts are lines of their own, the earlier one marked and named", () => {
  // steps 0..3 in attempt 1, then steps 2..4 again in attempt 2 (resumed from a checkpoint)
  const split = splitAttempts([attemptSeries([0, 1, 2, 3, 2, 3, 4], [1, 1, 1, 1, 2, 2, 2])]);
  assert.deepEqual(split.map(s => [s.label, Array.from(s.x), !!s.earlier]), [
    ['rank 0 · attempt 1', [0, 1, 2, 3], true],
    ['rank 0 · attempt 2', [2, 3, 4], false]
  ]);
  assert.deepEqual(Array.from(split[1].y), [20, 30, 40]);
  // on wall time the attempts are apart: attempt 1's line ends where it ended
  const [, first, second] = alignSeries(splitAttempts([attemptSeries([1, 2, 30, 31], [1, 1, 2, 2])]), false);
  assert.deepEqual([first, second], [[10, 20, undefined, undefined], [undefined, undefined, 300, 310]]);
});

test('on wall time, points without an attempt are split where each attempt started', () => {
  const split = splitAttempts([attemptSeries([1, 2, 3, 10, 11])], [0, 9]);
  assert.deepEqual(split.map(s => [s.label, Array.from(s.x)]), [['rank 0 · attempt 1', [1, 2, 3]], ['rank 0 · attempt 2', [10, 11]]]);
  const once = attemptSeries([1, 2, 3]);
  assert.deepEqual(splitAttempts([once], [0]), [once]);
  assert.deepEqual(splitAttempts([once]), [once]);
});

test("the feed's runs of points give each point its attempt, named from 1", () => {
  assert.deepEqual(Array.from(attemptOfPoints([[0, 0]], 3)), [1, 1, 1]);
  assert.deepEqual(Array.from(attemptOfPoints([[0, 0], [4, 1]], 7)), [1, 1, 1, 1, 2, 2, 2]);
  assert.deepEqual(Array.from(attemptOfPoints([[0, 1], [2, 3]], 4)), [2, 2, 4, 4]);
  const split = splitAttempts([attemptSeries([0, 1, 2, 3, 4], Array.from(attemptOfPoints([[0, 0], [3, 1]], 5)))]);
  assert.deepEqual(split.map(s => s.label), ['rank 0 · attempt 1', 'rank 0 · attempt 2']);
});
