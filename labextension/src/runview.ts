/**
 * The main-area view of one run in JupyterLab: the run view the notebook widget shows
 * (``view/runview``), fed by the server's view socket instead of kernel messages.
 */

import { Widget } from '@lumino/widgets';

import { TrainerClient } from './api';
import { ingestLog, mountRunView } from './view/runview';
import { SocketModel } from './view/socketmodel';

const GONE = 'the connection to the Jupyter server closed: this is what the run looked like last; ' +
  'close and reopen the run to follow it again';

export class RunView extends Widget {
  private model: SocketModel | null = null;
  private unmount: (() => void) | null = null;

  constructor(private client: TrainerClient, readonly runId: string) {
    super();
    this.addClass('jt-run-view');
    this.id = `jt-run-${runId}`;
    this.title.label = runId;
    this.title.closable = true;
    this.node.dataset.testid = 'jt-run-view';
  }

  protected onAfterAttach(): void {
    if (this.model) {
      return;
    }
    const model = new SocketModel(this.runId, () => this.client.viewSocket(this.runId));
    model.on('change:log', () => ingestLog(model));
    const root = document.createElement('div');
    root.className = 'jt-monitor';
    root.dataset.testid = 'jt-monitor';
    this.node.append(root);
    this.model = model;
    this.unmount = mountRunView(root, model, { goneText: GONE });
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.unmount?.();
    this.model?.dispose();
    super.dispose();
  }
}
