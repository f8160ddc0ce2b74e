// Writes src/version.ts from package.json's version before each build, type check and unit
// test run: the panel compares it with the server extension's version, and package.json is
// the one place the front end's version is written (tests/frontends/browser/test_labextension.py
// checks that it is the Python package's). The file is rewritten only when it changes, so
// incremental type checks stay incremental.
import { readFileSync, writeFileSync } from 'node:fs';

const root = new URL('../', import.meta.url);
const { version } = JSON.parse(readFileSync(new URL('package.json', root), 'utf8'));
if (typeof version !== 'string' || !version) {
  throw new Error('labextension/package.json has no "version"');
}
const text = `// Written from package.json by scripts/write-version.mjs (npm run build:version): do not edit.\nexport const VERSION = ${JSON.stringify(version)};\n`;
const out = new URL('src/version.ts', root);
let old = '';
try {
  old = readFileSync(out, 'utf8');
} catch {
  // not written yet
}
if (old !== text) writeFileSync(out, text);
