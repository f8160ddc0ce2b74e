import assert from 'node:assert/strict';
import { test } from 'node:test';

import { chartStatsHtml, chipParts, type IMetricRow, pointsText, ranksLabel, summarizeRanks } from '../view/rankstats';

const text = (html: string): string => html.replace(/<[^>]+>/g, '');

// acc of a 2-rank run: rank 0 went down to 0.5, rank 1 to 0.406
const acc = [
  { rank: 0, last: 0.9, min: 0.5, max: 0.9, count: 100, non_finite: 0 },
  { rank: 1, last: 0.85, min: 0.406, max: 0.88, count: 100, non_finite: 0 }
];

test('a chart of several ranks gives each figure over all of them, with the rank it came from', () => {
  const said = text(chartStatsHtml(acc, 'ranks', 2));
  assert.equal(said, 'ranks 0, 1 · last 0.85–0.9 · min 0.406 (rank 1) · max 0.9 (rank 0)');
});

test('a chart of one rank says which rank it is', () => {
  assert.equal(text(chartStatsHtml(acc.slice(0, 1), 'ranks', 1)), 'rank 0 · last 0.9 · min 0.5 · max 0.9');
  assert.equal(text(chartStatsHtml(acc.slice(0, 1), 'ranks', 4)), 'rank 0 of 4 · last 0.9 · min 0.5 · max 0.9');
});

test('in Mean mode the chart header gives the mean and says of how many ranks', () => {
  const mean = [{ rank: null as unknown as number, last: 0.875, min: 0.46, max: 0.89 }];
  assert.equal(text(chartStatsHtml(mean, 'mean', 2)), 'mean of 2 ranks · last 0.875 · min 0.46 · max 0.89');
});

test('ties name the lowest rank; NaN and inf last values are named with their rank', () => {
  const s = summarizeRanks([
    { rank: 2, last: 'nan', min: 0.1, max: 3 },
    { rank: 1, last: 1, min: 0.1, max: 3 },
    { rank: 0, last: 1, min: 0.2, max: 2 }
  ]);
  assert.deepEqual(s.ranks, [0, 1, 2]);
  assert.deepEqual([s.min, s.min_rank, s.max, s.max_rank], [0.1, 1, 3, 1]);
  assert.deepEqual(s.last, { lo: 1, lo_rank: 0, hi: 1, hi_rank: 0, non_finite: [[2, 'nan']] });
  assert.equal(text(chartStatsHtml([{ rank: 0, last: 'inf', min: 1, max: 2 }], 'ranks', 1)), 'rank 0 · last inf · min 1 · max 2');
});

test('rank lists read as ranges where they can', () => {
  assert.equal(ranksLabel([0]), 'rank 0');
  assert.equal(ranksLabel([3, 1, 0, 2]), 'ranks 0–3');
  assert.equal(ranksLabel([0, 2, 5]), 'ranks 0, 2, 5');
  assert.equal(ranksLabel([0, 1, 2, 3, 4, 5, 6, 7], 16), 'ranks 0–7 of 16');
});

test('a chip follows the charts\' mode: every rank, or their mean', () => {
  const metric: IMetricRow = {
    name: 'acc', ...summarizeRanks(acc),
    mean: { ranks: [0, 1], last: 0.875, min: 0.46, max: 0.89, count: 100, non_finite: 0 }
  };
  const ranks = chipParts(metric, 'ranks');
  assert.deepEqual([ranks.value, ranks.who], ['0.85–0.9', 'ranks 0, 1']);
  assert.equal(ranks.title, 'ranks 0, 1: last 0.85 (rank 1) to 0.9 (rank 0) · min 0.406 (rank 1) · max 0.9 (rank 0) · 100 points per rank');
  const mean = chipParts(metric, 'mean');
  assert.deepEqual([mean.value, mean.who], ['0.875', 'mean']);
  assert.match(mean.title, /^mean of 2 ranks: last 0\.875 · min 0\.46 · max 0\.89/);
  // a metric one rank logged has no mean: its chip names the rank in either mode
  const alone: IMetricRow = { name: 'lr', ...summarizeRanks([{ rank: 0, last: 0.1, min: 0.05, max: 0.1 }]), mean: null };
  assert.deepEqual([chipParts(alone, 'mean').value, chipParts(alone, 'mean').who], ['0.1', 'rank 0']);
});

test("a chart's footer counts each rank's own points", () => {
  assert.equal(pointsText([1]), '1 point');
  assert.equal(pointsText([12]), '12 points');
  assert.equal(pointsText([12, 12]), '12 points per rank · 2 ranks');
  assert.equal(pointsText([10, 1200, 11]), '10–1,200 points per rank · 3 ranks');
});
