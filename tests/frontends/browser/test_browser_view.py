"""The run view's figures and charts in a real JupyterLab, in headless Chromium: which rank
each figure is of, in either chart mode; whole-number step ticks; zeros on a log scale;
and charts that follow a theme switched while they are shown, alike in the notebook widget
and the Lab view. Screenshots go under ``$JT_ARTIFACTS`` like test_browser.py's.
"""

from __future__ import annotations

import os
import re
import shutil

from conftest import REPO, leftover
from support.browser_page import browser, themed_browser  # noqa: F401 (the fixtures)
from support.browser_views import assert_readable, luminance, write_state
from support.workloads import RAISES

from jupyter_trainer import api

# Two ranks, four steps: acc goes down to 0.5 on rank 0 and to 0.406 on rank 1; loss
# reaches 0 on rank 0 at step 2.
# The first attempt fails after step 1; the second goes on from step 2.
SHORT_CELL = """%%train --procs 2 --max-restarts 1 --name figures
from jupyter_trainer import runtime as jt
acc = {0: [0.5, 0.7, 0.9, 0.8], 1: [0.6, 0.406, 0.8, 0.85]}[jt.rank]
loss = {0: [1.0, 0.5, 0.0, 0.25], 1: [1.1, 0.6, 0.1, 0.35]}[jt.rank]
for step in range(2 if jt.attempt else 0, 4):
    jt.log(step=step, acc=acc[step], loss=loss[step])
    jt.progress(step + 1, 4)
    if step == 1 and not jt.attempt:
        jt.flush()  # both ranks' step 1 is written before either fails
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        raise RuntimeError("the first attempt fails after step 1")
"""

# The mean ink of the y-axis labels of a chart's canvas (its left 44 CSS pixels).
LABEL_INK = """c => {
    const w = Math.round(44 * devicePixelRatio), d = c.getContext('2d').getImageData(0, 0, w, c.height).data;
    let sum = 0, n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 40) { sum += 0.2126 * d[i] + 0.7152 * d[i + 1] + 0.0722 * d[i + 2]; n++; }
    return n ? sum / n / 255 : null; }"""


def words(text: str) -> str:
    return " ".join(text.split())


def check_figures(page, root: str) -> None:
    """The figures of the run view under ``root`` each say which rank or ranks they are of,
    in Per rank mode and in Mean mode alike; steps are ticked with whole numbers."""
    pw = page.page
    acc = f"{root} .jt-chart-card[data-metric=acc]"
    pw.wait_for_selector(f"{acc} [data-testid=jt-chart][data-points]")
    assert (
        words(page.text(f"{acc} .jt-chart-stats"))
        == "ranks 0, 1 · last 0.8–0.85 · min 0.406 (rank 1) · max 0.9 (rank 0)"
    )
    chip = f"{root} .jt-metric-chip[data-metric=acc]"
    assert words(page.text(chip)) == "acc 0.8–0.85 ranks 0, 1"
    assert "min 0.406 (rank 1)" in pw.get_attribute(chip, "title")
    ticks = pw.get_attribute(f"{acc} [data-testid=jt-chart]", "data-x-ticks").split()
    assert ticks == ["0", "1", "2", "3"], ticks  # not 0 0.5 1 ... 2.5
    # each rank's two attempts are lines of their own, the earlier one named in the legend,
    # on steps and on wall time (never joined across the restart), and the footer counts
    # each rank's own points
    chart = f"{acc} [data-testid=jt-chart]"
    assert pw.get_attribute(chart, "data-series") == "4"
    assert words(page.text(f"{acc} [data-testid=jt-attempts-legend]")) == "an earlier attempt"
    assert words(page.text(f"{acc} .jt-chart-foot")) == "4 points per rank · 2 ranks"
    pw.click(f"{root} [data-testid=jt-opt-x] button[data-value=time]")
    pw.wait_for_selector(f"{chart}[data-x=time]")
    assert pw.get_attribute(chart, "data-series") == "4"
    pw.click(f"{root} [data-testid=jt-opt-x] button[data-value=step]")
    pw.wait_for_selector(f"{chart}[data-x=step]")
    # the mean of the ranks: the header, the chips and the legend all say so
    pw.click(f"{root} [data-testid=jt-opt-agg] button[data-value=mean]")
    pw.wait_for_selector(f"{chip}:has-text('mean')")
    assert words(page.text(chip)) == "acc 0.825 mean"
    assert pw.get_attribute(chip, "title").startswith(
        "mean of 2 ranks: last 0.825 · min 0.55 · max 0.85"
    )
    pw.wait_for_selector(f"{acc} .jt-chart-stats:has-text('mean of 2 ranks')")
    assert (
        words(page.text(f"{acc} .jt-chart-stats"))
        == "mean of 2 ranks · last 0.825 · min 0.55 · max 0.85"
    )
    pw.click(f"{root} [data-testid=jt-opt-agg] button[data-value=ranks]")
    pw.wait_for_selector(f"{acc} .jt-chart-stats:has-text('ranks 0, 1')")
    # on a log scale rank 0's zero is marked and counted, as a NaN is
    loss = f"{root} .jt-chart-card[data-metric=loss]"
    pw.click(f"{root} [data-testid=jt-opt-y] button[data-value=log]")
    pw.wait_for_selector(f"{loss} .jt-chart-foot:has-text('≤ 0')")
    assert pw.get_attribute(f"{loss} [data-testid=jt-chart]", "data-non-positive") == "1"
    assert "1 value ≤ 0 (×, not drawn on a log scale)" in page.text(f"{loss} .jt-chart-foot")
    pw.click(f"{root} [data-testid=jt-opt-y] button[data-value=linear]")


