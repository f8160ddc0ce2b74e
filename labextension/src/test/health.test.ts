import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  attemptLabel, attemptsHtml, collectivesHtml, formatStallTime, nonFiniteHtml, nonFiniteText, savedStacksHtml,
  debuggingHtml, stallBadge, stallHtml, stallTitle, topFrame, whereInCode
} from '../view/health';

const STACK = `Process 4242: python -m jupyter_trainer.rankside.rank.boot
Python v3.12.3 (/usr/bin/python3.12)

Thread 4250 (idle): "pin_memory"
    select (selectors.py:415)
Thread 4242 (active): "MainThread"
    wait_for_batch (loader.py:88)
    train_step (cell.py:12)
`;

test('the attempt is named only when restarts are in play', () => {
  assert.equal(attemptLabel(0, 0), null);
  assert.equal(attemptLabel(null, 2), null);
  assert.equal(attemptLabel(0, 2), 'attempt 1 of 3');
  assert.equal(attemptLabel(1, 2), 'attempt 2 of 3');
  assert.equal(attemptLabel(1, 0), 'attempt 2');
});

test('stall times read as seconds, then as a clock', () => {
  assert.equal(formatStallTime(42.4), '42 s');
  assert.equal(formatStallTime(59.6), '1:00');
  assert.equal(formatStallTime(3725), '1:02:05');
  assert.equal(formatStallTime(null), '–');
});

test('the top frame is the main thread\'s innermost one', () => {
  assert.deepEqual(topFrame(STACK), { name: 'wait_for_batch', file: 'loader.py', line: 88 });
  assert.deepEqual(topFrame('Thread 1 (active): "worker"\n    <module> (cell.py:3)\n'),
    { name: '<module>', file: 'cell.py', line: 3 });
  assert.equal(topFrame('py-spy: permission denied'), null);
  assert.equal(topFrame(null), null);
  // the user's own frame, where the supervisor found one, over torch's innermost frame
  const inTorch = 'Thread 7 (idle): "MainThread"\n    wait (torch/distributed/c10d.py:91)\n    helper (Cell In [3]:4)\n';
  assert.deepEqual(whereInCode({ rank: 0, seconds: 1, since: 1, last_step: 1, stack: inTorch }), { name: 'wait', file: 'torch/distributed/c10d.py', line: 91 });
  assert.deepEqual(whereInCode({ rank: 0, seconds: 1, since: 1, last_step: 1, stack: inTorch, frame: { function: 'helper', file: 'Cell In [3]', line: 4 } }), { name: 'helper', file: 'Cell In [3]', line: 4 });
});

test('the runs list badge names a few stalled ranks, then counts them', () => {
  assert.equal(stallBadge([]), null);
  assert.equal(stallBadge([{ rank: 1 }]), 'stalled: rank 1');
  assert.equal(stallBadge([{ rank: 1 }, { rank: 3 }]), 'stalled: ranks 1, 3');
  assert.equal(stallBadge([0, 1, 2, 3, 4].map(rank => ({ rank }))), 'stalled: 5 ranks');
  assert.equal(stallTitle([{ rank: 1, seconds: 42, since: 0, last_step: 4 },
    { rank: 0, seconds: 75, since: 0, last_step: null, waiting: true }]),
  'rank 1: no progress for 42 s after step 4\nrank 0: no progress for 1:15, waits for a peer');
});

test('a first NaN names its metric, step and rank', () => {
  assert.equal(nonFiniteText({ metric: 'loss', rank: 0, step: 15, value: 'nan' }),
    'loss became NaN at step 15 on rank 0');
  assert.equal(nonFiniteText({ metric: 'g', rank: 2, step: null, value: '-inf' }), 'g became -inf on rank 2');
  const html = nonFiniteHtml([{ metric: 'loss', rank: 0, step: 15, value: 'nan' }], ['loss']);
  assert.match(html, /data-metric="loss">⚠ loss became NaN at step 15 on rank 0 .*--stop-on-nan: fails the run/);
});

