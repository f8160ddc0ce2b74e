/**
 * Which language a notebook code cell is edited in, from its source: the body of a
 * `%%environment` cell is YAML, every other code cell (`%%train` included) keeps the
 * notebook's language. Pure, so it is unit-tested without JupyterLab.
 */

export const YAML_MIME = 'text/x-yaml';

const YAML_MAGICS = ['environment'];

/**
 * The name of the cell magic that starts ``source``, or null. As IPython reads a cell:
 * leading blank lines and the first line's indentation are ignored, and the name ends
 * at the first space.
 */
export function cellMagic(source: string): string | null {
  let start = 0;
  for (;;) {
    const end = source.indexOf('\n', start);
    const line = (end < 0 ? source.slice(start) : source.slice(start, end)).replace(/\r$/, '');
    if (line.trim()) {
      const match = /^%%(\S+?)(?: |$)/.exec(line.trimStart().trimEnd());
      return match ? match[1] : null;
    }
    if (end < 0) {
      return null;
    }
    start = end + 1;
  }
}

/** The MIME type a code cell's editor should use, given the notebook's code MIME type. */
export function cellMimeType(source: string, notebookMime: string): string {
  const magic = cellMagic(source);
  return magic !== null && YAML_MAGICS.indexOf(magic) >= 0 ? YAML_MIME : notebookMime;
}
