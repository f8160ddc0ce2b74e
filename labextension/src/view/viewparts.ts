/**
 * What the run view and the sweep view do alike: listen to their model's changes, notice
 * that its connection is gone, repaint what changed once per animation frame, and keep
 * their Cancel button in the state the run or sweep is in; and find the parts of their markup.
 */
import type { IViewModel, Listener } from './viewmodel';

/** The element of ``root`` that ``selector`` names, where the view's own markup always has
 * one: a missing one is a bug in that markup, said at once. */
export function part<T extends Element>(root: ParentNode, selector: string): T {
  const found = root.querySelector<T>(selector);
  if (!found) throw new Error(`no ${selector} in the view's markup`);
  return found;
}

export type Handlers = { [event: string]: Listener };

/** ``handlers`` on ``model``, and ``onGone`` on each way a model says its connection is
 * gone: ipywidgets' comm closed or the kernel restarting (the widget manager disconnects
 * every model as soon as the kernel's status is ``restarting``: ``comm_live_update``), or
 * the Lab view's socket closed. Returns what takes them all off again. */
export function listen<T extends object>(model: IViewModel<T>, handlers: Handlers, onGone: () => void): () => void {
  const all: Handlers = {
    ...handlers,
    'comm:close': onGone,
    comm_live_update: () => {
      // anywidget hands views a proxy of the model, without ``comm_live``: once a view is
      // up, its model only ever goes from live to not live (a new kernel makes new models)
      if ((model as { comm_live?: boolean }).comm_live !== true) onGone();
    },
    gone: onGone
  };
  for (const [event, fn] of Object.entries(all)) model.on(event, fn);
  return () => {
    for (const [event, fn] of Object.entries(all)) model.off(event, fn);
  };
}

/** Bursts of changes coalesced into one repaint per animation frame: ``paint`` gets the
 * parts ``schedule`` marked since the last one. */
export class FrameScheduler {
  private dirty = new Set<string>();
  private frame = 0;

  constructor(private paint: (parts: Set<string>) => void) {}

  schedule(part: string): void {
    this.dirty.add(part);
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  /** Paint now what is marked. */
  flush(): void {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    const parts = this.dirty;
    this.dirty = new Set();
    this.paint(parts);
  }

  cancel(): void {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
  }
}

/** A view's Cancel button: hidden once the run or sweep ended, off while the connection is
 * gone (saying why), and "Canceling…" from a press until the end. */
export function showCancel(button: HTMLButtonElement, state: { ended: boolean; gone: string; pressed: boolean; title: string }): void {
  button.hidden = state.ended;
  if (state.gone) {
    button.disabled = true;
    button.title = state.gone;
  } else if (state.pressed) {
    button.disabled = true;
    button.textContent = 'Canceling…';
  } else if (!state.ended) {
    button.disabled = false;
    button.textContent = 'Cancel';
    button.title = state.title;
  }
}
