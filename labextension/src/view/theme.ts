/**
 * Theme changes, for the views' canvases. CSS follows a new JupyterLab theme by itself, but a
 * chart drawn on a canvas keeps the colours it was drawn in. JupyterLab and Notebook 7 mark
 * the theme on ``<body>`` (``data-jp-theme-name``, ``data-jp-theme-light``) once its CSS
 * is in place; one observer of those attributes tells every chart of the page.
 */

type Listener = () => void;

const listeners = new Set<Listener>();
let observer: MutationObserver | null = null;

function notify(): void {
  for (const listener of [...listeners]) listener();
  // the theme's variables can settle a frame later: a listener draws again only if they changed
  requestAnimationFrame(() => {
    for (const listener of [...listeners]) listener();
  });
}

/** Call ``listener`` whenever the page's theme changes; returns what stops it. */
export function onThemeChange(listener: Listener): () => void {
  listeners.add(listener);
  if (!observer && typeof MutationObserver !== 'undefined' && typeof document !== 'undefined') {
    observer = new MutationObserver(notify);
    observer.observe(document.body, { attributes: true, attributeFilter: ['data-jp-theme-name', 'data-jp-theme-light'] });
  }
  return () => {
    listeners.delete(listener);
    if (!listeners.size && observer) {
      observer.disconnect();
      observer = null;
    }
  };
}
