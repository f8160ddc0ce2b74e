/** Requests to the jupyter_trainer server extension, authenticated by JupyterLab itself. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IFeedClient } from './feed';
import { IEvent, IRunDetail, IRunPage, IStreamFrom, isValidRunId, runsQuery, streamQuery } from './model';
import { IServerEvent, readEventStream } from './sse';

const PREFIX = 'jupyter-trainer/api';

export class ApiError extends Error {
  constructor(message: string, readonly status: number) {
    super(message);
  }
}

export class TrainerClient implements IFeedClient {
  readonly settings = ServerConnection.makeSettings();

  private async request<T>(path: string, init: RequestInit = {}): Promise<T> {
    const url = URLExt.join(this.settings.baseUrl, PREFIX, path);
    const response = await ServerConnection.makeRequest(url, init, this.settings);
    const text = await response.text();
    const body = text ? JSON.parse(text) : {};
    if (!response.ok) {
      throw new ApiError(body.error || response.statusText, response.status);
    }
    return body as T;
  }

  private runPath(id: string, ...rest: string[]): string {
    if (!isValidRunId(id)) {
      throw new ApiError(`invalid run id ${JSON.stringify(id)}`, 400);
    }
    return ['runs', id, ...rest].join('/');
  }

  async version(): Promise<string | null> {
    try {
      return (await this.request<{ version: string }>('version')).version;
    } catch {
      return null;
    }
  }

  runs(filter: { status?: string; name?: string; limit?: number; offset?: number } = {}): Promise<IRunPage> {
    return this.request<IRunPage>(`runs${runsQuery(filter)}`);
  }

  run(id: string): Promise<IRunDetail> {
    return this.request<IRunDetail>(this.runPath(id));
  }

  events(id: string, rank: number, offset: number): Promise<{ events: IEvent[]; offset: number }> {
    return this.request(`${this.runPath(id, 'events')}?rank=${rank}&offset=${offset}`);
  }

  logs(id: string, rank: number, offset: number): Promise<{ text: string; offset: number }> {
    return this.request(`${this.runPath(id, 'logs')}?rank=${rank}&offset=${offset}`);
  }

  /**
   * The run's server-sent events (``state``, ``events``, ``log``, then ``end``) from the
   * given offsets, read through ServerConnection so the request carries the same
   * credentials as the others.
   */
  async stream(
    id: string, onEvent: (event: IServerEvent) => void, signal: AbortSignal, from: IStreamFrom
  ): Promise<void> {
    const url = URLExt.join(this.settings.baseUrl, PREFIX, this.runPath(id, 'stream')) + streamQuery(from);
    const response = await ServerConnection.makeRequest(
      url, { headers: { Accept: 'text/event-stream' }, cache: 'no-store', signal }, this.settings);
    if (!response.ok || !response.body) {
      const text = await response.text();
      throw new ApiError((text && JSON.parse(text).error) || response.statusText, response.status);
    }
    await readEventStream(response.body, onEvent);
  }

  cancel(id: string): Promise<{ status: string }> {
    return this.request(this.runPath(id, 'cancel'), { method: 'POST', body: '{}' });
  }
}
