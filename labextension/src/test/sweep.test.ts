import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  type IChartData, type ITrial, axisTicks, bestHtml, countsList, formatParam, noBestText, objectiveHtml, paramKeys,
  parallelLayout, rampColor, settingsList, shade, sortTrials, startedText, trialDuration, trialNote
} from '../view/sweepformat';

const trial = (number: number, status: string, objective: number | null, extra: Partial<ITrial> = {}): ITrial =>
  ({ number, status, objective, params: { lr: 0.01 * (number + 1), hidden: 32 }, ...extra });

test('params read as the notebook wrote them, numbers to 4 significant digits', () => {
  assert.equal(formatParam(0.0123456), '0.01235');
  assert.equal(formatParam(0.00001234), '1.23e-5');
  assert.equal(formatParam(128), '128');
  assert.equal(formatParam('adam'), 'adam');
  assert.equal(formatParam(null), '–');
  assert.equal(formatParam([1, 2]), '[1,2]');
});

test('the swept keys come in the order of the search space, then any other', () => {
  assert.deepEqual(paramKeys({ space: { lr: 'loguniform(1e-4, 1e-1)', hidden: 'choice(32, 64)' } },
    [{ number: 0, status: 'running', params: { hidden: 32, lr: 0.1, seed: 1 } }]), ['lr', 'hidden', 'seed']);
});

test('a pruned trial says at which step and why; a failed one its error', () => {
  assert.equal(trialNote(trial(1, 'pruned', null, { pruned_at: 12, reason: 'below the median' })), 'pruned at step 12: below the median');
  assert.equal(trialNote(trial(1, 'pruned', null, { pruned_at: 0 })), 'pruned at step 0');
  assert.equal(trialNote(trial(2, 'failed', null, { error: 'ValueError: nan' })), 'ValueError: nan');
  assert.equal(trialNote(trial(3, 'completed', 0.9)), '');
});

test('a running trial\'s duration counts to now; an ended one\'s stops at its end', () => {
  assert.equal(trialDuration(trial(0, 'running', null, { start: 100 }), 175), '1:15');
  assert.equal(trialDuration(trial(0, 'completed', 1, { start: 100, end: 110 }), 500), '0:10');
  assert.equal(trialDuration(trial(0, 'starting', null), 500), '–');
});

