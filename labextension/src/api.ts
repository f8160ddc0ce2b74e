/** Requests to the jupyter_trainer server extension, authenticated by JupyterLab itself. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IEvent, IRunPage, IRunState, isValidRunId, runsQuery } from './model';

const PREFIX = 'jupyter-trainer/api';

export interface IRunDetail {
  id: string;
  spec: {
    name: string;
    target: { name: string };
    launch: { launcher: string; nodes: number; procs: number; backend: string | null };
    env: { name: string | null; version?: string | null };
    params: { [key: string]: unknown };
  };
  state: IRunState;
  ranks: number[];
}

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

  run(id: string): Promise<IRunDetail> {
    return this.request<IRunDetail>(this.runPath(id));
  }

  events(id: string, rank: number, offset: number): Promise<{ events: IEvent[]; offset: number }> {
    return this.request(`${this.runPath(id, 'events')}?rank=${rank}&offset=${offset}`);
  }

  logs(id: string, rank: number, offset: number): Promise<{ text: string; offset: number }> {
    return this.request(`${this.runPath(id, 'logs')}?rank=${rank}&offset=${offset}`);
  }

  cancel(id: string): Promise<{ status: string }> {
    return this.request(this.runPath(id, 'cancel'), { method: 'POST', body: '{}' });
  }
}
