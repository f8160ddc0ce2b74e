import assert from 'node:assert/strict';
import { test } from 'node:test';

import { IFeedClient, IFeedUpdate, RunFeed } from '../feed.js';
import { IEvent, IRunDetail, IStreamFrom } from '../model.js';
import { IServerEvent } from '../sse.js';

const SPEC = {
  name: 'demo', target: { name: 'local' }, params: {}, env: { name: null },
  launch: { launcher: 'torchrun', nodes: 1, procs: 1, backend: null }
};

function detail(status: string, ranks = [0]): IRunDetail {
  return { id: 'r1', spec: SPEC, state: { status, created: 1 }, ranks };
}

function send(onEvent: (e: IServerEvent) => void, event: string, data: unknown): void {
  onEvent({ event, data: JSON.stringify(data) });
}

const metric = (step: number): IEvent => ({ kind: 'metric', t: step, step, values: { loss: 1 / (step + 1) } });

/** A client whose stream is the given function; polls answer from ``polls`` in turn. */
class FakeClient implements IFeedClient {
  calls: string[] = [];
  /** Where each stream began: "events rank@offset ..." of what it was asked to resume. */
  streams: string[] = [];
  polls: Array<{ status: string; events: IEvent[]; text: string }> = [];
  constructor(private streamer: IFeedClient['stream']) {}

  async run(): Promise<IRunDetail> {
    this.calls.push('run');
    return detail(this.polls.length ? this.polls[0].status : 'running');
  }

  async events(_: string, rank: number, offset: number): Promise<{ events: IEvent[]; offset: number }> {
    this.calls.push(`events ${rank}@${offset}`);
    const answer = this.polls[0] || { events: [] };
    return { events: answer.events, offset: offset + 10 * answer.events.length };
  }

  async logs(_: string, rank: number, offset: number): Promise<{ text: string; offset: number }> {
    this.calls.push(`logs ${rank}@${offset}`);
    const answer = this.polls.shift() || { text: '' };
    return { text: answer.text, offset: offset + answer.text.length };
  }

  stream(id: string, onEvent: (e: IServerEvent) => void, signal: AbortSignal, from: IStreamFrom): Promise<void> {
    const at: string[] = [];
    from.events.forEach((offset, rank) => at.push(`events ${rank}@${offset}`));
    from.logs.forEach((offset, rank) => at.push(`logs ${rank}@${offset}`));
    this.streams.push(at.join(' '));
    return this.streamer(id, onEvent, signal, from);
  }
}

function follow(client: FakeClient): { feed: RunFeed; updates: IFeedUpdate[]; errors: unknown[] } {
  const updates: IFeedUpdate[] = [];
  const errors: unknown[] = [];
  const feed = new RunFeed(client, 'r1', {
    onUpdate: u => updates.push(u), onError: e => errors.push(e), pollMs: 5, reconnectMs: 1
  });
  return { feed, updates, errors };
}

