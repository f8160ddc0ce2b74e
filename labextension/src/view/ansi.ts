// ANSI SGR escape codes -> HTML spans. Colours use CSS classes (jt-fg-N / jt-bg-N) so
// themes can restyle them; 256-colour and true-colour codes become inline styles.
// Standalone ES module: no imports, reused by the log view and the traceback banner.

/** ``text`` as HTML text or a quoted attribute's value. */
export function escapeHtml(text: unknown): string {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

/** The text style the SGR codes seen so far set: a named colour (0-15, a CSS class) or an
 * `rgb(...)` colour (an inline style) for the foreground and the background, and the
 * attributes. */
interface ISgrStyle {
  fg: number | null;
  bg: number | null;
  fgRgb: string | null;
  bgRgb: string | null;
  bold: boolean;
  dim: boolean;
  italic: boolean;
  underline: boolean;
}

const PLAIN: ISgrStyle = { fg: null, bg: null, fgRgb: null, bgRgb: null, bold: false, dim: false, italic: false, underline: false };

const CUBE = [0, 95, 135, 175, 215, 255];

function color256(n: number): string | null {
  if (n < 16) return null; // the named colours use classes
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return `rgb(${v},${v},${v})`;
  }
  const i = n - 16;
  return `rgb(${CUBE[Math.floor(i / 36)]},${CUBE[Math.floor(i / 6) % 6]},${CUBE[i % 6]})`;
}

/** A foreground or background colour from an extended code (38 or 48): `5;N` (256 colours)
 * or `2;R;G;B`, and how many codes after the 38/48 it used (0 when it is incomplete). */
function extendedColor(codes: number[], i: number): { named: number | null; rgb: string | null; used: number } {
  if (codes[i + 1] === 5 && i + 2 < codes.length) {
    const n = codes[i + 2];
    const rgb = color256(n);
    return { named: rgb ? null : n, rgb, used: 2 };
  }
  if (codes[i + 1] === 2 && i + 4 < codes.length) {
    return { named: null, rgb: `rgb(${codes[i + 2]},${codes[i + 3]},${codes[i + 4]})`, used: 4 };
  }
  return { named: null, rgb: null, used: 0 };
}

function applySgr(style: ISgrStyle, params: string): void {
  const codes = params.length ? params.split(";").map((p) => (p === "" ? 0 : Number(p))) : [0];
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) Object.assign(style, PLAIN);
    else if (c === 1) style.bold = true;
    else if (c === 2) style.dim = true;
    else if (c === 3) style.italic = true;
    else if (c === 4) style.underline = true;
    else if (c === 22) {
      style.bold = false;
      style.dim = false;
    } else if (c === 23) style.italic = false;
    else if (c === 24) style.underline = false;
    else if (c >= 30 && c <= 37) Object.assign(style, { fg: c - 30, fgRgb: null });
    else if (c >= 90 && c <= 97) Object.assign(style, { fg: c - 90 + 8, fgRgb: null });
    else if (c === 39) Object.assign(style, { fg: null, fgRgb: null });
    else if (c >= 40 && c <= 47) Object.assign(style, { bg: c - 40, bgRgb: null });
    else if (c >= 100 && c <= 107) Object.assign(style, { bg: c - 100 + 8, bgRgb: null });
    else if (c === 49) Object.assign(style, { bg: null, bgRgb: null });
    else if (c === 38 || c === 48) {
      const color = extendedColor(codes, i);
      if (!color.used) continue;
      if (c === 38) Object.assign(style, { fg: color.named, fgRgb: color.rgb });
      else Object.assign(style, { bg: color.named, bgRgb: color.rgb });
      i += color.used;
    }
  }
}

function openTag(style: ISgrStyle): string {
  const classes: string[] = [];
  const css: string[] = [];
  if (style.fg !== null) classes.push(`jt-fg-${style.fg}`);
  if (style.bg !== null) classes.push(`jt-bg-${style.bg}`);
  if (style.fgRgb) css.push(`color:${style.fgRgb}`);
  if (style.bgRgb) css.push(`background:${style.bgRgb}`);
  if (style.bold) classes.push("jt-bold");
  if (style.dim) classes.push("jt-dim");
  if (style.italic) classes.push("jt-italic");
  if (style.underline) classes.push("jt-underline");
  if (!classes.length && !css.length) return "";
  return `<span${classes.length ? ` class="${classes.join(" ")}"` : ""}${css.length ? ` style="${css.join(";")}"` : ""}>`;
}

// Case-insensitive highlight of `query` inside one plain-text segment (already un-styled).
function highlight(text: string, query: string): string {
  if (!query) return escapeHtml(text);
  const lower = text.toLowerCase();
  let out = "";
  let from = 0;
  for (let at = lower.indexOf(query, from); at >= 0; at = lower.indexOf(query, from)) {
    out += `${escapeHtml(text.slice(from, at))}<mark class="jt-match">${escapeHtml(text.slice(at, at + query.length))}</mark>`;
    from = at + query.length;
  }
  return out + escapeHtml(text.slice(from));
}

// Terminal escapes: SGR and other CSI sequences, OSC sequences, charset selection, and the
// other control characters (tab and newline stay).
// biome-ignore lint/suspicious/noControlCharactersInRegex: matching control characters is its purpose
const ESCAPES = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|[\x00-\x08\x0b-\x1f]/g;

// One line (or a block) of terminal output -> HTML. `query` (lower case) is highlighted.
export function ansiToHtml(text: string, query = ""): string {
  const style: ISgrStyle = { ...PLAIN };
  let html = "";
  let last = 0;
  let open = "";
  const flush = (segment: string): void => {
    if (!segment) return;
    html += open ? `${open}${highlight(segment, query)}</span>` : highlight(segment, query);
  };
  ESCAPES.lastIndex = 0;
  for (let m = ESCAPES.exec(text); m; m = ESCAPES.exec(text)) {
    flush(text.slice(last, m.index));
    last = ESCAPES.lastIndex;
    if (m[2] === "m") {
      applySgr(style, m[1]);
      open = openTag(style);
    }
  }
  flush(text.slice(last));
  return html;
}

// The text a person sees (escape codes removed): what the search box matches against.
export function stripAnsi(text: unknown): string {
  ESCAPES.lastIndex = 0;
  return String(text).replace(ESCAPES, "");
}
