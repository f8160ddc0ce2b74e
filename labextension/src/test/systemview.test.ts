import assert from 'node:assert/strict';
import { test } from 'node:test';

import { compactBytes, formatFigure, systemColumns } from '../view/systemview.js';

test('figures are shown in their units', () => {
  assert.equal(formatFigure('rss_bytes', 1.5 * 2 ** 30), '1.5 GB');
  assert.equal(formatFigure('gpu_util_percent', 86.6), '87%');
  assert.equal(formatFigure('gpu_power_watts', 312.45), '312 W');
  assert.equal(formatFigure('gpu_temp_c', 61), '61 °C');
  assert.equal(formatFigure('gpu_sm_clock_mhz', 1980), '1980 MHz');
  assert.equal(formatFigure('cpu_percent', undefined), '–');
  assert.equal(formatFigure('cpu_percent', Number.NaN), '–');
});

test('axis labels of bytes are short', () => {
  assert.equal(compactBytes(20000 * 2 ** 20), '19.53G');
  assert.equal(compactBytes(323194880), '308.2M');
  assert.equal(compactBytes(2048), '2K');
  assert.equal(compactBytes(0), '0');
});

test('GPU columns appear only when a rank has a GPU', () => {
  const cpu = { 0: { cpu_percent: 97, rss_bytes: 2 ** 20 } };
  assert.deepEqual(systemColumns(cpu).map(c => c[0]), ['cpu', 'memory', 'node']);
  const gpu = { 0: { gpu_index: 1, gpu_mem_used_bytes: 2 ** 30, gpu_mem_total_bytes: 2 ** 32, gpu_power_watts: 100 } };
  const columns = systemColumns(gpu);
  assert.deepEqual(columns.map(c => c[0]), ['cpu', 'memory', 'node', 'gpu', 'util', 'gpu-memory', 'power', 'temp', 'clock']);
  const cell = (key: string): string => (columns.find(c => c[0] === key) as [string, string, (f: object) => string])[2](gpu[0]);
  assert.equal(cell('gpu'), '1');
  assert.equal(cell('gpu-memory'), '1.0 GB / 4.0 GB');
  assert.equal(cell('power'), '100 W');
  assert.equal(cell('util'), '–');
});

test('disk and network columns appear where the ranks report them, as rates', () => {
  assert.equal(formatFigure('disk_read_bytes_per_s', 3 * 2 ** 20), '3.0 MB/s');
  const io = { 0: { cpu_percent: 5, disk_read_bytes_per_s: 2 ** 20, disk_write_bytes_per_s: 0, node_net_rx_bytes_per_s: 2 ** 30, node_net_tx_bytes_per_s: 512 } };
  const columns = systemColumns(io);
  assert.deepEqual(columns.map(c => c[0]), ['cpu', 'memory', 'node', 'disk', 'network']);
  const cell = (key: string): string => (columns.find(c => c[0] === key) as [string, string, (f: object) => string])[2](io[0]);
  assert.equal(cell('disk'), '1.0 MB/s / 0 B/s');
  assert.equal(cell('network'), '1.0 GB/s / 512 B/s');
});
