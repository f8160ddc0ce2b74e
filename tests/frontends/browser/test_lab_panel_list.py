"""The Training Runs panel's list in a real JupyterLab, in headless Chromium, at the width
JupyterLab gives it and a laptop's height, over a store of 60 runs: a filter that matches
nothing says so (not "No runs yet") and offers to clear itself; the filter's placeholder is
whole, run ids are never broken across lines, and more than a handful of runs fit; the list
is updated in place, so a row, and an id selected in it, outlive the refreshes.
"""

from __future__ import annotations

from support.browser_page import browser  # noqa: F401 (the fixture)
from support.browser_views import open_panel
from support.made_runs import finish, new_run

from jupyter_trainer.store import Store

RUNS = 60
ROW = "[data-testid=jt-runs-row]"

# Whether the placeholder of the input fits in the box it has for text.
PLACEHOLDER_FITS = """input => {
    const style = getComputedStyle(input);
    const ctx = document.createElement('canvas').getContext('2d');
    ctx.font = `${style.fontStyle} ${style.fontWeight} ${style.fontSize} ${style.fontFamily}`;
    const room = input.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return [ctx.measureText(input.placeholder).width, room]; }"""

# The rows wholly inside the list's visible part.
ROWS_IN_VIEW = """body => {
    const box = body.getBoundingClientRect();
    return [...body.querySelectorAll('[data-testid=jt-runs-row]')].filter(r => {
        const b = r.getBoundingClientRect(); return b.top >= box.top - 1 && b.bottom <= box.bottom + 1;
    }).length; }"""


def test_the_run_list_at_its_default_width(browser, home):
    lab, page = browser
    pw = page.page
    store = Store(home)
    ids = [new_run(store, f"resnet50-lr-sweep-{i:02d}") for i in range(RUNS)]
    for run_id in ids[:-1]:
        finish(store, run_id)
    live = ids[-1]  # never ended: its duration counts, so its row changes every refresh
    pw.set_viewport_size({"width": 1280, "height": 800})  # a laptop's screen
    open_panel(page, lab)
    row = f"{ROW}[data-run='{live}']"
    pw.wait_for_selector(row)
    pw.wait_for_function(f"document.querySelectorAll('{ROW}').length === {RUNS}")
    page.shot("panel-60-runs", "#jupyter-trainer-runs")

    # the filter's placeholder is whole; no id is broken across lines; many runs fit
    text, room = pw.eval_on_selector("[data-testid=jt-runs-name]", PLACEHOLDER_FITS)
    assert text <= room, f"the placeholder needs {text:.0f} px, the input has {room:.0f}"
    broken = pw.eval_on_selector_all(
        "[data-testid=jt-runs-id]",
        "ids => ids.filter(c => c.getClientRects().length > 1 || "
        "c.getBoundingClientRect().height > 1.6 * parseFloat(getComputedStyle(c).lineHeight || 16))"
        ".map(c => c.textContent)",
    )
    assert broken == [], f"ids broken across lines: {broken}"
    shown = pw.eval_on_selector("[data-testid=jt-runs-body]", ROWS_IN_VIEW)
    assert shown >= 12, f"only {shown} runs are in view"

    # refreshed every 1.5 s, the list keeps its rows: one marked, and its id selected, stay
    pw.eval_on_selector(row, "r => { r.jtMark = 'kept'; }")
    select = """c => { const range = document.createRange(); range.selectNodeContents(c);
        getSelection().removeAllRanges(); getSelection().addRange(range); }"""
    pw.eval_on_selector(f"{row} [data-testid=jt-runs-id]", select)
    selected = pw.evaluate("getSelection().toString()")
    assert selected and live.endswith(selected), selected
    duration = pw.inner_text(f"{row} .jt-runs-duration")
    pw.wait_for_function(
        "([sel, before]) => document.querySelector(sel).innerText !== before",
        arg=[f"{row} .jt-runs-duration", duration],
    )
    pw.wait_for_timeout(3000)
    assert pw.eval_on_selector(row, "r => r.jtMark") == "kept", "the row was drawn anew"
    assert pw.evaluate("getSelection().toString()") == selected, "the selected id was lost"

    # a filter that matches nothing says so, and clears itself on request
    pw.fill("[data-testid=jt-runs-name]", "no-such-run")
    empty = "[data-testid=jt-runs-empty]"
    pw.wait_for_selector(f"{empty}:has-text('No runs match')")
    said = " ".join(pw.inner_text(empty).split())
    assert "no-such-run" in said and "No runs yet" not in said, said
    page.shot("panel-no-match", "#jupyter-trainer-runs")
    pw.click(f"{empty} [data-testid=jt-runs-clear]")
    pw.wait_for_function(f"document.querySelectorAll('{ROW}').length === {RUNS}")
    assert pw.input_value("[data-testid=jt-runs-name]") == ""
