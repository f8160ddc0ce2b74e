/**
 * The run view's model in JupyterLab: the server's view feed over a WebSocket
 * (``/jupyter-trainer/api/runs/RUN/view``, or ``sweeps/SWEEP/view`` for the sweep view),
 * with the anywidget model's methods, so the same view draws it. The server sends ``{"set": {...}}`` updates; ``set`` + ``save_changes``
 * and ``send`` go back as ``{"set": ...}`` and ``{"msg": ...}``.
 */
import type { IViewModel, Listener } from './viewmodel';

export class SocketModel<T extends object> implements IViewModel<T> {
  private values: Partial<T>;
  private listeners = new Map<string, Set<Listener>>();
  private pending: Partial<T> = {};
  private socket: WebSocket | null = null;
  private queue: string[] = [];
  private closed = false;

  /** ``open`` makes the socket (JupyterLab's settings know the URL, auth and class);
   * ``values`` are the model's values until the server says otherwise. */
  constructor(private open: () => WebSocket, values: Partial<T>) {
    this.values = values;
    this.connect();
  }

  get<K extends keyof T & string>(name: K): T[K] | undefined {
    return this.values[name];
  }

  set<K extends keyof T & string>(name: K, value: T[K]): void {
    this.values[name] = value;
    this.pending[name] = value;
    this.emit(`change:${name}`);
  }

  save_changes(): void {
    const changes = this.pending;
    this.pending = {};
    if (Object.keys(changes).length) this.write({ set: changes });
  }

  on(event: string, callback: Listener): void {
    let set = this.listeners.get(event);
    if (!set) {
      set = new Set();
      this.listeners.set(event, set);
    }
    set.add(callback);
  }

  off(event: string, callback?: Listener): void {
    if (callback) this.listeners.get(event)?.delete(callback);
    else this.listeners.delete(event);
  }

  send(content: unknown): void {
    this.write({ msg: content });
  }

  /** Stop following the run (the view was closed). */
  dispose(): void {
    this.closed = true;
    this.socket?.close();
    this.listeners.clear();
  }

  private connect(): void {
    const socket = this.open();
    this.socket = socket;
    socket.onopen = () => {
      for (const text of this.queue) socket.send(text);
      this.queue = [];
    };
    socket.onmessage = event => {
      const message = JSON.parse(String(event.data));
      if (message.set) this.apply(message.set);
    };
    socket.onclose = () => {
      if (!this.closed) this.emit('gone');
    };
  }

  private apply(changes: Partial<T>): void {
    // the log first: views read the log store when other parts change
    const names = (Object.keys(changes) as Array<keyof T & string>).sort((a, b) => Number(b === 'log') - Number(a === 'log'));
    for (const name of names) this.values[name] = changes[name];
    for (const name of names) this.emit(`change:${name}`);
  }

  private write(message: unknown): void {
    const socket = this.socket;
    if (socket && socket.readyState === WebSocket.CONNECTING) {
      this.queue.push(JSON.stringify(message));
      return;
    }
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      throw new Error('Cannot send: the connection to the server is closed');
    }
    socket.send(JSON.stringify(message));
  }

  private emit(event: string): void {
    for (const fn of this.listeners.get(event) ?? []) fn();
  }
}
