/**
 * A sweep's own view in JupyterLab's main area, opened from the Training Runs panel: the
 * sweep view the notebook's sweep widget draws (``view/sweepview``: header, best so far,
 * parallel coordinates, the trials table), fed by the server's sweep socket instead of
 * kernel messages. A click on a trial opens that trial's run view.
 */

import type { TrainerClient } from './api';
import { SocketView } from './runview';
import { SocketModel } from './view/socketmodel';
import { type ISweepTraits, mountSweepView } from './view/sweepview';

const GONE = 'the connection to the Jupyter server closed: this is what the sweep looked like ' +
  'last; close and reopen the sweep to follow it again';

export class SweepTab extends SocketView {
  constructor(client: TrainerClient, readonly sweepId: string, openRun: (runId: string) => void) {
    const model = new SocketModel<ISweepTraits>(() => client.viewSocket(sweepId, 'sweeps'),
      { sweep_id: sweepId, key: `lab-sweep:${sweepId}:${Math.random()}`, selected: null });
    super(model, root => mountSweepView(root, model, {
      goneText: GONE,
      onOpen: trial => {
        if (trial.run) {
          openRun(trial.run);
        }
      }
    }));
    this.addClass('jt-run-view');
    this.id = `jt-sweep-${sweepId}`;
    this.node.dataset.testid = 'jt-sweep-view';
  }
}
