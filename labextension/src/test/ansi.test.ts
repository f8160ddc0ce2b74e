import assert from 'node:assert/strict';
import { test } from 'node:test';

import { ansiToHtml, escapeHtml, stripAnsi } from '../view/ansi.js';
import { formatNumber } from '../view/chart.js';

test('SGR colours and attributes become classes, reset closes them', () => {
  assert.equal(ansiToHtml('\x1b[1;31mfailed\x1b[0m ok'), '<span class="jt-fg-1 jt-bold">failed</span> ok');
  assert.equal(ansiToHtml('\x1b[93mwarn\x1b[39m'), '<span class="jt-fg-11">warn</span>');
});

test('256-colour and true-colour codes become inline styles, the first 16 stay classes', () => {
  assert.equal(ansiToHtml('\x1b[38;5;196mx'), '<span style="color:rgb(255,0,0)">x</span>');
  assert.equal(ansiToHtml('\x1b[38;5;9mx'), '<span class="jt-fg-9">x</span>');
  assert.equal(ansiToHtml('\x1b[48;2;1;2;3mx'), '<span style="background:rgb(1,2,3)">x</span>');
  assert.equal(ansiToHtml('\x1b[38;5mx'), 'x'); // incomplete: ignored
});

test('text is escaped and a search is highlighted without its case', () => {
  assert.equal(ansiToHtml('a<b> & "Loss"', 'loss'), 'a&lt;b&gt; &amp; &quot;<mark class="jt-match">Loss</mark>&quot;');
  assert.equal(ansiToHtml('\x1b[32mloss 0.1\x1b[0m', 'loss'), '<span class="jt-fg-2"><mark class="jt-match">loss</mark> 0.1</span>');
});

test('text is safe in HTML and in a quoted attribute', () => {
  assert.equal(escapeHtml(`<a href="x" title='y'>&`), '&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;');
});

test('what the search matches is the text without escape codes', () => {
  assert.equal(stripAnsi('\x1b[31mred\x1b[0m\x07 \x1b]0;title\x07done'), 'red done');
});

test('numbers, and the text JSON gives non-finite numbers, are formatted', () => {
  assert.equal(formatNumber('nan'), 'NaN');
  assert.equal(formatNumber('-inf'), '-inf');
  assert.equal(formatNumber(Number.POSITIVE_INFINITY), 'inf');
  assert.equal(formatNumber(1234), '1,234');
  assert.equal(formatNumber(0.0000125), '1.25e-5');
  assert.equal(formatNumber(0.5), '0.5');
  assert.equal(formatNumber(null), '–');
});
