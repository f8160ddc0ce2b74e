"""The live run view as the browser tests check it: the cell that feeds it, and the checks of
its progress, charts, logs, stall notice and Cancel, in the widget or in the Lab view.
"""

from __future__ import annotations

import re
import time

from conftest import leftover, wait_for

from support.browser_page import TIMEOUT_MS, Page

LIVE_CELL = """%%train --procs 2 --name browser-live
import sys, time
from jupyter_trainer import runtime as jt
total = steps_per_epoch * epochs
for step in range(total):
    loss = 2.0 / (1 + 0.05 * step) + 0.05 * ((step * 7919) % 13) / 13
    jt.log(step=step, loss=loss, accuracy=min(0.99, step / total + 0.1 * jt.rank), lr=lr * 0.995 ** step,
           phase="train")
    jt.progress(step + 1, total)
    print(f"\\x1b[32mINFO\\x1b[0m rank {jt.rank} step {step:4d} loss={loss:.4f}", flush=True)
    if step % 25 == 0:
        print(f"\\x1b[33mWARN\\x1b[0m rank {jt.rank}: step {step} checkpoint skipped", file=sys.stderr, flush=True)
    time.sleep(0.08)
"""


LIVE_PARAMS = {"lr": 0.1, "epochs": 50, "steps_per_epoch": 20}
STALL_STACK = """Process 4242: python -m jupyter_trainer.rankside.rank.boot
Python v3.12.3 (/usr/bin/python3.12)

Thread 4242 (active): "MainThread"
    wait_for_batch (loader.py:88)
    train_step (cell.py:12)
    <module> (cell.py:30)
Thread 4250 (idle): "pin_memory"
    select (selectors.py:415)
"""  # what py-spy dump prints of a rank


def write_state(run, **fields) -> None:
    """Put ``fields`` into the run's state (None takes one away), through the store, as its
    supervisor records a stall, a restart or a NaN."""
    state = run.store.read_state(run.id)
    for key, value in fields.items():
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    run.store.write_state(run.id, state)


def under(root: str, selector: str) -> str:
    """``selector`` (a list of them, comma-separated) inside ``root``."""
    return ", ".join(f"{root} {part.strip()}" for part in selector.split(","))


def check_stall(page: Page, root: str, run, shot, panel_row: str = "") -> None:
    """A stalled rank, a restart and a NaN recorded in the run's state: the view warns with
    the rank, its last step, the time it is stuck (counting) and its stack's top frame,
    lists the attempts and names the NaN; the runs list row (``panel_row``) marks the stall.
    Once the rank makes progress again the warning goes."""
    pw = page.page
    within = lambda selector: under(root, selector)
    assert pw.locator(within("[data-testid=jt-attempt]")).is_hidden()  # no restarts, no attempt
    now = time.time()
    rank1 = {
        "rank": 1,
        "seconds": 30.0,
        "since": now - 42,
        "last_step": 4,
        "host": "node-b",
        "stack": STALL_STACK,
        "waiting": False,
    }
    write_state(
        run,
        stalled=[rank1],
        attempts=[
            {
                "attempt": 0,
                "start": now - 100,
                "end": now - 60,
                "failed_rank": 1,
                "error": "RuntimeError: NCCL watchdog timeout",
            },
            {"attempt": 1, "start": now - 58, "end": None, "failed_rank": None, "error": None},
        ],
        non_finite={"loss": {"rank": 0, "step": 15, "value": "nan", "t": now - 50}},
    )
    banner = within("[data-testid=jt-stall][role=alert]")
    pw.wait_for_selector(f"{banner}:has-text('Rank 1 is stalled')")
    assert_readable(pw, banner)
    said = " ".join(page.text(banner).split())
    assert re.search(
        r"Rank 1: no progress for 4\d s after step 4 on node-b in wait_for_batch "
        r"\(loader\.py:88\)",
        said,
    ), said
    clock = lambda: page.text(within("[data-testid=jt-stall] .jt-stall-for"))
    first = clock()
    wait_for(lambda: clock() != first, 5, what="the stall time to count on")
    pw.click(within("[data-testid=jt-stall] summary"))
    assert "train_step (cell.py:12)" in page.text(within("[data-testid=jt-stall] pre"))
    # a newer stack of the same stall: the stack the reader opened stays open
    write_state(run, stalled=[{**rank1, "stack": STALL_STACK + "    prefetch (loader.py:60)\n"}])
    pw.wait_for_selector(
        within("[data-testid=jt-stall] pre:has-text('prefetch (loader.py:60)')"), state="attached"
    )
    assert pw.locator(within("[data-testid=jt-stall] details")).get_attribute("open") is not None
    assert page.text(within("[data-testid=jt-attempt]")) == "attempt 2"
    attempts = " ".join(page.text(within("[data-testid=jt-attempts]")).split())
    assert re.search(r"1 \S+ 0:40 rank 1 failed: RuntimeError: NCCL watchdog timeout", attempts), (
        attempts
    )
    assert "loss became NaN at step 15 on rank 0" in page.text(
        within("[data-testid=jt-non-finite]")
    )
    if panel_row:
        pw.wait_for_selector(
            f"{panel_row} [data-testid=jt-runs-stalled]:has-text('stalled: rank 1')"
        )
        assert page.text(f"{panel_row} [data-testid=jt-runs-attempt]") == "attempt 2"
        page.shot("panel-stalled", "#jupyter-trainer-runs")
    shot("02b-stalled")
    write_state(run, stalled=None, attempts=None, non_finite=None)
    pw.wait_for_selector(banner, state="hidden")
    assert pw.locator(within("[data-testid=jt-attempt]")).is_hidden()
    if panel_row:
        pw.wait_for_selector(f"{panel_row} [data-testid=jt-runs-stalled]", state="detached")