test('the header counts trials by status in a fixed order and names the settings', () => {
  assert.deepEqual(countsList({ pruned: 2, completed: 3, running: 1, odd: 1, failed: 0 }),
    [['running', 1], ['completed', 3], ['pruned', 2], ['odd', 1]]);
  assert.equal(startedText({ trials: [trial(0, 'running', null)], trials_total: 12 }, {}), '1 of 12 trials started');
  assert.deepEqual(settingsList({ metric: 'loss', goal: 'min', sampler: 'tpe', prune: 'median', parallel: 2 }),
    ['minimize loss', 'sampler tpe', 'prune median', '2 in parallel']);
  assert.match(bestHtml({ best: { number: 3, run: 'r', params: { lr: 0.05 }, objective: 0.91 } }, { metric: 'acc' }),
    /#3<\/span> <span class="jt-muted">acc<\/span> <b class="jt-sweep-best-value" data-value="0.91">0.91<\/b>/);
  assert.match(bestHtml({ best: null }, {}), /no completed trial yet/);
});

test('sorted by objective, the best come first and trials without one last', () => {
  const trials = [trial(0, 'completed', 0.5), trial(1, 'running', null), trial(2, 'completed', 0.9), trial(3, 'completed', 0.1)];
  assert.deepEqual(sortTrials(trials, 'objective', 'max').map(t => t.number), [2, 0, 3, 1]);
  assert.deepEqual(sortTrials(trials, 'objective', 'min').map(t => t.number), [3, 0, 2, 1]);
  assert.deepEqual(sortTrials(trials.slice().reverse(), 'number', 'max').map(t => t.number), [0, 1, 2, 3]);
});

test('the colour runs from the worst objective to the best, whichever the goal', () => {
  assert.equal(shade(0.9, 0.1, 0.9, 'max'), 1);
  assert.equal(shade(0.9, 0.1, 0.9, 'min'), 0);
  assert.equal(rampColor(0), 'rgb(74, 120, 194)');
  assert.equal(rampColor(1), 'rgb(232, 89, 12)');
  assert.equal(rampColor(0.5), 'rgb(155, 89, 182)');
});

test('axes label categories at their places and numbers at nice ticks', () => {
  assert.deepEqual(axisTicks({ name: 'opt', kind: 'category', categories: ["'adam'", "'sgd'"] }),
    [{ at: 0.25, label: 'adam' }, { at: 0.75, label: 'sgd' }]);
  const log = axisTicks({ name: 'lr', kind: 'log', lo: -4, hi: -1 });
  assert.deepEqual(log.map(t => t.label), ['1e-4', '0.001', '0.01', '0.1']);
  assert.deepEqual([log[0].at, log[3].at], [0, 1]);
  assert.deepEqual(axisTicks({ name: 'x', kind: 'linear', lo: 2, hi: 2 }), [{ at: 0.5, label: '2' }]);
});

test('the parallel plot draws one path per trial, broken where a value is missing, best on top', () => {
  const data: IChartData = {
    metric: 'acc', goal: 'max',
    axes: [{ name: 'hidden', kind: 'category', categories: ['32', '64'] }, { name: 'lr', kind: 'log', lo: -3, hi: -1 },
      { name: 'objective', kind: 'linear', lo: 0.2, hi: 0.8 }],
    lines: [
      { number: 0, status: 'completed', objective: 0.8, ys: [0.25, 1, 1] },
      { number: 1, status: 'running', objective: null, ys: [0.75, 0, null] },
      { number: 2, status: 'completed', objective: 0.2, ys: [0.25, 0.5, 0] },
      { number: 3, status: 'failed', objective: null, ys: [null, 0.5, null] }
    ]
  };
  const layout = parallelLayout(data, 400, 200, 0);
  assert.deepEqual(layout.axes.map(a => a.name), ['hidden', 'lr', 'acc']);
  assert.deepEqual(layout.axes.map(a => a.side), ['left', 'right', 'right']);
  const xs = layout.axes.map(a => a.x);
  assert.ok(xs[0] > 10 && xs[2] < 400 - 20 && xs[1] - xs[0] === xs[2] - xs[1], String(xs));
  assert.deepEqual(layout.lines.map(l => l.number), [3, 1, 2, 0]); // best drawn last
  const byNumber = Object.fromEntries(layout.lines.map(l => [l.number, l]));
  assert.equal(byNumber[0].d.split('L').length, 3);
  assert.equal(byNumber[1].d.split('L').length, 2); // stops before the objective
  assert.ok(byNumber[3].d.startsWith('M') && !byNumber[3].d.includes('L'));
  assert.equal(byNumber[0].color, rampColor(1));
  assert.equal(byNumber[2].color, rampColor(0));
  assert.equal(byNumber[1].color, null);
  assert.ok(byNumber[0].best && !byNumber[2].best);
  // top of the plot is the axis's high end
  assert.ok(byNumber[0].d.endsWith(`${xs[2].toFixed(1)},${layout.top.toFixed(1)}`), byNumber[0].d);
});

test('a trial stopped before the end shows what it reported, marked as no objective', () => {
  const canceled = trial(4, 'canceled', null, { reported: { value: 0.4213, step: 12, kind: 'last' } });
  const html = objectiveHtml(canceled, 'val_acc');
  assert.match(html, /^<span class="jt-sweep-reported" data-reported="0.4213" title="the last val_acc it reported at step 12 before it was canceled: not an objective, so it does not count for the best trial">0.4213 <span class="jt-sweep-reported-kind">last<\/span><\/span>$/);
  assert.equal(objectiveHtml(trial(5, 'completed', 0.9), 'val_acc'), '0.9');
  assert.equal(objectiveHtml(trial(6, 'canceled', null), 'val_acc'), '–');
  const running = objectiveHtml(trial(7, 'running', null, { reported: { value: 0.3, step: 2, kind: 'so far' } }), 'acc');
  assert.match(running, /title="acc 0.3 at step 2, its latest while it runs">0.3 <span class="jt-sweep-reported-kind">so far/);
});

test('best so far counts completed trials only, and says so when none completed', () => {
  assert.equal(noBestText({ status: 'running', counts: { running: 2 } }), 'no completed trial yet');
  assert.equal(noBestText({ status: 'running', counts: { running: 1, pruned: 1 } }),
    'no completed trial yet (1 pruned): best so far counts completed trials only');
  assert.equal(noBestText({ status: 'canceled', counts: { canceled: 2 } }),
    'no trial completed (2 canceled): best so far counts completed trials only; the values the others reported are in the table, marked');
  assert.doesNotMatch(bestHtml({ status: 'canceled', best: null, counts: { canceled: 2 } }, {}), /waiting/);
});

test('sorted by objective, trials that only reported a value come after the completed ones', () => {
  const trials = [
    trial(0, 'canceled', null, { reported: { value: 0.99, kind: 'last' } }), trial(1, 'completed', 0.5),
    trial(2, 'running', null), trial(3, 'pruned', null, { reported: { value: 0.2, kind: 'last' } }),
    trial(4, 'completed', 0.7)
  ];
  assert.deepEqual(sortTrials(trials, 'objective', 'max').map(t => t.number), [4, 1, 0, 3, 2]);
  assert.deepEqual(sortTrials(trials, 'objective', 'min').map(t => t.number), [1, 4, 3, 0, 2]);
});

test('a canceled trial\'s line reaches the objective axis at its reported value, with a hollow mark', () => {
  const data: IChartData = {
    metric: 'acc', goal: 'max',
    axes: [{ name: 'lr', kind: 'log', lo: -3, hi: -1 }, { name: 'objective', kind: 'linear', lo: 0.2, hi: 0.8 }],
    lines: [
      { number: 0, status: 'canceled', objective: null, reported: { value: 0.5, step: 3, kind: 'last' }, ys: [0.5, 0.5] },
      { number: 1, status: 'running', objective: null, ys: [1, null] }
    ]
  };
  const layout = parallelLayout(data, 400, 200, null);
  const byNumber = Object.fromEntries(layout.lines.map(l => [l.number, l]));
  assert.equal(byNumber[0].d.split('L').length, 2);
  assert.deepEqual(byNumber[0].reported, { x: layout.axes[1].x, y: (layout.top + layout.bottom) / 2 });
  assert.equal(byNumber[0].color, null); // not coloured as an objective
  // a trial with one value so far is a dot, not an invisible path
  assert.match(byNumber[1].d, /^M[\d.]+,[\d.]+l0,0$/);
  assert.equal(byNumber[1].reported, null);
});

