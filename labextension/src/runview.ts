/**
 * The run view the notebook widget shows (``view/runview``), fed by the server's view
 * socket instead of kernel messages: as a main-area tab (``RunView``), and in a notebook
 * output whose widget model is gone (``runoutput.ts``). ``SocketView`` is what it and the
 * sweep's tab (``sweeptab.ts``) share.
 */

import { Widget } from '@lumino/widgets';

import type { TrainerClient } from './api';
import type { IRunTraits } from './view/runtraits';
import { ingestLog, mountRunView } from './view/runview';
import { SocketModel } from './view/socketmodel';

const GONE = 'the connection to the Jupyter server closed: this is what the run looked like last';

/** A view drawn by ``mount`` on a server feed, followed until the widget is disposed. */
export class SocketView extends Widget {
  private unmount: () => void;

  constructor(protected model: { dispose(): void }, mount: (root: HTMLElement) => () => void) {
    super();
    const root = document.createElement('div');
    root.dataset.source = 'server';
    this.node.append(root);
    this.unmount = mount(root);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.unmount();
    this.model.dispose();
    super.dispose();
  }
}

/** One run, followed over its own view socket until the widget is disposed. */
export class ServerRunView extends SocketView {
  constructor(client: TrainerClient, readonly runId: string, goneText = GONE) {
    const model = new SocketModel<IRunTraits>(() => client.viewSocket(runId), {
      run_id: runId,
      key: `lab:${runId}:${Math.random()}`,
      log_selection: 'all',
      chart_options: { x: 'step', agg: 'ranks', selected: null }
    });
    model.on('change:log', () => ingestLog(model));
    super(model, root => {
      root.className = 'jt-monitor';
      root.dataset.testid = 'jt-monitor';
      return mountRunView(root, model, { goneText });
    });
  }
}

/** The main-area tab of one run, opened from the Training Runs panel. */
export class RunView extends ServerRunView {
  constructor(client: TrainerClient, runId: string) {
    super(client, runId, `${GONE}; close and reopen the run to follow it again`);
    this.addClass('jt-run-view');
    this.id = `jt-run-${runId}`;
    this.title.label = runId;
    this.title.closable = true;
    this.node.dataset.testid = 'jt-run-view';
  }
}
