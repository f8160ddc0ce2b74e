import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  downsample, formatDuration, isValidRunId, RunData, runDuration, runsQuery, stageDurations,
  streamQuery, versionMismatch
} from '../model.js';

test('durations are formatted like a clock', () => {
  assert.equal(formatDuration(0), '0:00');
  assert.equal(formatDuration(61.4), '1:01');
  assert.equal(formatDuration(3725), '1:02:05');
  assert.equal(formatDuration(undefined), '–');
  assert.equal(runDuration({ created: 100, ended: null }, 130), 30);
  assert.equal(runDuration({ created: 100, ended: 110 }, 130), 10);
});

test('stage durations include open stages up to now', () => {
  const stages = stageDurations({
    status: 'running', created: 0,
    stages: { preparing: { start: 1, end: 2 }, running: { start: 2 } }
  }, 12);
  assert.deepEqual(stages, [['preparing', 1], ['running', 10]]);
});

test('only set filters reach the query string, encoded', () => {
  assert.equal(runsQuery({}), '');
  assert.equal(runsQuery({ status: 'running', name: 'a b&c', limit: 20 }),
    '?status=running&name=a%20b%26c&limit=20');
});

test('a resumed stream names each rank read so far, with its offset', () => {
  assert.equal(streamQuery({ events: new Map(), logs: new Map() }), '');
  assert.equal(streamQuery({ events: new Map([[0, 1234], [1, 0]]), logs: new Map([[1, 88], [0, 4096]]) }),
    '?events=0%3A1234&logs=0%3A4096%2C1%3A88');
});

test('run ids are checked before use', () => {
  assert.ok(isValidRunId('digits-20261122-101500-3fa2c1'));
  for (const bad of ['', '..', '../x', 'a/b', '.hidden', 'a..b', 'x'.repeat(129)]) {
    assert.equal(isValidRunId(bad), false, bad);
  }
});

test('events build per-rank series and progress incrementally', () => {
  const data = new RunData();
  data.ingest(0, [
    { kind: 'metric', t: 1, step: 0, values: { loss: 2, acc: 0.1 } },
    { kind: 'progress', t: 1, done: 1, total: 10 }
  ], 120);
  data.ingest(1, [{ kind: 'progress', t: 1, done: 5, total: 10 }], 40);
  data.ingest(0, [{ kind: 'metric', t: 2, step: 1, values: { loss: 1, note: 'x' } }], 200);
  assert.deepEqual(data.metricNames(), ['acc', 'loss']);
  assert.deepEqual(data.points('loss', 0), [{ x: 0, y: 2 }, { x: 1, y: 1 }]);
  assert.equal(data.offsets.get(0), 200);
  assert.equal(data.fraction(), 0.1);
});

test('downsampling keeps first, last and extremes', () => {
  const points = Array.from({ length: 100000 }, (_, i) => ({ x: i, y: Math.sin(i / 50) }));
  points[54321] = { x: 54321, y: 9 };
  points[777] = { x: 777, y: -9 };
  const out = downsample(points, 500);
  assert.ok(out.length <= 500);
  assert.deepEqual(out[0], points[0]);
  assert.deepEqual(out[out.length - 1], points[points.length - 1]);
  assert.ok(out.some(p => p.y === 9) && out.some(p => p.y === -9));
  for (let i = 1; i < out.length; i++) {
    assert.ok(out[i].x > out[i - 1].x);
  }
});

test('a version mismatch says how to fix it', () => {
  assert.equal(versionMismatch('0.1.0', '0.1.0'), null);
  assert.match(versionMismatch('0.1.0', '0.2.0') || '', /restart JupyterLab/);
  assert.match(versionMismatch('0.1.0', null) || '', /not answering/);
});
