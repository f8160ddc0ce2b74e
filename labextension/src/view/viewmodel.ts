/**
 * The model a view draws: anywidget's model in a notebook (the kernel's traits), or
 * ``SocketModel`` in JupyterLab (the server's view feed). ``T`` names the traits a view reads
 * and their types (``IRunTraits``, ``ISweepTraits``); a trait the feeder has not sent yet
 * reads as ``undefined``.
 */

/** A change listener. anywidget passes arguments the views never read: they read the model. */
export type Listener = () => void;

export interface IViewModel<T extends object> {
  get<K extends keyof T & string>(name: K): T[K] | undefined;
  set<K extends keyof T & string>(name: K, value: T[K]): void;
  save_changes(): void;
  on(event: string, callback: Listener): void;
  off(event: string, callback?: Listener): void;
  send(content: unknown): void;
}
