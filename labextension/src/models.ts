/** The Models section of the Training Runs panel: each registered model is a row (name,
 * latest version, number of versions) that expands to its versions (number, time, size,
 * tags and the run it was registered from); a click on a version's run opens that run's
 * view, as a click on a run row does.
 *
 * Rows keep their DOM nodes across polls and change only where what they show changed, so
 * a click pressed on one poll and released after the next still lands where it began. */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { ApiError, type TrainerClient } from './api';
import { isValidRunId, paramsText, startedAt } from './model';

/** What the models list and a model's versions both tell of a version. */
interface IVersionFields {
  created: number;
  run_id: string;
  path: string;
  files: number;
  bytes: number;
  tags: { [key: string]: unknown };
  /** Whether the run it came from is still in the store (a version outlives its run). */
  run_exists: boolean;
}

/** A model, with its latest version's fields. */
export interface IModelRow extends IVersionFields {
  name: string;
  versions: number;
  latest: number;
}

export interface IModelVersion extends IVersionFields {
  version: number;
  lineage: { run_name?: string; run_status?: string; [key: string]: unknown };
}

export interface IModelDetail {
  name: string;
  versions: IModelVersion[];
}

const API = 'jupyter-trainer/api';

/** GET ``path`` under the server extension's API, as the panel's client asks. */
async function fetchJson<T>(client: TrainerClient, path: string): Promise<T> {
  const url = URLExt.join(client.settings.baseUrl, API, path);
  const response = await ServerConnection.makeRequest(url, {}, client.settings);
  const text = await response.text();
  const answer = text ? JSON.parse(text) : {};
  if (!response.ok) {
    throw new ApiError(answer.error || response.statusText, response.status);
  }
  return answer as T;
}

export function listModels(client: TrainerClient): Promise<{ models: IModelRow[] }> {
  return fetchJson(client, 'models');
}

/** Every version of one model, newest first; a name is checked (the rule of run ids)
 * before it is sent. */
export async function modelVersions(client: TrainerClient, name: string): Promise<IModelDetail> {
  if (!isValidRunId(name)) {
    throw new ApiError(`invalid model name ${JSON.stringify(name)}`, 400);
  }
  return fetchJson(client, `models/${name}`);
}

/** A size as the CLI writes it: ``11.6 KiB``, ``400 bytes``. */
export function formatBytes(size: number): string {
  for (const [unit, scale] of [['GiB', 2 ** 30], ['MiB', 2 ** 20], ['KiB', 2 ** 10]] as const) {
    if (size >= scale) {
      return `${(size / scale).toFixed(1)} ${unit}`;
    }
  }
  return `${size} bytes`;
}

export function versionsText(count: number): string {
  return `${count} version${count === 1 ? '' : 's'}`;
}

function element(tag: string, className: string, attrs: { [name: string]: string } = {}): HTMLElement {
  const node = document.createElement(tag);
  node.className = className;
  for (const [name, value] of Object.entries(attrs)) {
    node.setAttribute(name, value);
  }
  return node;
}

