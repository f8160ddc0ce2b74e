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
 * gone (saying why), and "Canceling…" from a press until the end. A question it asked
 * (``askBeforeCancel``) goes with it once it is hidden or off. */
export function showCancel(button: HTMLButtonElement, state: { ended: boolean; gone: string; pressed: boolean; title: string }): void {
  button.hidden = state.ended;
  if (state.ended || state.gone || state.pressed) QUESTIONS.get(button)?.close(false);
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

export interface ICancelQuestion {
  /** What is asked, as HTML: "Cancel run <b>name</b> (id)?" */
  question: () => string;
  /** What canceling does, in a few words, under the question. */
  detail: string;
  /** The label of the button that cancels: "Cancel run", "Cancel sweep". */
  confirm: string;
  onConfirm: () => void;
}

const QUESTIONS = new WeakMap<HTMLButtonElement, { close(refocus: boolean): void }>();

/** Cancel ends hours of training, so a press first asks, in place under the view's head:
 * the question names what would end, and "Keep running" has the focus, so a stray Enter or
 * Escape keeps it running. Only "Cancel run" calls ``onConfirm``. */
export function askBeforeCancel(button: HTMLButtonElement, ask: ICancelQuestion): void {
  const box = document.createElement('div');
  box.className = 'jt-confirm';
  box.dataset.testid = 'jt-confirm-cancel';
  box.setAttribute('role', 'alertdialog');
  box.hidden = true;
  box.innerHTML = `<span class="jt-confirm-text" data-testid="jt-confirm-text"></span>
    <span class="jt-confirm-detail jt-muted"></span>
    <span class="jt-confirm-buttons">
      <button type="button" class="jt-button" data-testid="jt-confirm-keep">Keep running</button>
      <button type="button" class="jt-button jt-danger-solid" data-testid="jt-confirm-yes"></button>
    </span>`;
  const text = part<HTMLElement>(box, '.jt-confirm-text');
  const keep = part<HTMLButtonElement>(box, '[data-testid=jt-confirm-keep]');
  const yes = part<HTMLButtonElement>(box, '[data-testid=jt-confirm-yes]');
  part<HTMLElement>(box, '.jt-confirm-detail').textContent = ask.detail;
  yes.textContent = ask.confirm;
  text.id = `jt-confirm-${Math.random().toString(36).slice(2)}`;
  box.setAttribute('aria-labelledby', text.id);
  const row = button.closest('.jt-head-main') || button;
  row.after(box);

  const close = (refocus: boolean): void => {
    if (box.hidden) return;
    box.hidden = true;
    button.setAttribute('aria-expanded', 'false');
    if (refocus && !button.hidden && !button.disabled) button.focus();
  };
  QUESTIONS.set(button, { close });
  button.setAttribute('aria-haspopup', 'dialog');
  button.setAttribute('aria-expanded', 'false');
  button.addEventListener('click', () => {
    if (!box.hidden) {
      keep.focus();
      return;
    }
    text.innerHTML = ask.question();
    box.hidden = false;
    button.setAttribute('aria-expanded', 'true');
    keep.focus();
  });
  keep.addEventListener('click', () => close(true));
  yes.addEventListener('click', () => {
    close(false);
    ask.onConfirm();
  });
  box.addEventListener('keydown', event => {
    if (event.key === 'Escape') {
      event.preventDefault();
      event.stopPropagation();
      close(true);
    }
  });
}
