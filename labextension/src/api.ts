/** Requests to the jupyter_trainer server extension, authenticated by JupyterLab itself. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { type IListFilter, type IRunPage, type ISweepDetail, type ISweepPage, isValidRunId, runsQuery } from './model';

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

  /** ``runs/ID/...`` or ``sweeps/ID/...``, the id checked before it is sent. */
  private idPath(kind: 'runs' | 'sweeps', id: string, ...rest: string[]): string {
    if (!isValidRunId(id)) {
      throw new ApiError(`invalid ${kind.slice(0, -1)} id ${JSON.stringify(id)}`, 400);
    }
    return [kind, id, ...rest].join('/');
  }

  async version(): Promise<string | null> {
    try {
      return (await this.request<{ version: string }>('version')).version;
    } catch {
      return null;
    }
  }

  runs(filter: IListFilter = {}): Promise<IRunPage> {
    return this.request<IRunPage>(`runs${runsQuery(filter)}`);
  }

  sweeps(filter: IListFilter = {}): Promise<ISweepPage> {
    return this.request<ISweepPage>(`sweeps${runsQuery(filter)}`);
  }

  /** One sweep with every trial. */
  async sweep(id: string): Promise<ISweepDetail> {
    return this.request<ISweepDetail>(this.idPath('sweeps', id));
  }

  /** Ask the sweep's driver to cancel it and its running trials. */
  async cancelSweep(id: string): Promise<{ id: string; status: string }> {
    return this.request(this.idPath('sweeps', id, 'cancel'), { method: 'POST' });
  }

  /** The run view's feed (``runs/ID/view``) or the sweep view's (``sweeps/ID/view``),
   * authenticated as JupyterLab's own sockets are. */
  viewSocket(id: string, kind: 'runs' | 'sweeps' = 'runs'): WebSocket {
    let url = URLExt.join(this.settings.wsUrl, PREFIX, this.idPath(kind, id, 'view'));
    if (this.settings.appendToken && this.settings.token) {
      url += `?token=${encodeURIComponent(this.settings.token)}`;
    }
    return new this.settings.WebSocket(url);
  }
}
