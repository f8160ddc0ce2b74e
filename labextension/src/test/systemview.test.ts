import assert from 'node:assert/strict';
import { test } from 'node:test';

import { byteLabels, byteTicks, formatFigure, sharedRange, systemColumns, yAxisOf } from '../view/systemview.js';

test('figures are shown in their units', () => {
  assert.equal(formatFigure('rss_bytes', 1.5 * 2 ** 30), '1.5 GiB');
  assert.equal(formatFigure('gpu_util_percent', 86.6), '87%');
  assert.equal(formatFigure('gpu_power_watts', 312.45), '312 W');
  assert.equal(formatFigure('gpu_temp_c', 61), '61 °C');
  assert.equal(formatFigure('gpu_sm_clock_mhz', 1980), '1980 MHz');
  assert.equal(formatFigure('cpu_percent', undefined), '–');
  assert.equal(formatFigure('cpu_percent', Number.NaN), '–');
});

test('GPU columns appear only when a rank has a GPU', () => {
  const cpu = { 0: { cpu_percent: 97, rss_bytes: 2 ** 20 } };
  assert.deepEqual(systemColumns(cpu).map(c => c[0]), ['cpu', 'memory', 'node']);
  const gpu = { 0: { gpu_index: 1, gpu_mem_used_bytes: 2 ** 30, gpu_mem_total_bytes: 2 ** 32, gpu_power_watts: 100 } };
  const columns = systemColumns(gpu);
  assert.deepEqual(columns.map(c => c[0]), ['cpu', 'memory', 'node', 'gpu', 'util', 'gpu-memory', 'power', 'temp', 'clock']);
  const cell = (key: string): string => (columns.find(c => c[0] === key) as [string, string, (f: object) => string])[2](gpu[0]);
  assert.equal(cell('gpu'), '1');
  assert.equal(cell('gpu-memory'), '1.0 GiB / 4.0 GiB');
  assert.equal(cell('power'), '100 W');
  assert.equal(cell('util'), '–');
});

test('disk and network columns appear where the ranks report them, as rates', () => {
  assert.equal(formatFigure('disk_read_bytes_per_s', 3 * 2 ** 20), '3.0 MiB/s');
  const io = { 0: { cpu_percent: 5, disk_read_bytes_per_s: 2 ** 20, disk_write_bytes_per_s: 0, node_net_rx_bytes_per_s: 2 ** 30, node_net_tx_bytes_per_s: 512 } };
  const columns = systemColumns(io);
  assert.deepEqual(columns.map(c => c[0]), ['cpu', 'memory', 'node', 'disk', 'network']);
  const cell = (key: string): string => (columns.find(c => c[0] === key) as [string, string, (f: object) => string])[2](io[0]);
  assert.equal(cell('disk'), '1.0 MiB/s / 0 B/s');
  assert.equal(cell('network'), '1.0 GiB/s / 512 B/s');
});

test('bytes read the same on the axis as in the table: in 1024s, named KiB, MiB, GiB', () => {
  assert.equal(formatFigure('disk_read_bytes_per_s', 10000), '9.8 KiB/s');
  const ticks = byteTicks(0, 10000, 4);
  assert.deepEqual(ticks, [0, 2560, 5120, 7680]);
  assert.deepEqual(byteLabels(ticks, true), ['0 KiB/s', '2.5 KiB/s', '5 KiB/s', '7.5 KiB/s']);
  assert.deepEqual(byteLabels(byteTicks(3 * 2 ** 30, 3.5 * 2 ** 30, 4)), ['3 GiB', '3.2 GiB', '3.4 GiB']);
});

test('a small or flat range of bytes has whole, distinct ticks, not "0 0 0 0"', () => {
  assert.deepEqual(byteTicks(-0.05, 0.05, 4), [0]);
  const ticks = byteTicks(0, 3, 4);
  assert.deepEqual(ticks, [0, 1, 2, 3]);
  assert.deepEqual(byteLabels(ticks), ['0 B', '1 B', '2 B', '3 B']);
});

test("the CPU axis says it is in percent, and every System chart shares the run's x range", () => {
  const labels = yAxisOf('%').yLabels as (t: number[]) => string[];
  assert.deepEqual(labels([0, 50, 100]), ['0%', '50%', '100%']);
  const chart = (name: string, xs: number[][]) => ({ name, title: name, unit: '%', ranks: xs.length, series: xs.map((x, rank) => ({ rank, x, y: x })) });
  assert.deepEqual(sharedRange([chart('cpu_percent', [[3, 4, 9], [2.5, 8]]), chart('rss_bytes', [[1.5, 12]])]), [1.5, 12]);
  assert.equal(sharedRange([]), undefined);
});
