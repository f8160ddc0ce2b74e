/**
 * The run view the notebook widget shows (``view/runview``), fed by the server's view
 * socket instead of kernel messages: as a main-area tab (``RunView``), and in a notebook
 * output whose widget model is gone (``runoutput.ts``).
 */

import { Widget } from '@lumino/widgets';

import { TrainerClient } from './api';
import { ingestLog, mountRunView } from './view/runview';
import { SocketModel } from './view/socketmodel';

const GONE = 'the connection to the Jupyter server closed: this is what the run looked like last';

/** One run, followed over its own view socket until the widget is disposed. */
export class ServerRunView extends Widget {
  private model: SocketModel;
  private unmount: () => void;

  constructor(client: TrainerClient, readonly runId: string, goneText = GONE) {
    super();
    const model = new SocketModel(runId, () => client.viewSocket(runId));
    model.on('change:log', () => ingestLog(model));
    const root = document.createElement('div');
    root.className = 'jt-monitor';
    root.dataset.testid = 'jt-monitor';
    root.dataset.source = 'server';
    this.node.append(root);
    this.model = model;
    this.unmount = mountRunView(root, model, { goneText });
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
