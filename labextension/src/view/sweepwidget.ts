/**
 * The notebook sweep widget's front end (anywidget's ES module): the sweep view, fed by the
 * kernel's ``SweepView`` (``monitor.sweep_widget``). The build bundles it into
 * ``jupyter_trainer/monitor/static/sweep.js``.
 */
import { type ISweepTraits, mountSweepView } from './sweepview';
import type { IViewModel } from './viewmodel';

const GONE = 'the kernel that showed this sweep is gone (restarted or shut down): this is its ' +
  'last view; %train attach SWEEP follows the sweep again';

export default {
  render({ model, el }: { model: IViewModel<ISweepTraits>; el: HTMLElement }): () => void {
    const root = document.createElement('div');
    el.append(root);
    return mountSweepView(root, model, { goneText: GONE });
  }
};
