import assert from 'node:assert/strict';
import { test } from 'node:test';

import { cellMagic, cellMimeType, YAML_MIME } from '../magicmime.js';

const PY = 'text/x-ipython';

test('the cell magic is read as IPython reads it', () => {
  assert.equal(cellMagic('%%environment digits\npython: "3.11"\n'), 'environment');
  assert.equal(cellMagic('%%environment'), 'environment');
  assert.equal(cellMagic('\n  \n%%train --procs 2\nimport torch'), 'train');
  assert.equal(cellMagic('  %%environment x\r\npip: []'), 'environment');
  assert.equal(cellMagic('%%environment   \n'), 'environment');
  assert.equal(cellMagic('%%environmentx\n'), 'environmentx');
  assert.equal(cellMagic('%environment digits\n'), null);
  assert.equal(cellMagic('# %%environment\n'), null);
  assert.equal(cellMagic('x = 1\n%%environment\n'), null);
  assert.equal(cellMagic(''), null);
  assert.equal(cellMagic('\n\n'), null);
});

test('an %%environment cell is YAML, every other cell keeps the notebook language', () => {
  assert.equal(cellMimeType('%%environment digits\npython: "3.11"\npip:\n  - rich\n', PY), YAML_MIME);
  assert.equal(cellMimeType('\n%%environment digits --build\n', PY), YAML_MIME);
  assert.equal(cellMimeType('%%train --procs 2\nimport torch\n', PY), PY);
  assert.equal(cellMimeType('%%environmental\nx: 1\n', PY), PY);
  assert.equal(cellMimeType('%environment\n', PY), PY);
  assert.equal(cellMimeType('import yaml\n%%environment\n', PY), PY);
  assert.equal(cellMimeType('', 'text/x-python'), 'text/x-python');
});

test('only the first line is looked at, however long the cell', () => {
  const body = `pip:\n${'  - pkg\n'.repeat(200000)}`;
  assert.equal(cellMimeType(`%%environment big\n${body}`, PY), YAML_MIME);
  assert.equal(cellMimeType(`%%train\n${body}`, PY), PY);
});
