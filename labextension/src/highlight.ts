/**
 * Keeps the editor language of each notebook code cell in step with its cell magic: YAML
 * for the body of a `%%environment` cell, the notebook's own language for the rest.
 *
 * The notebook sets every code cell's MIME type when a cell is inserted and whenever the
 * kernel's language changes; each such change is answered at once, so the cell keeps the
 * language its source asks for.
 */

import type { ICellModel } from '@jupyterlab/cells';
import type { INotebookTracker, Notebook, NotebookPanel } from '@jupyterlab/notebook';

import { cellMimeType } from './magicmime';

const watched = new WeakSet<ICellModel>();

function applyMimeType(notebook: Notebook, cell: ICellModel): void {
  if (cell.isDisposed || notebook.isDisposed) {
    return;
  }
  const mime = cellMimeType(cell.sharedModel.getSource(), notebook.codeMimetype);
  if (cell.mimeType !== mime) {
    cell.mimeType = mime;
  }
}

function watchCell(notebook: Notebook, cell: ICellModel): void {
  if (cell.type !== 'code' || watched.has(cell)) {
    return;
  }
  watched.add(cell);
  cell.sharedModel.changed.connect((_, change) => {
    if (change.sourceChange) {
      applyMimeType(notebook, cell);
    }
  });
  cell.mimeTypeChanged.connect(() => applyMimeType(notebook, cell));
  applyMimeType(notebook, cell);
}

function watchNotebook(notebook: Notebook): void {
  const watchModel = (): void => {
    const model = notebook.model;
    if (!model) {
      return;
    }
    for (const cell of model.cells) {
      watchCell(notebook, cell);
    }
    model.cells.changed.connect((_, change) => {
      for (const cell of change.newValues) {
        watchCell(notebook, cell);
      }
    });
  };
  notebook.modelChanged.connect(watchModel);
  watchModel();
}

/** Follows every notebook open now or later. */
export function highlightCellMagics(tracker: INotebookTracker): void {
  const add = (panel: NotebookPanel): void => watchNotebook(panel.content);
  tracker.forEach(add);
  tracker.widgetAdded.connect((_, panel) => add(panel));
}
