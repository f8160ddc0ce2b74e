/**
 * jupyter_trainer in JupyterLab: a Training Runs side panel, a view per run, and the editor
 * language of `%%environment` cells.
 */

import { ILayoutRestorer, JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, showErrorMessage, WidgetTracker } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { LabIcon } from '@jupyterlab/ui-components';

import { TrainerClient } from './api';
import { highlightCellMagics } from './highlight';
import { isValidRunId } from './model';
import { RunsPanel } from './panel';
import { showLostRunOutputs } from './runoutput';
import { RunView } from './runview';

const ICON = new LabIcon({
  name: 'jupyter-trainer:runs',
  svgstr: '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><path class="jp-icon3" fill="#616161" ' +
    'd="M3 17h3v4H3zm5-6h3v10H8zm5 3h3v7h-3zm5-9h3v16h-3zM3 9l5-5 5 4 6-6 1.4 1.4L13 10.8l-5-4-3.6 3.6z"/></svg>'
});

const COMMANDS = { open: 'jupyter-trainer:open-run', attach: 'jupyter-trainer:attach-run', panel: 'jupyter-trainer:show-runs' };

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

    app.commands.addCommand(COMMANDS.open, {
      label: 'Open Training Run',
      execute: args => {
        const id = String(args.id || '');
        if (!isValidRunId(id)) {
          return;
        }
        const existing = tracker.find(w => w.content.runId === id);
        if (existing) {
          app.shell.activateById(existing.id);
          return;
        }
        const widget = new MainAreaWidget({ content: new RunView(client, id) });
        widget.id = `jt-run-area-${id}`;
        widget.title.label = id;
        widget.title.icon = ICON;
        widget.title.closable = true;
        void tracker.add(widget);
        app.shell.add(widget, 'main');
        app.shell.activateById(widget.id);
      }
    });

    app.commands.addCommand(COMMANDS.attach, {
      label: 'Attach Training Run in Notebook',
      execute: async args => {
        const id = String(args.id || '');
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
          // Plain Python, so it works whether or not the notebook loaded the %train magics.
          cell.model.sharedModel.setSource(`import jupyter_trainer\njupyter_trainer.get_run(${JSON.stringify(id)}).monitor()`);
          await NotebookActions.run(notebook.content, notebook.sessionContext);
        }
      }
    });

    const panel = new RunsPanel(client, {
      open: id => void app.commands.execute(COMMANDS.open, { id }),
      attach: id => void app.commands.execute(COMMANDS.attach, { id })
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
    }
  }
};

export default plugin;
