/**
 * jupyter_trainer in JupyterLab: a Training Runs side panel, a view per run, and the editor
 * language of `%%environment` cells.
 */

import { ILayoutRestorer, type JupyterFrontEnd, type JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, showErrorMessage, WidgetTracker } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';
import type { Widget } from '@lumino/widgets';

import { TrainerClient } from './api';
import { highlightCellMagics } from './highlight';
import { attachSource, isValidRunId } from './model';
import { RunsPanel } from './panel';
import { showLostRunOutputs } from './runoutput';
import { RunView } from './runview';
import { SweepTab } from './sweeptab';

const ICON = new LabIcon({
  name: 'jupyter-trainer:runs',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><path class="jp-icon3" fill="#616161" ' +
    'd="M3 17h3v4H3zm5-6h3v10H8zm5 3h3v7h-3zm5-9h3v16h-3zM3 9l5-5 5 4 6-6 1.4 1.4L13 10.8l-5-4-3.6 3.6z"/></svg>'
});

const COMMANDS = {
  open: 'jupyter-trainer:open-run', openSweep: 'jupyter-trainer:open-sweep', attach: 'jupyter-trainer:attach-run',
  panel: 'jupyter-trainer:show-runs'
};

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-trainer-labextension:plugin',
  description: 'Training Runs: every jupyter_trainer run, live, with charts, logs and cancel.',
  autoStart: true,
  optional: [ILayoutRestorer, ICommandPalette, INotebookTracker],
  activate: (app: JupyterFrontEnd, restorer: ILayoutRestorer | null, palette: ICommandPalette | null,
    notebooks: INotebookTracker | null) => {
    const client = new TrainerClient();
    if (notebooks) {
      highlightCellMagics(notebooks);
      // Run outputs: the widget while its model lives, the server's view once it is gone.
      notebooks.widgetAdded.connect((_, panel) => showLostRunOutputs(panel, client));
    }
    const tracker = new WidgetTracker<MainAreaWidget<RunView>>({ namespace: 'jupyter-trainer-run' });
    const sweeps = new WidgetTracker<MainAreaWidget<SweepTab>>({ namespace: 'jupyter-trainer-sweep' });

    /** The main-area tab of ``content`` (made by ``make`` unless ``tracker`` has one). */
    const openTab = <T extends Widget>(tracker: WidgetTracker<MainAreaWidget<T>>, found: MainAreaWidget<T> | undefined,
      make: () => T, id: string, label: string): void => {
      if (found) {
        app.shell.activateById(found.id);
        return;
      }
      const widget = new MainAreaWidget({ content: make() });
      widget.id = id;
      widget.title.label = label;
      widget.title.icon = ICON;
      widget.title.closable = true;
      void tracker.add(widget);
      app.shell.add(widget, 'main');
      app.shell.activateById(widget.id);
    };

    app.commands.addCommand(COMMANDS.open, {
      label: 'Open Training Run',
      execute: args => {
        const id = String(args.id || '');
        if (isValidRunId(id)) {
          openTab(tracker, tracker.find(w => w.content.runId === id), () => new RunView(client, id), `jt-run-area-${id}`, id);
        }
      }
    });

    app.commands.addCommand(COMMANDS.openSweep, {
      label: 'Open Sweep',
      execute: args => {
        const id = String(args.id || '');
        if (isValidRunId(id)) {
          openTab(sweeps, sweeps.find(w => w.content.sweepId === id),
            () => new SweepTab(client, id, run => void app.commands.execute(COMMANDS.open, { id: run })),
            `jt-sweep-area-${id}`, `sweep ${id}`);
        }
      }
    });

    app.commands.addCommand(COMMANDS.attach, {
      label: 'Attach Training Run or Sweep in Notebook',
      execute: async args => {
        const id = String(args.id || '');
        const kind = args.kind === 'sweep' ? 'sweep' : 'run';
        // The notebook last focused (clicking in the side panel takes the focus from it).
        const notebook = notebooks ? notebooks.currentWidget : null;
        if (!isValidRunId(id) || !notebook) {
          await showErrorMessage('Attach in notebook', 'Open a notebook first: the cell goes into the notebook you used last.');
          return;
        }
        app.shell.activateById(notebook.id);
        NotebookActions.insertBelow(notebook.content);
        const cell = notebook.content.activeCell;
        if (cell) {
          cell.model.sharedModel.setSource(attachSource(kind, id));
          // the new cell may be below the fold: show it, then again once its output is drawn
          await notebook.content.scrollToCell(cell, 'start');
          await NotebookActions.run(notebook.content, notebook.sessionContext);
          if (!cell.isDisposed) {
            await notebook.content.scrollToCell(cell, 'start');
          }
        }
      }
    });

    const panel = new RunsPanel(client, {
      open: id => void app.commands.execute(COMMANDS.open, { id }),
      openSweep: id => void app.commands.execute(COMMANDS.openSweep, { id }),
      attach: (id, kind) => void app.commands.execute(COMMANDS.attach, { id, kind })
    });
    panel.id = 'jupyter-trainer-runs';
    panel.title.icon = ICON;
    panel.title.caption = 'Training Runs';
    app.shell.add(panel, 'left', { rank: 700 });

    app.commands.addCommand(COMMANDS.panel, {
      label: 'Show Training Runs',
      execute: () => app.shell.activateById(panel.id)
    });
    if (palette) {
      palette.addItem({ command: COMMANDS.panel, category: 'Training' });
    }
    if (restorer) {
      restorer.add(panel, 'jupyter-trainer-runs');
      void restorer.restore(tracker, {
        command: COMMANDS.open,
        args: widget => ({ id: widget.content.runId }),
        name: widget => widget.content.runId
      });
      void restorer.restore(sweeps, {
        command: COMMANDS.openSweep,
        args: widget => ({ id: widget.content.sweepId }),
        name: widget => widget.content.sweepId
      });
    }
  }
};

export default plugin;