async function until(predicate: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 2000;
  while (!predicate()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for ${what}`);
    }
    await new Promise(resolve => setTimeout(resolve, 2));
  }
}

test('a live run is followed over the stream to its end, with no polling', async () => {
  const client = new FakeClient(async (_, onEvent) => {
    send(onEvent, 'state', { status: 'running', created: 1 });
    send(onEvent, 'events', { rank: 0, events: [metric(0), { kind: 'progress', t: 1, done: 1, total: 4 }], offset: 90 });
    send(onEvent, 'events', { rank: 1, events: [metric(0)], offset: 40 });
    send(onEvent, 'log', { rank: 1, text: 'step 0\nstep 1\n', offset: 14 });
    send(onEvent, 'state', { status: 'completed', created: 1, ended: 5 });
    send(onEvent, 'end', { status: 'completed' });
  });
  const { feed, updates, errors } = follow(client);
  await feed.start();
  assert.equal(feed.mode, 'ended');
  assert.deepEqual(client.calls, ['run']);
  assert.equal(feed.detail?.state.status, 'completed');
  assert.equal(feed.detail?.spec.name, 'demo');
  assert.deepEqual(feed.ranks(), [0, 1]);
  assert.equal(feed.data.fraction(), 0.25);
  assert.deepEqual(updates.flatMap(u => u.lines), [[1, 'step 0'], [1, 'step 1']]);
  assert.equal(updates.reduce((n, u) => n + u.fresh, 0), 2);
  assert.deepEqual(errors, []);
});

test('a stream that breaks off is opened again from the offsets it reached', async () => {
  let opened = 0;
  const client = new FakeClient(async (_, onEvent) => {
    opened += 1;
    if (opened === 1) {
      send(onEvent, 'state', { status: 'running', created: 1 });
      send(onEvent, 'events', { rank: 0, events: [metric(0), metric(1)], offset: 100 });
      send(onEvent, 'log', { rank: 1, text: 'a\nb\n', offset: 4 });
      throw new Error('connection reset');
    }
    send(onEvent, 'state', { status: 'running', created: 1 });
    send(onEvent, 'events', { rank: 0, events: [metric(2)], offset: 110 });
    send(onEvent, 'log', { rank: 1, text: 'c\n', offset: 6 });
    send(onEvent, 'state', { status: 'completed', created: 1, ended: 5 });
    send(onEvent, 'end', { status: 'completed' });
  });
  const { feed, updates, errors } = follow(client);
  await feed.start();
  assert.equal(feed.mode, 'ended');
  assert.deepEqual(client.streams, ['', 'events 0@100 logs 1@4']);
  assert.deepEqual(client.calls, ['run']);
  assert.deepEqual(feed.data.points('loss', 0).map(p => p.x), [0, 1, 2]);
  assert.deepEqual(updates.flatMap(u => u.lines), [[1, 'a'], [1, 'b'], [1, 'c']]);
  assert.deepEqual(errors, []);
});

test('when the stream breaks off and is then refused, polling goes on from where it stopped', async () => {
  let opened = 0;
  const client = new FakeClient(async (_, onEvent) => {
    opened += 1;
    if (opened > 1) {
      throw new Error('refused');
    }
    send(onEvent, 'state', { status: 'running', created: 1 });
    send(onEvent, 'events', { rank: 0, events: [metric(0), metric(1)], offset: 100 });
    send(onEvent, 'log', { rank: 0, text: 'a\nb\n', offset: 4 });
    throw new Error('connection reset');
  });
  client.polls = [
    { status: 'running', events: [metric(2)], text: 'c\n' },
    { status: 'completed', events: [], text: '' }
  ];
  const { feed, updates } = follow(client);
  await feed.start();
  await until(() => feed.mode === 'ended', 'the end of the run');
  assert.deepEqual(client.calls, ['run', 'run', 'events 0@100', 'logs 0@4', 'run', 'events 0@110', 'logs 0@6']);
  assert.deepEqual(feed.data.points('loss', 0).map(p => p.x), [0, 1, 2]);
  assert.deepEqual(updates.flatMap(u => u.lines), [[0, 'a'], [0, 'b'], [0, 'c']]);
  assert.equal(feed.detail?.state.status, 'completed');
});

test('a stream that ends without its end event hands over to polling too', async () => {
  const client = new FakeClient(async () => undefined);
  client.polls = [{ status: 'failed', events: [], text: '' }];
  const { feed } = follow(client);
  await feed.start();
  await until(() => feed.mode === 'ended', 'the end of the run');
  assert.deepEqual(client.calls, ['run', 'run', 'events 0@0', 'logs 0@0']);
});

test('closing the view aborts the stream and starts no polling', async () => {
  let signal: AbortSignal | null = null;
  const client = new FakeClient((_, onEvent, s) => new Promise((resolve, reject) => {
    signal = s;
    send(onEvent, 'state', { status: 'running', created: 1 });
    s.addEventListener('abort', () => reject(new Error('aborted')));
  }));
  const { feed } = follow(client);
  const started = feed.start();
  await until(() => signal !== null, 'the stream to open');
  assert.equal(feed.mode, 'stream');
  feed.close();
  await started;
  assert.equal((signal as unknown as AbortSignal).aborted, true);
  assert.equal(feed.mode, 'closed');
  await new Promise(resolve => setTimeout(resolve, 30));
  assert.deepEqual(client.calls, ['run']);
});

test('closing stops polling', async () => {
  const client = new FakeClient(async () => { throw new Error('refused'); });
  const { feed } = follow(client);
  await feed.start();
  await until(() => client.calls.length >= 4, 'a poll');
  feed.close();
  await new Promise(resolve => setTimeout(resolve, 20));
  const calls = client.calls.length;
  await new Promise(resolve => setTimeout(resolve, 30));
  assert.equal(client.calls.length, calls);
  assert.equal(feed.mode, 'closed');
});
