import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  type ISweepRow, type IRunRow, type ITrialRow, bestText, countsText, mergeNewestFirst, paramsText, runsQuery,
  sweepStatus, trialNote, trialsText
} from '../model.js';

function sweepRow(fields: Partial<ISweepRow>): ISweepRow {
  return {
    id: 'train-sweep-20261124-070145-6bd03c', name: 'train', status: 'running', metric: 'val_acc',
    goal: 'max', trials_started: 3, trials_done: 1, trials_total: 12, parallel: 2, counts: {},
    best: null, created: 100, started: 101, ended: null, error: null, ...fields
  };
}

function trial(fields: Partial<ITrialRow>): ITrialRow {
  return {
    number: 0, run: 'train-t0-20261124-070146-ed6be8', params: {}, status: 'completed',
    objective: 0.5, step: 4, pruned_at: null, reason: null, duration: 1.5, ...fields
  };
}

test('the runs list can leave out the trials', () => {
  assert.equal(runsQuery({ limit: 100, trials: 0 }), '?limit=100&trials=0');
});

test('the run status filter stands for the like sweep status', () => {
  assert.deepEqual(['', 'running', 'queued', 'completed', 'failed', 'canceled', 'lost'].map(sweepStatus),
    ['', 'running', 'created', 'completed', 'failed', 'canceled', 'interrupted']);
});

test('runs and sweeps are listed together, newest first', () => {
  const run = (id: string, created: number) => ({ id, created }) as IRunRow;
  const items = mergeNewestFirst([run('old', 50), run('new', 300)], [sweepRow({ id: 's', created: 100 })]);
  assert.deepEqual(items.map(item => [item.kind, item.row.id]), [['run', 'new'], ['sweep', 's'], ['run', 'old']]);
});

test('a sweep row counts its trials and names its best', () => {
  assert.equal(trialsText(sweepRow({})), '1/12 trials');
  assert.equal(trialsText(sweepRow({ trials_total: null, trials_started: 1, trials_done: 1 })), '1/1 trial');
  assert.equal(countsText({ completed: 4, running: 2, pruned: 1 }), '2 running · 1 pruned');
  assert.equal(countsText({ completed: 4 }), '');
  assert.equal(bestText(sweepRow({})), null);
  const best = { number: 3, run: 'r', params: {}, objective: 0.912345678 };
  assert.equal(bestText(sweepRow({ best })), 'best val_acc 0.91235 (#3)');
});

test("a trial's params and why it ended", () => {
  assert.equal(paramsText({ lr: 0.013485534915373108, hidden: 64, act: 'relu', layers: [1, 2] }),
    'act=relu hidden=64 layers=[1,2] lr=0.013486');
  assert.equal(trialNote(trial({ status: 'pruned', pruned_at: 3 })), 'pruned at step 3');
  assert.equal(trialNote(trial({ status: 'pruned', pruned_at: 3, reason: 'val_acc 0.1 at step 3 was worse' })),
    'val_acc 0.1 at step 3 was worse');
  assert.equal(trialNote(trial({})), '');
});
