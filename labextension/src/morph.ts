/**
 * A list redrawn from HTML every second, changed in place: only the attributes and texts
 * that differ are written, so a row stays the same element from one refresh to the next,
 * and what a person does with it (selecting or copying an id, the focus, a press) outlives
 * the refresh. Children with a ``data-key`` are matched by it, so a run added at the top
 * moves the rows below instead of rewriting each of them as its predecessor.
 */

const keyOf = (node: Node): string | null => (node instanceof Element ? node.getAttribute('data-key') : null);

/** Whether ``have`` can be made into ``want`` in place: the same kind of node, and for an
 * element the same tag and key. */
function alike(have: Node, want: Node): boolean {
  if (have.nodeType !== want.nodeType) return false;
  if (!(have instanceof Element) || !(want instanceof Element)) return true;
  return have.tagName === want.tagName && keyOf(have) === keyOf(want);
}

function patchAttributes(have: Element, want: Element): void {
  for (const { name } of [...have.attributes]) {
    if (!want.hasAttribute(name)) have.removeAttribute(name);
  }
  for (const { name, value } of [...want.attributes]) {
    if (have.getAttribute(name) !== value) have.setAttribute(name, value);
  }
}

function patchNode(have: Node, want: Node): void {
  if (have instanceof Element && want instanceof Element) {
    patchAttributes(have, want);
    patchChildren(have, want);
  } else if (have.nodeValue !== want.nodeValue) {
    have.nodeValue = want.nodeValue;
  }
}

function patchChildren(parent: Node, next: Node): void {
  const keyed = new Map<string, Node>();
  for (const child of parent.childNodes) {
    const key = keyOf(child);
    if (key !== null) keyed.set(key, child);
  }
  let cursor = parent.firstChild;
  for (const want of [...next.childNodes]) {
    const key = keyOf(want);
    let have: Node | null = key !== null ? keyed.get(key) ?? null : cursor;
    if (have && !alike(have, want)) have = null;
    if (!have) {
      parent.insertBefore(want, cursor); // taken from ``next``, as it is
      continue;
    }
    if (key !== null) keyed.delete(key);
    patchNode(have, want);
    if (have === cursor) cursor = cursor.nextSibling;
    else parent.insertBefore(have, cursor);
  }
  while (cursor) {
    const after: ChildNode | null = cursor.nextSibling;
    parent.removeChild(cursor);
    cursor = after;
  }
}

/** Make the children of ``root`` read as ``html``, changing only what differs. */
export function morphChildren(root: Element, html: string): void {
  const template = document.createElement('template');
  template.innerHTML = html;
  patchChildren(root, template.content);
}
