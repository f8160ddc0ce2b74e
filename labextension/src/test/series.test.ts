import assert from 'node:assert/strict';
import { test } from 'node:test';

import { integerTicks } from '../view/chart.js';
import { alignSeries, undrawnMarks } from '../view/series';

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