def chart_colours(page, root: str) -> list[dict]:
    """Each chart under ``root``: the colours it was drawn in, the theme's colours for them
    now, and the mean luminance of its y-axis labels as drawn."""
    return page.page.eval_on_selector_all(
        f"{root} [data-testid=jt-chart]",
        f"""cs => cs.map(c => {{
        const style = getComputedStyle(c.closest('.jt-monitor'));
        return {{axis: c.dataset.axisColor, grid: c.dataset.gridColor,
                 themeAxis: style.getPropertyValue('--jt-muted').trim(),
                 themeGrid: style.getPropertyValue('--jt-border').trim(),
                 background: style.backgroundColor, ink: ({LABEL_INK})(c)}}; }})""",
    )


def switch_theme(pw, theme: str) -> None:
    """Settings > Theme > ``theme``, as a person switches it."""
    pw.click(".lm-MenuBar-item:has-text('Settings')")
    pw.hover(".lm-Menu-item:has-text('Theme')")
    pw.click(f".lm-Menu-item[data-command='apputils:change-theme']:has-text('{theme}')")
    light = "true" if "Light" in theme else "false"
    pw.wait_for_function(f"document.body.dataset.jpThemeLight === '{light}'")


def chart_widths(page, root: str) -> list[tuple[float, float]]:
    """Each chart under ``root``: the width of its canvas and of the area it fills (CSS px)."""
    return page.page.eval_on_selector_all(
        f"{root} [data-testid=jt-chart]",
        """cs => cs.map(c => [c.getBoundingClientRect().width,
                              c.closest('.jt-chart-area').getBoundingClientRect().width])""",
    )


def assert_full_width(page, root: str) -> None:
    """Every chart under ``root`` fills its area's width, as drawn for it."""
    widths = chart_widths(page, root)
    assert widths and all(abs(canvas - area) <= 2 for canvas, area in widths), widths


def check_dark(page, root: str) -> list[dict]:
    charts = chart_colours(page, root)
    assert charts, f"no chart under {root}"
    for chart in charts:
        assert luminance(chart["background"]) < 0.3, chart
        assert chart["axis"] == chart["themeAxis"] and chart["grid"] == chart["themeGrid"], chart
        assert chart["ink"] is not None and chart["ink"] > 0.5, f"dark tick labels on dark: {chart}"
    return charts


