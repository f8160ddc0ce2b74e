/**
 * Follows one run for its view: over the server's event stream, reconnected from the
 * offsets it reached when it breaks off; by polling the REST API from there when the
 * stream is refused. No DOM and no JupyterLab imports (the client is passed in), so it is
 * unit-tested with node's test runner.
 */

import { IEvent, IRunDetail, IRunState, isTerminal, IStreamFrom, RunData } from './model';
import { IServerEvent } from './sse';

/** What the feed needs of the REST client. */
export interface IFeedClient {
  run(id: string): Promise<IRunDetail>;
  events(id: string, rank: number, offset: number): Promise<{ events: IEvent[]; offset: number }>;
  logs(id: string, rank: number, offset: number): Promise<{ text: string; offset: number }>;
  /** Resolves when the server ends the stream; rejects when it fails or is aborted. */
  stream(id: string, onEvent: (event: IServerEvent) => void, signal: AbortSignal, from: IStreamFrom): Promise<void>;
}

/** What changed since the last update. */
export interface IFeedUpdate {
  /** Metric points added. */
  fresh: number;
  /** Log lines added, with their rank. */
  lines: Array<[number, string]>;
}

export type FeedMode = 'starting' | 'stream' | 'poll' | 'ended' | 'closed';

export interface IFeedOptions {
  onUpdate(update: IFeedUpdate): void;
  onError(error: unknown): void;
  pollMs?: number;
  /** Pause before reconnecting a broken stream (default 1000 ms). */
  reconnectMs?: number;
  /** Reconnections in all before polling takes over (default 20). */
  maxReconnects?: number;
}

export class RunFeed {
  readonly data = new RunData();
  readonly logOffsets = new Map<number, number>();
  detail: IRunDetail | null = null;
  private _mode: FeedMode = 'starting';
  private abort: AbortController | null = null;
  private timer: ReturnType<typeof setInterval> | undefined;
  private busy = false;
  private reconnects = 0;

  constructor(private client: IFeedClient, readonly runId: string, private options: IFeedOptions) {}

  get mode(): FeedMode {
    return this._mode;
  }

  /** The run's spec and what is known so far, then its live updates until it ends. */
  async start(): Promise<void> {
    try {
      this.detail = await this.client.run(this.runId);
      this.options.onUpdate({ fresh: 0, lines: [] });
    } catch (error) {
      this.options.onError(error);
    }
    if (this._mode !== 'starting') {
      return;
    }
    this._mode = 'stream';
    await this.follow();
  }

  /**
   * The stream, again from the offsets reached each time it breaks off after delivering
   * something; polling once it is refused (nothing delivered) or broke too often.
   */
  private async follow(): Promise<void> {
    while (this._mode === 'stream') {
      this.abort = new AbortController();
      let heard = false;
      const from = { events: this.data.offsets, logs: this.logOffsets };
      try {
        await this.client.stream(this.runId, event => {
          heard = true;
          this.onStreamEvent(event);
        }, this.abort.signal, from);
      } catch {
        // Broken or refused: see below.
      }
      this.abort = null;
      if (this._mode !== 'stream') {
        return;
      }
      if (!heard || ++this.reconnects > (this.options.maxReconnects ?? 20)) {
        this.startPolling();
        return;
      }
      await new Promise(resolve => setTimeout(resolve, this.options.reconnectMs ?? 1000));
    }
  }

  /** Stops following: the stream is aborted and polling ends. */
  close(): void {
    this._mode = 'closed';
    this.stop();
  }

  /** Ranks that left a trace, sorted. */
  ranks(): number[] {
    const ranks = new Set<number>(this.detail ? this.detail.ranks : []);
    this.data.offsets.forEach((_, rank) => ranks.add(rank));
    this.logOffsets.forEach((_, rank) => ranks.add(rank));
    return Array.from(ranks).sort((a, b) => a - b);
  }

  private stop(): void {
    if (this.abort) {
      this.abort.abort();
      this.abort = null;
    }
    if (this.timer !== undefined) {
      clearInterval(this.timer);
      this.timer = undefined;
    }
  }

  private onStreamEvent(event: IServerEvent): void {
    if (this._mode !== 'stream') {
      return;
    }
    const payload = JSON.parse(event.data);
    const update: IFeedUpdate = { fresh: 0, lines: [] };
    if (event.event === 'state') {
      this.setState(payload as IRunState);
    } else if (event.event === 'events') {
      update.fresh = this.data.ingest(payload.rank, payload.events, payload.offset);
    } else if (event.event === 'log') {
      update.lines = this.ingestLog(payload.rank, payload.text, payload.offset);
    } else if (event.event === 'end') {
      this._mode = 'ended';
      this.stop();
    } else {
      return;
    }
    this.options.onUpdate(update);
  }

  private setState(state: IRunState): void {
    if (this.detail) {
      this.detail = { ...this.detail, state };
    }
  }

  private ingestLog(rank: number, text: string, offset: number): Array<[number, string]> {
    this.logOffsets.set(rank, offset);
    return text.split('\n').slice(0, -1).map(line => [rank, line] as [number, string]);
  }

  private startPolling(): void {
    this._mode = 'poll';
    void this.poll();
    this.timer = setInterval(() => void this.poll(), this.options.pollMs ?? 700);
  }

  private async poll(): Promise<void> {
    if (this.busy || this._mode !== 'poll') {
      return;
    }
    this.busy = true;
    try {
      const detail = await this.client.run(this.runId);
      const update: IFeedUpdate = { fresh: 0, lines: [] };
      for (const rank of detail.ranks) {
        const events = await this.client.events(this.runId, rank, this.data.offsets.get(rank) || 0);
        update.fresh += this.data.ingest(rank, events.events, events.offset);
        const logs = await this.client.logs(this.runId, rank, this.logOffsets.get(rank) || 0);
        update.lines = update.lines.concat(this.ingestLog(rank, logs.text, logs.offset));
      }
      if (this._mode !== 'poll') {
        return;
      }
      this.detail = detail;
      if (isTerminal(detail.state.status) && update.fresh === 0 && update.lines.length === 0) {
        this._mode = 'ended';
        this.stop();
      }
      this.options.onUpdate(update);
    } catch (error) {
      this.options.onError(error);
    } finally {
      this.busy = false;
    }
  }
}