def check_live_view(page: Page, root: str, run, *, shots: str = "", panel_row: str = "") -> None:
    """What a person sees of a live run, asserted on the run view under ``root``: the
    notebook widget and the Lab view run this same function, as they are one component."""
    pw = page.page
    within = lambda selector: under(root, selector)

    def shot(name: str) -> None:
        page.shot(f"{shots}{name}", root)

    pw.wait_for_selector(within(f"[data-testid=jt-name]:text-is('{run.spec.name}')"))
    assert page.text(within("[data-testid=jt-run-id]")) == run.id
    params = " ".join(page.text(within("[data-testid=jt-params]")).split())
    assert all(f"{k} {v}" in params for k, v in LIVE_PARAMS.items()), params
    assert "target local" in page.text(within("[data-testid=jt-meta]"))
    pw.wait_for_selector(within("[data-testid=jt-status]:text-is('running')"))
    assert page.attr(within("[data-testid=jt-stages] [data-stage=running]"), "class").endswith(
        "jt-stage-active"
    )
    shot("01-running")

    # the progress bar advances, with rate and ETA
    fraction = lambda: float(
        page.attr(within("[data-testid=jt-progress-fill]"), "data-fraction") or 0
    )
    first = wait_for(fraction, 60, what="progress")
    wait_for(lambda: fraction() > first + 0.02, 60, what="the progress bar to advance")
    assert re.search(
        r"\d+ / 1,?000 \(\d+%\) .* steps/s .* ETA",
        page.text(within("[data-testid=jt-progress-text]")),
    )
    shot("02-progress")
    check_stall(page, root, run, shot, panel_row)

    # charts with their chips, legends and stats are drawn and grow
    pw.wait_for_selector(within("[data-testid=jt-chart][data-points]"))
    titles = lambda: pw.locator(within(".jt-chart-title")).all_inner_texts()
    assert titles() == ["loss", "accuracy", "lr"]
    assert [
        c.get_attribute("data-metric") for c in pw.locator(within(".jt-metric-chip")).all()
    ] == ["loss", "accuracy", "lr"]
    # each figure of a chart's header says which rank it is of
    assert re.fullmatch(
        r"ranks 0, 1 · last \S+ · min \S+ \(rank [01]\) · max \S+ \(rank [01]\)",
        " ".join(page.text(within(".jt-chart-stats")).split()),
    )
    # a text metric is not charted: its last value per rank is listed
    pw.wait_for_selector(within("[data-testid=jt-text-metrics] tr[data-metric=phase]"))
    texts = page.text(within("[data-testid=jt-text-metrics]"))
    assert re.search(r"phase \(text, not charted\)\s*rank 0 train\s*rank 1 train", texts), texts
    count = lambda: int(page.attr(within("[data-testid=jt-chart]"), "data-count") or 0)
    before = count()
    ink = page.canvas_ink(root)
    assert len(ink) == 3 and all(n > 500 for n in ink), f"a chart canvas is blank: {ink}"
    wait_for(lambda: count() > before + 20, 60, what="the chart to grow")
    shot("03-charts-growing")
    # hovering a chart reads out its values beside the cursor, inside the chart
    chart = pw.locator(within("[data-testid=jt-chart]")).first
    box = chart.bounding_box()
    pw.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] * 0.5)
    tip = pw.locator(within(".jt-chart-tip")).first
    tip.wait_for(state="visible")
    assert re.search(r"step \d+.*rank 0: \S+.*rank 1: \S+", " ".join(tip.inner_text().split())), (
        tip.inner_text()
    )
    card = pw.locator(within(".jt-chart-card")).first.bounding_box()
    where = tip.bounding_box()
    assert card["y"] <= where["y"] <= box["y"] + box["height"] / 2, (card, where)
    assert card["x"] <= where["x"] and where["x"] + where["width"] <= card["x"] + card["width"], (
        card,
        where,
    )
    pw.mouse.move(0, 0)

    # charts against wall time, of the mean across ranks; metrics can be hidden and shown
    pw.click(within("[data-testid=jt-opt-x] button[data-value=time]"))
    pw.click(within("[data-testid=jt-opt-agg] button[data-value=mean]"))
    pw.wait_for_function(
        """root => {
        const cs = [...document.querySelectorAll(root + ' [data-testid=jt-chart]')];
        return cs.length === 3 && cs.every(c => c.dataset.x === 'time' && c.dataset.series === '1'); }""",
        arg=root,
    )
    assert pw.locator(within(".jt-legend-item:has-text('mean of 2 ranks')")).count() == 3
    # A click on a chip's figure whose press and release straddle an update (a person's
    # click takes as long as one; so does Playwright's on a loaded machine) still counts:
    # Chromium fires no click once the element pressed on has left the page.
    lr_chip = within(".jt-metric-chip[data-metric=lr]")
    figure = pw.locator(within(".jt-metric-chip[data-metric=lr] b")).bounding_box()
    pw.mouse.move(figure["x"] + figure["width"] / 2, figure["y"] + figure["height"] / 2)
    pw.mouse.down()
    pressed = page.text(lr_chip)
    wait_for(lambda: page.text(lr_chip) != pressed, 20, what="lr's chip to change while pressed")
    pw.mouse.up()
    wait_for(lambda: titles() == ["loss", "accuracy"], 20, what="lr's chart to be hidden")
    shot("03b-wall-time-mean")
    # a log y axis labels its ticks, even over less than a decade (accuracy, so far)
    pw.click(within("[data-testid=jt-opt-y] button[data-value=log]"))
    ticks = wait_for(
        lambda: [
            c.get_attribute("data-y-ticks") or ""
            for c in pw.locator(within("[data-testid=jt-chart]")).all()
        ],
        10,
        what="log axes",
    )
    assert len(ticks) == 2 and all(len(t.split()) >= 2 for t in ticks), ticks
    pw.click(within("[data-testid=jt-opt-y] button[data-value=linear]"))
    pw.click(within(".jt-metric-chip[data-metric=lr]"))
    wait_for(lambda: len(titles()) == 3, 60, what="lr's chart back")
    # two quick clicks, before the feeder has answered the first, leave the chart as it was
    pw.click(within(".jt-metric-chip[data-metric=lr]"))
    pw.click(within(".jt-metric-chip[data-metric=lr]"))
    for _ in range(2):  # two chart updates from the feeder after both clicks
        seen = count()
        wait_for(lambda: count() > seen, 60, what="the charts to be updated")
    # An update built before the server had the second click may still show the first;
    # the ones after it must show the chart again (a lost click would never).
    wait_for(
        lambda: titles() == ["loss", "accuracy", "lr"],
        30,
        what="lr's chart, kept after two quick clicks",
    )
    assert "jt-on" in (page.attr(within(".jt-metric-chip[data-metric=lr]"), "class") or "")

    # log lines appear, in colour, and can be searched and picked by rank
    lines = lambda: pw.locator(within("[data-testid=jt-log-line]"))
    wait_for(lambda: lines().count() > 10, 60, what="log lines")
    assert pw.locator(within("[data-testid=jt-log-line] .jt-fg-2")).count() > 0  # green INFO
    pw.fill(within("[data-testid=jt-log-search]"), "warn")
    wait_for(
        lambda: "of" in page.text(within("[data-testid=jt-log-count]")), 60, what="search results"
    )
    # read at once: lines keep arriving from the live run between two separate reads
    shown = pw.evaluate(
        """sel => [...document.querySelectorAll(sel)].map(
            l => [l.innerText, l.querySelectorAll('mark.jt-match').length])""",
        within("[data-testid=jt-log-line]"),
    )
    assert shown and all("WARN" in line and marks >= 1 for line, marks in shown), shown
    pw.select_option(within("[data-testid=jt-log-rank]"), "1")
    wait_for(
        lambda: all(line.startswith("WARN rank 1") for line in lines().all_inner_texts() or ["x"]),
        20,
        what="rank 1's lines only",
    )
    shot("04-logs-search")
    pw.fill(within("[data-testid=jt-log-search]"), "")
    pw.select_option(within("[data-testid=jt-log-rank]"), "all")

    # Cancel asks first, naming the run; Escape (or Keep running) leaves it running
    assert not run.done
    pw.click(within("[data-testid=jt-cancel]"))
    question = within("[data-testid=jt-confirm-cancel]")
    pw.wait_for_selector(question)
    said = " ".join(page.text(question).split())
    assert said.startswith(f"Cancel run {run.spec.name} ({run.id})?"), said
    assert pw.evaluate("document.activeElement.dataset.testid") == "jt-confirm-keep"
    shot("04b-cancel-asked")
    pw.keyboard.press("Escape")
    pw.wait_for_selector(question, state="hidden")
    assert pw.evaluate("document.activeElement.dataset.testid") == "jt-cancel"
    pw.click(within("[data-testid=jt-cancel]"))
    pw.click(within("[data-testid=jt-confirm-keep]"))
    pw.wait_for_selector(question, state="hidden")
    pw.wait_for_timeout(1500)
    assert not run.done, run.status
    assert run.store.cancel_request(run.id) is None, run.store.cancel_request(run.id)
    assert pw.locator(within("[data-testid=jt-status]")).first.text_content() == "running"
    # confirmed, Cancel ends the run, with no process left; the finished view keeps no Cancel
    confirm_cancel(pw, root)
    wait_for(lambda: run.status == "canceled", 20, what="the run to be canceled")
    wait_for(lambda: leftover(run.id) == [], 10, what="every process of the run to end")
    pw.wait_for_selector(within("[data-testid=jt-status]:text-is('canceled')"))
    assert "Canceled" in page.text(within("[data-testid=jt-banner]"))
    assert pw.locator(within("[data-testid=jt-cancel]")).is_hidden()
    pw.wait_for_selector(within("[data-testid=jt-stages] .jt-stage-end:has-text('canceled')"))
    pw.wait_for_selector(within("[data-testid=jt-outputs]"))
    shot("05-canceled")


