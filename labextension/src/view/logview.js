// A bounded, searchable per-rank log view with ANSI colours. The owner gives it lines
// ([rank, text] pairs) and is told when the reader picks another rank. Imports only ansi.js.
import { ansiToHtml, escapeHtml, stripAnsi } from "./ansi.js";

export class LogView {
  /**
   * @param {HTMLElement} container
   * @param {{ onSelect?: (selection: string) => void, maxLines?: number }} [options]
   */
  constructor(container, { onSelect = (_selection) => {}, maxLines = 2000 } = {}) {
    this.maxLines = maxLines;
    this.lines = [];
    this.query = "";
    this.selection = "all";
    this.follow = true;
    this.root = document.createElement("div");
    this.root.className = "jt-log";
    this.root.innerHTML = `
      <div class="jt-toolbar jt-log-toolbar">
        <label class="jt-field">Rank <select class="jt-log-rank" data-testid="jt-log-rank"><option value="all">all ranks</option></select></label>
        <input class="jt-log-search" data-testid="jt-log-search" type="search" placeholder="Search the log…" spellcheck="false">
        <span class="jt-log-count" data-testid="jt-log-count"></span>
        <span class="jt-spacer"></span>
        <span class="jt-log-note"></span>
      </div>
      <div class="jt-log-body" data-testid="jt-log-body" tabindex="0"></div>`;
    container.append(this.root);
    /** @type {HTMLSelectElement} */
    this.select = this.root.querySelector(".jt-log-rank");
    /** @type {HTMLInputElement} */
    this.search = this.root.querySelector(".jt-log-search");
    this.count = this.root.querySelector(".jt-log-count");
    this.note = this.root.querySelector(".jt-log-note");
    this.body = this.root.querySelector(".jt-log-body");
    this.select.addEventListener("change", () => {
      this.selection = this.select.value;
      onSelect(this.selection);
    });
    this.search.addEventListener("input", () => {
      this.query = this.search.value.toLowerCase();
      this.render();
    });
    this.body.addEventListener("scroll", () => {
      const b = this.body;
      if (!b.clientHeight) return; // not laid out (hidden): no reader scrolled it
      this.follow = b.scrollHeight - b.scrollTop - b.clientHeight < 8;
    });
    // A view filled before it is laid out (a Lab tab, an output drawn later) could not be
    // scrolled then: once it gets its size, its newest lines (a failure's traceback) show.
    this.resize = new ResizeObserver(() => {
      if (this.follow && this.body.clientHeight) this.body.scrollTop = this.body.scrollHeight;
    });
    this.resize.observe(this.body);
  }

  /** Stop watching the log body's size (the view is taken down). */
  dispose() {
    this.resize.disconnect();
  }

  setRanks(ranks, selection) {
    const wanted = ["all", ...ranks.map(String)];
    const have = Array.from(this.select.options).map((o) => o.value);
    if (wanted.join() !== have.join()) {
      this.select.innerHTML = wanted.map((v) => `<option value="${v}">${v === "all" ? "all ranks" : `rank ${v}`}</option>`).join("");
    }
    if (selection !== undefined) this.selection = selection;
    this.select.value = this.selection;
  }

  setNote(text) {
    this.note.textContent = text || "";
  }

  setSearch(query) {
    this.search.value = query;
    this.query = query.toLowerCase();
  }

  _lineHtml([rank, text]) {
    const prefix = this.selection === "all" ? `<span class="jt-log-rankmark jt-rank-${rank % 8}">[${rank}]</span> ` : "";
    return `<div class="jt-log-line" data-testid="jt-log-line">${prefix}${ansiToHtml(text, this.query) || "&#8203;"}</div>`;
  }

  _matches(line) {
    return !this.query || stripAnsi(line[1]).toLowerCase().includes(this.query);
  }

  setLines(lines) {
    this.lines = lines.slice(-this.maxLines);
    this.render();
  }

  append(lines) {
    if (!lines.length) return;
    this.lines.push(...lines);
    const drop = this.lines.length - this.maxLines;
    if (drop > 0) this.lines.splice(0, drop);
    if (this.query || this.body.querySelector(".jt-log-empty")) {
      this.render();
      return;
    }
    this.body.insertAdjacentHTML("beforeend", lines.map((l) => this._lineHtml(l)).join(""));
    while (this.body.childElementCount > this.maxLines) this.body.firstElementChild.remove();
    this._after(this.lines.length);
  }

  render() {
    const shown = this.lines.filter((l) => this._matches(l));
    this.body.innerHTML = shown.length
      ? shown.map((l) => this._lineHtml(l)).join("")
      : `<div class="jt-log-empty">${this.lines.length ? `no line matches “${escapeHtml(this.search.value)}”` : "no output yet"}</div>`;
    this._after(shown.length);
  }

  _after(shown) {
    this.count.textContent = this.query ? `${shown} of ${this.lines.length} lines` : `${this.lines.length} lines`;
    if (this.follow) {
      this.body.scrollTop = this.body.scrollHeight;
      // a view being built is not in the page yet: scroll once it is laid out
      requestAnimationFrame(() => { if (this.follow) this.body.scrollTop = this.body.scrollHeight; });
    }
  }
}