def check_a_press_whose_chip_moved_away(pw, root: str) -> None:
    """A chip pressed, moved from under the pointer by an update (a longer value in the chip
    before it), and released where it was pressed is toggled all the same."""
    loss = f"{root} .jt-metric-chip[data-metric=loss]"
    assert "jt-on" in (pw.get_attribute(loss, "class") or "")
    figure = pw.locator(f"{loss} b").bounding_box()
    x, y = figure["x"] + figure["width"] / 2, figure["y"] + figure["height"] / 2
    pw.mouse.move(x, y)
    pw.mouse.down()
    pw.eval_on_selector(
        f"{root} .jt-metric-chip[data-metric=acc] b", "b => b.textContent = '0.5'.repeat(40)"
    )
    under = (
        "([x, y]) => document.elementFromPoint(x, y)?.closest('.jt-metric-chip')?.dataset.metric"
    )
    assert pw.evaluate(under, [x, y]) != "loss", "the chip did not move from under the pointer"
    pw.mouse.up()
    pw.wait_for_selector(f"{loss}:not(.jt-on)", timeout=10_000)
    pw.click(loss)
    pw.wait_for_selector(f"{loss}.jt-on", timeout=10_000)


def test_figures_name_their_ranks_and_charts_follow_a_theme_switch(browser, home):
    lab, page = browser
    pw = page.page
    lab.write_notebook("figures.ipynb", ["%load_ext jupyter_trainer", SHORT_CELL])
    page.open("figures.ipynb")
    page.run_all()
    widget = ".jp-OutputArea [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{widget} [data-testid=jt-status]:text-is('completed')")
    run = api.get_run(page.text(f"{widget} [data-testid=jt-run-id]"))
    check_figures(page, widget)
    page.shot("figures-widget", widget)
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}']")
    view = f"#jt-run-{run.id} [data-testid=jt-monitor]"
    check_figures(page, view)
    light = chart_colours(page, view)
    assert all(c["ink"] is not None and c["ink"] < 0.5 for c in light), light
    assert_full_width(page, view)

    # switched while the Lab view is shown: its charts are drawn again in the dark theme
    switch_theme(pw, "JupyterLab Dark")
    pw.wait_for_timeout(300)
    lab_view = check_dark(page, view)
    assert_full_width(page, view)  # drawn again at its full width, not squashed
    page.shot("figures-lab-view-dark", view)
    # and the widget's, though its notebook was hidden then; both draw the same grid
    pw.click(".lm-TabBar-tab:has-text('figures.ipynb')")
    pw.wait_for_selector(f"{widget} [data-testid=jt-chart]")
    pw.wait_for_timeout(300)
    in_widget = check_dark(page, widget)
    assert_full_width(page, widget)
    assert {c["grid"] for c in in_widget} == {c["grid"] for c in lab_view}
    assert {c["axis"] for c in in_widget} == {c["axis"] for c in lab_view}
    page.shot("figures-widget-dark", widget)
    # and back
    switch_theme(pw, "JupyterLab Light")
    pw.wait_for_timeout(300)
    back = chart_colours(page, widget)
    assert [c["grid"] for c in back] == [c["themeGrid"] for c in back]
    assert all(c["ink"] < 0.5 for c in back), back
    assert_full_width(page, widget)
    check_a_press_whose_chip_moved_away(pw, widget)
    assert not re.search("error", " ".join(page.errors), re.I), page.errors
    assert leftover(run.id) == []


