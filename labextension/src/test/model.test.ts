import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  attachSource, isValidRunId, ownerOf, runDuration, runsQuery, shortId, startedAt, versionMismatch
} from '../model.js';

test('only set filters reach the query string, encoded', () => {
  assert.equal(runsQuery({}), '');
  assert.equal(runsQuery({ status: 'running', name: 'a b&c', limit: 20 }),
    '?status=running&name=a%20b%26c&limit=20');
});

test('the owner filter reaches the query string, and a row shows its Hub user first', () => {
  assert.equal(runsQuery({ owner: 'mine', status: 'failed' }), '?status=failed&owner=mine');
  assert.equal(runsQuery({ owner: '' }), '');
  assert.equal(ownerOf({ owner: 'alice', hub_user: 'alice@lab' }), 'alice@lab');
  assert.equal(ownerOf({ owner: 'alice', hub_user: null }), 'alice');
  assert.equal(ownerOf({}), '');
});

test('run ids are checked before use', () => {
  assert.ok(isValidRunId('digits-20261122-101500-3fa2c1'));
  for (const bad of ['', '..', '../x', 'a/b', '.hidden', 'a..b', 'x'.repeat(129)]) {
    assert.equal(isValidRunId(bad), false, bad);
  }
});

test('a version mismatch says how to fix it', () => {
  assert.equal(versionMismatch('0.1.0', '0.1.0'), null);
  assert.match(versionMismatch('0.1.0', '0.2.0') || '', /restart JupyterLab/);
  assert.match(versionMismatch('0.1.0', null) || '', /not answering/);
});

test('a run lasts until its end, or until now', () => {
  assert.equal(runDuration({ created: 100, ended: null }, 130), 30);
  assert.equal(runDuration({ created: 100, ended: 110 }, 130), 10);
});

test('two runs of one name are told apart by id and start time', () => {
  assert.equal(shortId('train-20261124-101502-3fa2c1'), '20261124-101502-3fa2c1');
  assert.equal(shortId('odd'), 'odd');
  const now = new Date(2026, 10, 24, 18, 0, 0).getTime() / 1000;
  assert.equal(startedAt(new Date(2026, 10, 24, 9, 5, 7).getTime() / 1000, now), '09:05:07');
  assert.equal(startedAt(new Date(2026, 10, 20, 23, 59, 0).getTime() / 1000, now), '2026-11-20 23:59:00');
});

test('Attach in notebook inserts plain Python that shows the run or the sweep', () => {
  assert.equal(attachSource('run', 'r-1'), 'import jupyter_trainer\njupyter_trainer.get_run("r-1").monitor()');
  assert.equal(attachSource('sweep', 's-1'), 'import jupyter_trainer\njupyter_trainer.get_sweep("s-1").monitor()');
});