def confirm_cancel(pw, root: str = "", button: str = "jt-cancel") -> None:
    """Cancel in the view under ``root`` (``button``: jt-cancel, jt-sweep-cancel), and the
    question it asks answered yes."""
    pw.click(under(root, f"[data-testid={button}]") if root else f"[data-testid={button}]")
    yes = "[data-testid=jt-confirm-cancel] [data-testid=jt-confirm-yes]"
    pw.click(under(root, yes) if root else yes)


def luminance(css: str) -> float:
    """Of a computed colour: ``rgb(r, g, b)``, or ``color(srgb r g b)`` (what color-mix gives)."""
    numbers = [float(v) for v in re.findall(r"[\d.]+", css)[:3]]
    r, g, b = (v * 255 for v in numbers) if css.startswith("color(srgb") else numbers
    return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255


def assert_readable(pw, selector: str) -> None:
    """The text of ``selector`` stands out from its own background."""
    back, fore = pw.eval_on_selector(
        selector, "el => [getComputedStyle(el).backgroundColor, getComputedStyle(el).color]"
    )
    assert abs(luminance(back) - luminance(fore)) > 0.45, (selector, back, fore)


def open_panel(page, lab, url: str = "") -> None:
    """JupyterLab (at ``url``, default the launcher) with the Training Runs panel shown."""
    pw = page.page
    pw.goto(url or f"{lab.url}/lab?token={lab.token}&reset")
    pw.wait_for_selector(
        "#jupyter-trainer-runs, [data-id='jupyter-trainer-runs']",
        state="attached",
        timeout=TIMEOUT_MS,
    )
    page.dismiss_popups()
    pw.click(".lm-TabBar-tab[data-id='jupyter-trainer-runs']")