def test_a_rank_waiting_in_a_debugger_is_shown_with_how_to_attach(browser, home):
    """``--debug``: the widget and the Lab view name the rank that waits in pdb, where it
    stopped and the two ways to attach; cancelling the run ends it with nothing left."""

    lab, page = browser
    pw = page.page
    cell = "%%train --procs 2 --debug --no-wait --name dbg\n" + RAISES.lstrip()
    lab.write_notebook("debug.ipynb", ["%load_ext jupyter_trainer", cell])
    page.open("debug.ipynb")
    page.run_all()
    widget = ".jp-OutputArea [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{widget} [data-testid=jt-debugging]", timeout=120_000)
    banner = f"{widget} [data-testid=jt-stall]"  # the title, the rank's row, how to attach
    run = api.get_run(page.text(f"{widget} [data-testid=jt-run-id]"))
    said = words(page.text(banner))
    assert said.startswith("pdb Rank 1 waits in a debugger"), said
    assert "ValueError: bad batch 3.0" in said, said
    assert f"%train debug {run.id}" in said and f"jupyter-trainer debug {run.id}" in said, said
    page.shot("debugging-widget", widget)
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}']")
    pw.wait_for_selector(f"#jt-run-{run.id} [data-testid=jt-debugging]")
    in_view = f"#jt-run-{run.id} [data-testid=jt-stall]"
    assert words(page.text(in_view)) == said
    run.cancel(wait=True, timeout=60)
    pw.wait_for_selector(f"#jt-run-{run.id} [data-testid=jt-status]:text-is('canceled')")
    pw.wait_for_selector(f"#jt-run-{run.id} [data-testid=jt-debugging]", state="detached")
    assert leftover(run.id) == []


THEMED_CELL = """%%train --procs 2 --name themed
from jupyter_trainer import runtime as jt
for step in range(60):
    loss = float("nan") if step == 15 else 2.0 / (1 + 0.1 * step)
    jt.log(step=step, loss=loss, accuracy=step / 60 + 0.05 * jt.rank, phase="train")
    jt.progress(step + 1, 60)
    print(f"\\x1b[32mINFO\\x1b[0m rank {jt.rank} step {step}", flush=True)
"""


def test_the_run_view_follows_the_theme_in_the_widget_and_the_lab_view(themed_browser, home):
    lab, page, theme = themed_browser
    lab.write_notebook("themed.ipynb", ["%load_ext jupyter_trainer", "lr = 0.1", THEMED_CELL])
    page.open("themed.ipynb")
    page.run_all()
    pw = page.page
    widget = ".jp-OutputArea [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{widget} [data-testid=jt-status]:text-is('completed')")
    pw.wait_for_selector(f"{widget} [data-testid=jt-chart][data-points]")
    run = api.get_run(page.text(f"{widget} [data-testid=jt-run-id]"))
    shots = {}

    def check(where: str, root: str) -> None:
        background = pw.eval_on_selector(root, "el => getComputedStyle(el).backgroundColor")
        color = pw.eval_on_selector(
            f"{root} [data-testid=jt-name]", "el => getComputedStyle(el).color"
        )
        dark = theme == "dark"
        assert (luminance(background) < 0.3) == dark and (luminance(color) > 0.6) == dark, (
            where,
            theme,
            background,
            color,
        )
        assert pw.text_content(f"{root} [data-testid=jt-status]") == "completed"
        # NaN at step 15 on both ranks: marked on the chart and counted, never dropped
        loss = f"{root} .jt-chart-card[data-metric=loss]"
        assert pw.get_attribute(f"{loss} [data-testid=jt-chart]", "data-non-finite") == "2"
        assert "2 NaN/inf" in page.text(f"{loss} .jt-chart-foot")
        assert re.search(
            r"min 0\.28\d* \(rank 0\) · max 2 \(rank 0\)", page.text(f"{loss} .jt-chart-stats")
        )
        if where == "lab":  # opened after the NaN was recorded; the widget had ended before
            nan = f"{root} [data-testid=jt-non-finite]"
            assert page.text(nan) == "⚠ loss became NaN at step 15 on rank 0"
            assert_readable(pw, nan)
        shots[where] = page.shot(f"run-view-{theme}-{where}", root)

    check("widget", widget)
    first = {"rank": 0, "step": 15, "value": "nan", "t": run.state["created"]}
    write_state(run, non_finite={"loss": first})  # as the supervisor records it
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
    pw.click(f"[data-testid=jt-runs-row][data-run='{run.id}']")
    view = f"#jt-run-{run.id} [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{view} [data-testid=jt-chart][data-points]")
    check("lab", view)
    if os.environ.get("JT_UPDATE_SCREENSHOTS"):  # refresh the docs' pictures on purpose only
        for path in shots.values():
            shutil.copy(path, REPO / "docs" / "screenshots" / path.name)
    assert leftover(run.id) == []
