import assert from 'node:assert/strict';
import { test } from 'node:test';

import { costText, money } from '../view/cost.js';

test('the cost meter reads as people write money', () => {
  assert.equal(money(1234.5, '$'), '$1,234.50');
  assert.equal(money(0.004, '$'), '$0.0040');
  assert.equal(money(2, 'EUR'), '2.00 EUR');
  assert.equal(costText({ so_far: 1.5, projected: 4.25, currency: '$' }), '$1.50 so far · $4.25 when done');
  assert.equal(costText({ so_far: 1.5, projected: null, currency: 'EUR' }), '1.50 EUR so far');
});
