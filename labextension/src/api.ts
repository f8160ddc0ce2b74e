/** Requests to the jupyter_trainer server extension, authenticated by JupyterLab itself. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IRunPage, isValidRunId, runsQuery } from './model';

const PREFIX = 'jupyter-trainer/api';

export class ApiError extends Error {
  constructor(message: string, readonly status: number) {
    super(message);
  }
}

export class TrainerClient {
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

  /** The run view's feed (``runs/ID/view``), authenticated as JupyterLab's own sockets are. */
  viewSocket(id: string): WebSocket {
    let url = URLExt.join(this.settings.wsUrl, PREFIX, this.runPath(id, 'view'));
    if (this.settings.appendToken && this.settings.token) {
      url += `?token=${encodeURIComponent(this.settings.token)}`;
    }
    return new this.settings.WebSocket(url);
  }
}
