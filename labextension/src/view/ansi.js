// ANSI SGR escape codes -> HTML spans. Colours use CSS classes (jt-fg-N / jt-bg-N) so
// themes can restyle them; 256-colour and true-colour codes become inline styles.
// Standalone ES module: no imports, reused by the log view and the traceback banner.

export function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

const CUBE = [0, 95, 135, 175, 215, 255];

function color256(n) {
  if (n < 16) return null; // the named colours use classes
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return `rgb(${v},${v},${v})`;
  }
  const i = n - 16;
  return `rgb(${CUBE[Math.floor(i / 36)]},${CUBE[Math.floor(i / 6) % 6]},${CUBE[i % 6]})`;
}

function applySgr(style, params) {
  const codes = params.length ? params.split(";").map((p) => (p === "" ? 0 : Number(p))) : [0];
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) Object.assign(style, { fg: null, bg: null, fgRgb: null, bgRgb: null, bold: false, dim: false, italic: false, underline: false });
    else if (c === 1) style.bold = true;
    else if (c === 2) style.dim = true;
    else if (c === 3) style.italic = true;
    else if (c === 4) style.underline = true;
    else if (c === 22) style.bold = style.dim = false;
    else if (c === 23) style.italic = false;
    else if (c === 24) style.underline = false;
    else if (c >= 30 && c <= 37) Object.assign(style, { fg: c - 30, fgRgb: null });
    else if (c >= 90 && c <= 97) Object.assign(style, { fg: c - 90 + 8, fgRgb: null });
    else if (c === 39) Object.assign(style, { fg: null, fgRgb: null });
    else if (c >= 40 && c <= 47) Object.assign(style, { bg: c - 40, bgRgb: null });
    else if (c >= 100 && c <= 107) Object.assign(style, { bg: c - 100 + 8, bgRgb: null });
    else if (c === 49) Object.assign(style, { bg: null, bgRgb: null });
    else if (c === 38 || c === 48) {
      const key = c === 38 ? "fg" : "bg";
      if (codes[i + 1] === 5 && i + 2 < codes.length) {
        const n = codes[i + 2];
        const rgb = color256(n);
        if (rgb) Object.assign(style, { [key]: null, [key + "Rgb"]: rgb });
        else Object.assign(style, { [key]: n, [key + "Rgb"]: null });
        i += 2;
      } else if (codes[i + 1] === 2 && i + 4 < codes.length) {
        Object.assign(style, { [key]: null, [key + "Rgb"]: `rgb(${codes[i + 2]},${codes[i + 3]},${codes[i + 4]})` });
        i += 4;
      }
    }
  }
}

function openTag(style) {
  const classes = [];
  const css = [];
  if (style.fg !== null && style.fg !== undefined) classes.push(`jt-fg-${style.fg}`);
  if (style.bg !== null && style.bg !== undefined) classes.push(`jt-bg-${style.bg}`);
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
function highlight(text, query) {
  if (!query) return escapeHtml(text);
  const lower = text.toLowerCase();
  let out = "";
  let from = 0;
  for (let at = lower.indexOf(query, from); at >= 0; at = lower.indexOf(query, from)) {
    out += escapeHtml(text.slice(from, at)) + `<mark class="jt-match">${escapeHtml(text.slice(at, at + query.length))}</mark>`;
    from = at + query.length;
  }
  return out + escapeHtml(text.slice(from));
}

// eslint-disable-next-line no-control-regex
const ESCAPES = /\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|[\x00-\x08\x0b-\x1f]/g;

// One line (or a block) of terminal output -> HTML. `query` (lower case) is highlighted.
export function ansiToHtml(text, query = "") {
  const style = {};
  let html = "";
  let last = 0;
  let open = "";
  const flush = (segment) => {
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
export function stripAnsi(text) {
  ESCAPES.lastIndex = 0;
  return String(text).replace(ESCAPES, "");
}
