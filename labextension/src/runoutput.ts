/**
 * A run's output in a notebook once its widget is gone. ``RunMonitor`` outputs carry, beside
 * the widget, ``application/vnd.jupyter-trainer.run+json`` (``{"run_id": ...}``). When
 * ipywidgets cannot find the widget's model (the page was reloaded after the kernel
 * restarted: "Error displaying widget: model not found"), the output shows the same run view
 * fed by the server instead, so it still shows the run, live.
 */

import { CodeCell } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';
import { Panel, type Widget } from '@lumino/widgets';

import type { TrainerClient } from './api';
import { isValidRunId } from './model';
import { ServerRunView } from './runview';

export const RUN_MIME = 'application/vnd.jupyter-trainer.run+json';
const MODEL_GONE = /Error displaying widget: model not found/;
const SCAN_MS = 250;

/** Watch ``panel``'s outputs; a run output whose widget model is gone shows the server view. */
export function showLostRunOutputs(panel: NotebookPanel, client: TrainerClient): void {
  const done = new WeakSet<Widget>();
  let timer = 0;
  const scan = (): void => {
    timer = 0;
    for (const cell of panel.content.widgets) {
      if (!(cell instanceof CodeCell)) {
        continue;
      }
      const area = cell.outputArea;
      for (let i = 0; i < area.model.length && i < area.widgets.length; i++) {
        const runId = String((area.model.get(i).data[RUN_MIME] as { run_id?: string } | undefined)?.run_id || '');
        const output = area.widgets[i];
        if (!runId || !isValidRunId(runId) || done.has(output) || !(output instanceof Panel) ||
            !MODEL_GONE.test(output.node.textContent || '')) {
          continue;
        }
        done.add(output);
        output.widgets.forEach(w => {
          if (MODEL_GONE.test(w.node.textContent || '')) {
            w.hide();
          }
        });
        const view = new ServerRunView(client, runId);
        view.addClass('jt-server-output'); // fills the output area, as the widget does
        output.addWidget(view);
      }
    }
  };
  const observer = new MutationObserver(() => {
    if (!timer) {
      timer = window.setTimeout(scan, SCAN_MS);
    }
  });
  observer.observe(panel.content.node, { childList: true, subtree: true, characterData: true });
  panel.disposed.connect(() => {
    observer.disconnect();
    window.clearTimeout(timer);
  });
}
