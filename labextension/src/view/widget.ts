/**
 * The notebook widget's front end (anywidget's ES module): the launch form, which becomes
 * the run view once the run starts. The kernel's ``RunMonitor`` feeds the model; the build
 * bundles this file with the run view into ``jupyter_trainer/monitor/static/widget.js``.
 */
import { type IFormTraits, renderForm } from './form.js';
import type { IRunTraits } from './runtraits';
import { ingestLog, mountRunView, resyncLog } from './runview';
import type { IViewModel } from './viewmodel';

/** The widget's model: the launch form's traits, then the run's. */
type IWidgetModel = IViewModel<IRunTraits & IFormTraits>;

const GONE = 'the kernel that showed this run is gone (restarted or shut down): this is its last ' +
  'view; %train attach RUN follows the run again';

export default {
  initialize({ model }: { model: IWidgetModel }): () => void {
    // Ingest from the model's creation on, so views created later miss nothing.
    const onLog = (): void => ingestLog(model);
    if (model.get('mode') !== 'form' && model.get('log')?.reset) onLog();
    model.on('change:log', onLog);
    return () => model.off('change:log', onLog);
  },
  render({ model, el }: { model: IWidgetModel; el: HTMLElement }): () => void {
    const root = document.createElement('div');
    root.className = 'jt-monitor';
    root.dataset.testid = 'jt-monitor';
    el.append(root);
    let cleanup = (): void => undefined;
    const build = (): void => {
      cleanup();
      root.dataset.mode = model.get('mode');
      cleanup = model.get('mode') === 'form' ? renderForm(root, model) : mountRunView(root, model, { goneText: GONE });
    };
    build();
    if (model.get('mode') !== 'form') resyncLog(model);
    const onMode = (): void => {
      build();
      if (model.get('mode') === 'monitor') model.send({ type: 'log_resync' });
    };
    model.on('change:mode', onMode);
    return () => {
      model.off('change:mode', onMode);
      cleanup();
    };
  }
};
