import assert from 'node:assert/strict';
import { test } from 'node:test';

import { PARAM_CHARS, paramChip, paramText, showsBackend } from '../view/runinfo';

test('hyperparameters read as the user wrote them, not as Python reprs or float noise', () => {
  assert.equal(paramText(0.1 * 0.01), '0.001');
  assert.equal(paramText(0.0010000000000000002), '0.001');
  assert.equal(paramText(3e-4), '0.0003');
  assert.equal(paramText(64), '64');
  assert.equal(paramText('adamw'), 'adamw');
  assert.equal(paramText(true), 'True');
  assert.equal(paramText(null), 'None');
  assert.equal(paramText([0.1 + 0.2, 'a']), "[0.3, 'a']");
  assert.equal(paramText({ betas: [0.9, 0.999] }), "{'betas': [0.9, 0.999]}");
});

test('a long value is cut on its chip and whole in its tooltip', () => {
  const path = `/data/${'x'.repeat(100)}`;
  const chip = paramChip('data', path);
  assert.equal(chip.text.length, PARAM_CHARS);
  assert.ok(chip.text.endsWith('…') && path.startsWith(chip.text.slice(0, -1)));
  assert.equal(chip.title, `data = ${path}`);
  assert.deepEqual(paramChip('lr', 0.001), { text: '0.001', title: 'lr = 0.001' });
});

test('a one-process python run names no backend; a distributed one does', () => {
  assert.equal(showsBackend({ launcher: 'python', nodes: 1, procs: 1, backend: 'gloo' }), false);
  assert.equal(showsBackend({ launcher: 'torchrun', nodes: 1, procs: 2, backend: 'gloo' }), true);
  assert.equal(showsBackend({ launcher: 'torchrun, hot', nodes: 1, procs: 1, backend: 'nccl' }), true);
  assert.equal(showsBackend({ launcher: 'torchrun', procs: 2 }), false);
});
