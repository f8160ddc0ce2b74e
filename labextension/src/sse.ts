/**
 * Server-sent events read from a fetch body, so the stream goes through the same
 * authenticated request as every other call (an EventSource cannot send the token header).
 * No DOM and no JupyterLab imports: unit-tested with node's test runner.
 */

export interface IServerEvent {
  event: string;
  data: string;
}

/** Incremental parser of the ``text/event-stream`` format: feed text, get whole events. */
export class SseParser {
  private buffer = '';
  private scanFrom = 0;
  private event = '';
  private data: string[] = [];

  feed(text: string): IServerEvent[] {
    this.buffer += text;
    const out: IServerEvent[] = [];
    const lineEnd = /\r\n|\r|\n/g;
    lineEnd.lastIndex = this.scanFrom; // a long line arriving in many chunks is scanned once
    let start = 0;
    let match: RegExpExecArray | null;
    while ((match = lineEnd.exec(this.buffer)) !== null) {
      if (match[0] === '\r' && match.index === this.buffer.length - 1) {
        break; // maybe the first half of a CRLF split across chunks
      }
      this.line(this.buffer.slice(start, match.index), out);
      start = match.index + match[0].length;
    }
    this.buffer = this.buffer.slice(start);
    this.scanFrom = Math.max(0, this.buffer.length - 1);
    return out;
  }

  /** The events the end of the text completes: only a line cut at a CR; an event with no
   * blank line after it is dropped, as the format says. */
  finish(): IServerEvent[] {
    const out: IServerEvent[] = [];
    if (this.buffer.endsWith('\r')) {
      this.line(this.buffer.slice(0, -1), out);
    }
    this.buffer = '';
    this.scanFrom = 0;
    this.event = '';
    this.data = [];
    return out;
  }

  private line(line: string, out: IServerEvent[]): void {
    if (!line) {
      if (this.data.length) {
        out.push({ event: this.event || 'message', data: this.data.join('\n') });
      }
      this.event = '';
      this.data = [];
      return;
    }
    if (line.startsWith(':')) {
      return;
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'event') {
      this.event = value;
    } else if (field === 'data') {
      this.data.push(value);
    }
  }
}

/**
 * Reads ``body`` to its end, calling ``onEvent`` for each event. Resolves when the server
 * ends the response; rejects when the connection breaks or ``signal`` aborts it.
 */
export async function readEventStream(body: ReadableStream<Uint8Array>,
  onEvent: (event: IServerEvent) => void): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SseParser();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      const events = parser.feed(done ? decoder.decode() : decoder.decode(value, { stream: true }));
      for (const event of done ? events.concat(parser.finish()) : events) {
        onEvent(event);
      }
      if (done) {
        return;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
