import assert from 'node:assert/strict';
import { test } from 'node:test';

import { counted, distinctLabels, formatDuration, formatTick, logTicks, timeTicks } from '../view/chart.js';

const labels = (lo: number, hi: number): number[] =>
  logTicks(Math.log10(lo), Math.log10(hi)).map((t: number) => Number((10 ** t).toPrecision(6)));

test('a log axis over decades is labelled at powers of ten', () => {
  assert.deepEqual(labels(0.001, 10), [0.001, 0.01, 0.1, 1, 10]);
});

test('a log axis over about a decade is labelled at 1, 2 and 5', () => {
  assert.deepEqual(labels(0.15, 1.2), [0.2, 0.5, 1]);
});

test('a log axis over less than a decade still has labels', () => {
  const ticks = labels(0.21, 0.29);
  assert.ok(ticks.length >= 2, String(ticks));
  assert.ok(ticks.every(t => t >= 0.21 && t <= 0.29), String(ticks));
  assert.ok(labels(0.52, 0.55).length >= 2);
});

test('durations are formatted like a clock', () => {
  assert.equal(formatDuration(0), '0:00');
  assert.equal(formatDuration(61.4), '1:01');
  assert.equal(formatDuration(3725), '1:02:05');
  assert.equal(formatDuration(undefined), '–');
});


test('a count of one takes the singular', () => {
  assert.equal(counted(1, 'point'), '1 point');
  assert.equal(counted(0, 'line'), '0 lines');
  assert.equal(counted(2048, 'point'), '2,048 points');
});

test('wall-time ticks are whole seconds a clock reads, never the same twice', () => {
  assert.deepEqual(timeTicks(11.2, 11.9, 4), []);
  assert.deepEqual(timeTicks(10.6, 12.4, 4), [11, 12]);
  assert.deepEqual(timeTicks(0, 12, 4), [0, 5, 10]);
  assert.deepEqual(timeTicks(0, 600, 4), [0, 300, 600]);
  for (const [lo, hi] of [[0.3, 4.1], [5, 95], [100, 4000]]) {
    const labels = timeTicks(lo, hi, 4).map(formatDuration);
    assert.equal(new Set(labels).size, labels.length, labels.join(' '));
  }
});

test('tick labels that would repeat get the digits that tell them apart', () => {
  assert.deepEqual(distinctLabels([12300, 12302, 12304], formatTick), ['12300', '12302', '12304']);
  assert.deepEqual(distinctLabels([0, 0.5, 1], formatTick), ['0', '0.5', '1']);
});
