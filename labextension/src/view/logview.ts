// A bounded, searchable per-rank log view with ANSI colours. The owner gives it lines
// ([rank, text] pairs) and is told when the reader picks another rank.
import { ansiToHtml, escapeHtml, stripAnsi } from "./ansi.js";
import { counted } from "./chart.js";
import { part } from "./viewparts";

/** One line of a run's output: the rank that wrote it, and its text (with ANSI codes). */
export type LogLine = [rank: number, text: string];

export interface ILogViewOptions {
  /** Told the rank the reader picked ("all", or a rank's number as text). */
  onSelect?: (selection: string) => void;
  /** The most lines kept: older ones are dropped. */
  maxLines?: number;
}

/** What an empty log says: output may still come while the run goes on; once it has
 * ended, there is none, or the rank shown printed nothing. */
export function emptyLogText(finished: boolean, selection: string): string {
  if (!finished) return "no output yet";
  return selection === "all" ? "no output" : `rank ${selection} printed nothing`;
}

export class LogView {
  readonly maxLines: number;
  lines: LogLine[] = [];
  query = "";
  selection = "all";
  follow = true;
  /** Whether the run has ended, so no more output will come. */
  finished = false;
  readonly root: HTMLDivElement;
  readonly select: HTMLSelectElement;
  readonly search: HTMLInputElement;
  private readonly count: HTMLElement;
  private readonly note: HTMLElement;
  private readonly body: HTMLElement;
  private readonly resize: ResizeObserver;

  constructor(container: HTMLElement, { onSelect = () => undefined, maxLines = 2000 }: ILogViewOptions = {}) {
    this.maxLines = maxLines;
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
    this.select = part<HTMLSelectElement>(this.root, ".jt-log-rank");
    this.search = part<HTMLInputElement>(this.root, ".jt-log-search");
    this.count = part<HTMLElement>(this.root, ".jt-log-count");
    this.note = part<HTMLElement>(this.root, ".jt-log-note");
    this.body = part<HTMLElement>(this.root, ".jt-log-body");
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
  dispose(): void {
    this.resize.disconnect();
  }

  setRanks(ranks: readonly (number | string)[], selection?: string): void {
    const wanted = ["all", ...ranks.map(String)];
    const have = Array.from(this.select.options).map((o) => o.value);
    if (wanted.join() !== have.join()) {
      this.select.innerHTML = wanted.map((v) => `<option value="${v}">${v === "all" ? "all ranks" : `rank ${v}`}</option>`).join("");
    }
    if (selection !== undefined) this.selection = selection;
    this.select.value = this.selection;
  }

  setNote(text: string | null | undefined): void {
    this.note.textContent = text || "";
  }

  setSearch(query: string): void {
    this.search.value = query;
    this.query = query.toLowerCase();
  }

  private lineHtml([rank, text]: LogLine): string {
    const prefix = this.selection === "all" ? `<span class="jt-log-rankmark jt-rank-${rank % 8}">[${rank}]</span> ` : "";
    return `<div class="jt-log-line" data-testid="jt-log-line">${prefix}${ansiToHtml(text, this.query) || "&#8203;"}</div>`;
  }

  private matches(line: LogLine): boolean {
    return !this.query || stripAnsi(line[1]).toLowerCase().includes(this.query);
  }

  setLines(lines: readonly LogLine[]): void {
    this.lines = lines.slice(-this.maxLines);
    this.render();
  }

  /** Say whether the run has ended (an empty log then says there is no output). */
  setFinished(finished: boolean): void {
    if (finished === this.finished) return;
    this.finished = finished;
    if (this.body.querySelector(".jt-log-empty")) this.render();
  }

  append(lines: readonly LogLine[]): void {
    if (!lines.length) return;
    this.lines.push(...lines);
    const drop = this.lines.length - this.maxLines;
    if (drop > 0) this.lines.splice(0, drop);
    if (this.query || this.body.querySelector(".jt-log-empty")) {
      this.render();
      return;
    }
    this.body.insertAdjacentHTML("beforeend", lines.map((l) => this.lineHtml(l)).join(""));
    while (this.body.childElementCount > this.maxLines) this.body.firstElementChild?.remove();
    this.after(this.lines.length);
  }

  render(): void {
    const shown = this.lines.filter((l) => this.matches(l));
    this.body.innerHTML = shown.length
      ? shown.map((l) => this.lineHtml(l)).join("")
      : `<div class="jt-log-empty">${this.lines.length ? `no line matches “${escapeHtml(this.search.value)}”` : escapeHtml(emptyLogText(this.finished, this.selection))}</div>`;
    this.after(shown.length);
  }

  private after(shown: number): void {
    this.count.textContent = this.query ? `${shown} of ${counted(this.lines.length, "line")}` : counted(this.lines.length, "line");
    if (this.follow) {
      this.body.scrollTop = this.body.scrollHeight;
      // a view being built is not in the page yet: scroll once it is laid out
      requestAnimationFrame(() => {
        if (this.follow) this.body.scrollTop = this.body.scrollHeight;
      });
    }
  }
}