test('the stall banner puts the hanging rank first, with its step, host, frame and stack', () => {
  const html = stallHtml([
    { rank: 1, seconds: 42, since: 1000, last_step: 4, host: 'node-b', stack: STACK, waiting: false },
    { rank: 0, seconds: 41, since: 1001, last_step: 4, host: 'node-a', stack: null, waiting: true }
  ], { running: true, timeout: 30, onStall: 'warn' });
  assert.match(html, /Ranks 1, 0 are stalled — rank 1 hangs, the others wait for it in a collective/);
  assert.match(html, /no progress for 30 s counts as a stall; the run goes on \(--on-stall warn\)/);
  assert.match(html, /<b>Rank 1<\/b>: no progress for <span class="jt-stall-for" data-since="1000"><\/span> after step <b>4<\/b> on <b>node-b<\/b> in <code class="jt-frame">wait_for_batch<\/code>/);
  assert.match(html, /<details data-rank="1"><summary>Stack of rank 1<\/summary><pre class="jt-traceback">Process 4242/);
  assert.match(html, /data-rank="0".*waits for a peer/);
  assert.equal((html.match(/<details/g) || []).length, 1, 'no stack, no details');
  const one = stallHtml([{ rank: 3, seconds: 70, since: null, last_step: null }], { running: false });
  assert.match(one, /Rank 3 was stalled when the run ended/);
  assert.match(one, /<span class="jt-stall-for">1:10<\/span> before its first step/);
});

test('stacks and errors are escaped', () => {
  const html = stallHtml([{ rank: 1, seconds: 1, since: 1, last_step: 1, host: '<b>x', stack: '<script>' }], { running: true });
  assert.ok(!html.includes('<script>') && !html.includes('<b>x'));
  const saved = savedStacksHtml({ '1': STACK });
  assert.match(saved, /The run was ended after a stall; the stacks of rank 1 then:/);
  assert.match(saved, /<b>Rank 1<\/b> in <code class="jt-frame">wait_for_batch<\/code>/);
  assert.equal(savedStacksHtml({}), '');
});

test('the attempts table shows each start, duration and failure; none without restarts', () => {
  const now = Date.UTC(2026, 10, 24, 12) / 1000;
  const attempts = [
    { attempt: 0, start: now - 120, end: now - 78, failed_rank: 1, error: 'RuntimeError: <NCCL> timeout' },
    { attempt: 1, start: now - 75, end: null, failed_rank: null, error: null }
  ];
  const html = attemptsHtml(attempts, 2, { status: 'running', ended: null }, now);
  assert.match(html, /2 of 3 allowed \(--max-restarts 2\)/);
  assert.match(html, /<tr class="jt-attempt-failed" data-attempt="0"><td>1<\/td><td>\d\d:\d\d:\d\d<\/td><td>0:42<\/td>/);
  assert.match(html, /rank 1 failed: RuntimeError: &lt;NCCL&gt; timeout/);
  assert.match(html, /<tr class="jt-attempt-current" data-attempt="1"><td>2<\/td><td>[^<]+<\/td><td><span class="jt-attempt-ran" data-start="\d+"><\/span><\/td><td[^>]*>running</);
  const ended = attemptsHtml(attempts, 2, { status: 'completed', ended: now }, now);
  assert.match(ended, /data-attempt="1"><td>2<\/td><td>[^<]+<\/td><td>1:15<\/td><td[^>]*>completed</);
  assert.equal(attemptsHtml(attempts.slice(0, 1), 0, { status: 'running' }, now), '');
});

test('a rank waiting in a debugger is named with where it stopped and how to attach', () => {
  const html = debuggingHtml([{ rank: 1, host: 'node-b', where: 'rank 1: ValueError: <bad> at cell:7', since: 1, until: 1801 }], 'r-1');
  // a text tag, not an emoji a page without an emoji font draws as a box
  assert.match(html, /data-testid="jt-debugging"><span class="jt-debug-tag">pdb<\/span> Rank 1 waits in a debugger/);
  assert.doesNotMatch(html, /\p{Extended_Pictographic}/u);
  assert.match(html, /<b>Rank 1<\/b> on <b>node-b<\/b>: rank 1: ValueError: &lt;bad&gt; at cell:7/);
  // the busy kernel of the waiting cell would queue %train debug: a terminal, or a free kernel
  assert.match(html, /attach in a terminal with <code>jupyter-trainer debug r-1<\/code>, or with <code>%train debug r-1<\/code> in a notebook whose kernel is free/);
  assert.match(html, /cell that waits for this run offers pdb in its own input box/);
  assert.equal(debuggingHtml([], 'r-1'), '');
});

test('the collectives verdict is one escaped line, and nothing without one', () => {
  const verdict = 'rank 2 is behind: it never entered all_reduce #4 (the others wait there since 09:02:12); it is in load_batch() at cell line 6';
  const html = collectivesHtml({ verdict, behind: [2], op: 'all_reduce', seq: 4 });
  assert.match(html, /data-testid="jt-collectives"/);
  assert.ok(html.includes('rank 2 is behind: it never entered all_reduce #4'));
  assert.ok(collectivesHtml({ verdict: '<b>x</b>' }).includes('&lt;b&gt;x&lt;/b&gt;'));
  assert.equal(collectivesHtml(null), '');
  assert.equal(collectivesHtml(undefined), '');
});
