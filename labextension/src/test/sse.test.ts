import assert from 'node:assert/strict';
import { test } from 'node:test';

import { IServerEvent, readEventStream, SseParser } from '../sse.js';

test('events are parsed across chunk boundaries and line endings', () => {
  const parser = new SseParser();
  const out: IServerEvent[] = [];
  for (const chunk of ['event: st', 'ate\ndata: {"a"', ': 1}\n', '\n: a comment\r', '\nevent: log\r\ndata:x\rdata: y\r', '\r', 'data: z\n\n']) {
    out.push(...parser.feed(chunk));
  }
  assert.deepEqual(out, [
    { event: 'state', data: '{"a": 1}' },
    { event: 'log', data: 'x\ny' },
    { event: 'message', data: 'z' }
  ]);
  assert.deepEqual(parser.feed('event: empty\n\n'), []);
});

function body(chunks: Uint8Array[]): ReadableStream<Uint8Array> {
  return new ReadableStream({
    start(controller) {
      chunks.forEach(chunk => controller.enqueue(chunk));
      controller.close();
    }
  });
}

test('a response body is decoded as UTF-8 even where a chunk splits a character', async () => {
  const bytes = new TextEncoder().encode('event: log\ndata: {"text": "é → ✓"}\n\nevent: end\ndata: {}\n\nevent: cut\ndata: 1\n');
  const chunks = Array.from({ length: bytes.length }, (_, i) => bytes.slice(i, i + 1));
  const seen: IServerEvent[] = [];
  await readEventStream(body(chunks), event => seen.push(event));
  assert.deepEqual(seen, [{ event: 'log', data: '{"text": "é → ✓"}' }, { event: 'end', data: '{}' }]);
});

test('a blank line cut at a CR by the end of the body still ends its event', async () => {
  const seen: IServerEvent[] = [];
  await readEventStream(body([new TextEncoder().encode('data: 1\r\r')]), event => seen.push(event));
  assert.deepEqual(seen, [{ event: 'message', data: '1' }]);
});

test('a long event arriving in many small chunks is parsed whole', () => {
  const parser = new SseParser();
  const payload = JSON.stringify({ text: 'x'.repeat(200000) });
  const wire = `event: log\r\ndata: ${payload}\r\n\r\n`;
  const out: IServerEvent[] = [];
  for (let i = 0; i < wire.length; i += 1000) {
    out.push(...parser.feed(wire.slice(i, i + 1000)));
  }
  assert.deepEqual(out, [{ event: 'log', data: payload }]);
});