/** Set what changed only: the same text or attribute again leaves the node alone. */
function setText(node: HTMLElement, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

function setAttr(node: HTMLElement, name: string, value: string): void {
  if (node.getAttribute(name) !== value) {
    node.setAttribute(name, value);
  }
}

/** Put ``nodes`` in ``parent`` in this order, moving only those out of place. */
function arrange(parent: HTMLElement, nodes: HTMLElement[]): void {
  let next: Node | null = parent.firstChild;
  for (const node of nodes) {
    if (node !== next) {
      parent.insertBefore(node, next);
    } else {
      next = next.nextSibling;
    }
  }
  while (next) {
    const gone = next;
    next = next.nextSibling;
    parent.removeChild(gone);
  }
}

/** One model's row and its version rows, made once and updated in place. */
class ModelRowView {
  readonly node: HTMLElement;
  private toggle: HTMLElement;
  private latest: HTMLElement;
  private count: HTMLElement;
  private meta: HTMLElement;
  private list: HTMLElement;
  private note: HTMLElement;
  private versions = new Map<number, HTMLElement>();

  constructor(readonly name: string) {
    this.node = element('div', 'jt-models-row', { 'data-model': name, 'data-testid': 'jt-models-row' });
    const head = element('div', 'jt-models-head', { 'data-action': 'toggle' });
    const line = element('div', 'jt-runs-line');
    this.toggle = element('button', 'jt-sweeps-toggle', { 'data-action': 'toggle', 'data-testid': 'jt-models-toggle' });
    const title = element('span', 'jt-runs-name', { 'data-testid': 'jt-models-name' });
    title.textContent = name;
    this.latest = element('span', 'jt-models-latest', { 'data-testid': 'jt-models-latest' });
    this.count = element('span', 'jt-models-count', { 'data-testid': 'jt-models-count' });
    line.append(this.toggle, title, this.latest, this.count);
    const metaLine = element('div', 'jt-runs-line jt-runs-meta');
    this.meta = element('span', 'jt-models-meta', { 'data-testid': 'jt-models-meta' });
    metaLine.append(this.meta);
    head.append(line, metaLine);
    this.list = element('div', 'jt-sweeps-list jt-models-versions', { 'data-testid': 'jt-models-versions', role: 'list' });
    this.note = element('div', 'jt-sweeps-none');
    this.node.append(head, this.list);
  }

  update(row: IModelRow, open: boolean, detail: IModelDetail | undefined, now: number): void {
    const state = String(open);
    setAttr(this.node, 'aria-expanded', state);
    setAttr(this.toggle, 'aria-expanded', state);
    setAttr(this.toggle, 'aria-label', `${open ? 'Hide' : 'Show'} the versions of ${this.name}`);
    setText(this.toggle, open ? '▾' : '▸');
    setAttr(this.node, 'data-latest', String(row.latest));
    setText(this.latest, `v${row.latest}`);
    setAttr(this.count, 'data-count', String(row.versions));
    setText(this.count, versionsText(row.versions));
    const tags = paramsText(row.tags);
    setText(this.meta, [`registered ${startedAt(row.created, now)}`, formatBytes(row.bytes), tags]
      .filter(Boolean).join(' · '));
    this.list.hidden = !open;
    if (!open) {
      return;
    }
    if (!detail) {
      setText(this.note, 'Reading the versions…');
      arrange(this.list, [this.note]);
      return;
    }
    const seen = new Set<number>();
    const rows = detail.versions.map(version => {
      seen.add(version.version);
      let node = this.versions.get(version.version);
      if (!node) {
        node = versionNode(version.version);
        this.versions.set(version.version, node);
      }
      updateVersion(node, version, now);
      return node;
    });
    for (const number of [...this.versions.keys()].filter(n => !seen.has(n))) {
      this.versions.delete(number);
    }
    arrange(this.list, rows);
  }
}

function versionNode(version: number): HTMLElement {
  const node = element('div', 'jt-models-version', {
    role: 'listitem', 'data-testid': 'jt-models-version', 'data-version': String(version)
  });
  const number = element('span', 'jt-models-number');
  number.textContent = `v${version}`;
  node.append(number,
    element('span', 'jt-models-when', { 'data-testid': 'jt-models-created' }),
    element('span', 'jt-models-size', { 'data-testid': 'jt-models-size' }),
    element('button', 'jt-models-run', { 'data-action': 'open-run', 'data-testid': 'jt-models-run' }),
    element('span', 'jt-models-tags', { 'data-testid': 'jt-models-tags' }));
  return node;
}

function updateVersion(node: HTMLElement, version: IModelVersion, now: number): void {
  const part = (name: string): HTMLElement => node.querySelector(`.jt-models-${name}`) as HTMLElement;
  setText(part('when'), startedAt(version.created, now));
  setText(part('size'), formatBytes(version.bytes));
  setText(part('tags'), paramsText(version.tags));
  const run = part('run') as HTMLButtonElement;
  setAttr(run, 'data-run', version.run_id);
  setText(run, version.run_id);
  const name = version.lineage.run_name ? ` (${version.lineage.run_name})` : '';
  setAttr(run, 'title', version.run_exists ? `Open run ${version.run_id}${name}` :
    `Run ${version.run_id}${name} is no longer in the store; the version keeps its files`);
  if (run.disabled !== !version.run_exists) {
    run.disabled = !version.run_exists;
  }
}

/** The panel's Models section; ``refresh`` is called at each of the panel's polls. */
export class ModelsSection {
  readonly node: HTMLElement;
  private list: HTMLElement;
  private message: HTMLElement;
  private total: HTMLElement;
  private views = new Map<string, ModelRowView>();
  private expanded = new Set<string>();
  private details = new Map<string, IModelDetail>();
  private models: IModelRow[] = [];
  private seq = 0;

  constructor(private client: TrainerClient, private open: (runId: string) => void) {
    this.node = element('div', 'jt-models', { 'data-testid': 'jt-models' });
    const header = element('div', 'jt-models-header');
    const title = element('span', 'jt-runs-title');
    title.textContent = 'Models';
    this.total = element('span', 'jt-models-total', { 'data-testid': 'jt-models-total' });
    header.append(title, this.total);
    this.message = element('div', 'jt-runs-empty', { 'data-testid': 'jt-models-message' });
    this.list = element('div', 'jt-models-list', { role: 'list' });
    this.node.append(header, this.message, this.list);
    this.node.onclick = event => this.onClick(event);
  }

  async refresh(): Promise<void> {
    const seq = ++this.seq;
    try {
      const { models } = await listModels(this.client);
      const open = models.filter(model => this.expanded.has(model.name)).map(model => model.name);
      const details = await Promise.all(open.map(name => modelVersions(this.client, name).catch(() => null)));
      if (seq !== this.seq) {
        return; // a later refresh has begun: its answer is the newer one
      }
      this.models = models;
      this.details = new Map(details.filter((d): d is IModelDetail => d !== null).map(d => [d.name, d]));
      this.render();
    } catch (error) {
      if (seq === this.seq) {
        this.showMessage(`Cannot list models: ${String((error as Error).message || error)}`);
      }
    }
  }

  private showMessage(text: string): void {
    setText(this.message, text);
    this.message.hidden = !text;
  }

  private render(): void {
    const now = Date.now() / 1000;
    this.showMessage(this.models.length ? '' :
      'No models yet. Register one with run.register_model(NAME, PATH) or jupyter-trainer register.');
    setText(this.total, this.models.length ? String(this.models.length) : '');
    const names = new Set(this.models.map(model => model.name));
    for (const name of [...this.views.keys()].filter(n => !names.has(n))) {
      this.views.delete(name);
    }
    arrange(this.list, this.models.map(model => {
      let view = this.views.get(model.name);
      if (!view) {
        view = new ModelRowView(model.name);
        this.views.set(model.name, view);
      }
      view.update(model, this.expanded.has(model.name), this.details.get(model.name), now);
      return view.node;
    }));
  }

  private onClick(event: MouseEvent): void {
    const target = event.target as HTMLElement;
    const run = target.closest('.jt-models-run') as HTMLButtonElement | null;
    if (run) {
      if (run.dataset.run && !run.disabled) {
        this.open(run.dataset.run);
      }
      return;
    }
    const row = target.closest('.jt-models-row') as HTMLElement | null;
    if (row?.dataset.model && target.closest('[data-action=toggle]')) {
      if (!this.expanded.delete(row.dataset.model)) {
        this.expanded.add(row.dataset.model);
      }
      this.render();
      void this.refresh();
    }
  }
}
