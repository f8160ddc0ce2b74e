"""The live sweep monitor in a real JupyterLab, driven by headless Chromium (Playwright).

The notebook's ``%%train --sweep`` cell blocks while the sweep runs, as it does for a
person; a click on a trial and Cancel must still reach the kernel. Screenshots are saved
under ``$JT_ARTIFACTS`` like test_browser.py's.
"""

from __future__ import annotations

from conftest import leftover, wait_for
from support.browser_page import browser  # noqa: F401 (the fixture)
from support.browser_views import confirm_cancel

import jupyter_trainer as jt
from jupyter_trainer.rankside.host import procs

SWEEP = "[data-testid=jt-sweep]"
SWEEP_CELL = """%%train --launcher python --name {name} --sweep lr=loguniform(1e-3,1e-1) --sweep hidden=choice(32,64,128) --trials {trials} --parallel 2 --metric val_acc --sampler random --seed 7
import time
from jupyter_trainer import runtime as jt
for step in range({steps}):
    jt.log(step=step, val_acc=min(0.99, (step + 1) / {steps} * (0.4 + 4 * lr) + hidden / 1000), loss=1 / (step + 1))
    jt.progress(step + 1, {steps})
    time.sleep(0.1)
"""


def within(selector: str) -> str:
    return ", ".join(f"{SWEEP} {part.strip()}" for part in selector.split(","))


def open_sweep(lab, page, name: str, trials: int, steps: int) -> jt.Sweep:
    lab.write_notebook(
        f"{name}.ipynb",
        [
            "%load_ext jupyter_trainer",
            "lr = 0.01\nhidden = 64",
            SWEEP_CELL.format(name=name, trials=trials, steps=steps),
        ],
    )
    page.open(f"{name}.ipynb")
    page.run_all()
    page.page.wait_for_selector(within("[data-testid=jt-sweep-id]:not(:empty)"))
    return jt.get_sweep(page.text(within("[data-testid=jt-sweep-id]")))


def cell_busy(page) -> bool:
    return page.page.locator(".jp-InputArea-prompt:has-text('[*]')").count() > 0


def parallel_lines(page) -> list[dict]:
    return page.page.eval_on_selector_all(
        within("[data-testid=jt-sweep-parallel] path.jt-pc-line"),
        "ps => ps.map(p => ({n: +p.dataset.number, s: p.dataset.status, d: p.getAttribute('d')}))",
    )


def best_chart_ink(page) -> int:
    return page.page.eval_on_selector(
        within("[data-testid=jt-sweep-best-canvas]"),
        """c => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n; }""",
    )


def test_the_sweep_widget_follows_the_sweep_and_opens_a_trial(browser, home):
    lab, page = browser
    pw = page.page
    sweep = open_sweep(lab, page, "sweep-live", trials=4, steps=40)
    spec = sweep.sweeps.read_spec(sweep.id)
    assert page.text(within("[data-testid=jt-sweep-name]")) == "sweep sweep-live"
    meta = page.text(within("[data-testid=jt-sweep-meta]"))
    assert "maximize val_acc" in meta and "sampler random" in meta and "2 in parallel" in meta
    assert spec["space"]["lr"] in meta

    # live: trials run two at a time while the cell is busy
    pw.wait_for_selector(within("[data-testid=jt-sweep-status]:text-is('running')"))
    pw.wait_for_selector(within("[data-testid=jt-sweep-trial][data-status=running]"))
    page.shot("sweep-01-running", SWEEP)
    assert cell_busy(page)
    running = pw.locator(within("[data-testid=jt-sweep-trial][data-status=running]")).count()
    assert 1 <= running <= 2
    # a click on a running trial opens its run monitor below the table, though the cell is busy
    row = pw.locator(within("[data-testid=jt-sweep-trial][data-status=running]")).first
    number = int(row.get_attribute("data-number"))
    run_id = row.get_attribute("data-run")
    assert run_id == next(t["run"] for t in sweep.state["trials"] if t["number"] == number)
    row.click()
    monitor = ".jt-sweep-monitor [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{monitor} [data-testid=jt-run-id]:text-is('{run_id}')")
    assert not sweep.done and cell_busy(page), "the click was answered only after the sweep"
    assert (
        pw.locator(
            within(f"[data-testid=jt-sweep-trial][data-number='{number}'][aria-selected=true]")
        ).count()
        == 1
    )
    assert pw.locator(monitor).count() == 1
    # the run monitor follows the trial: its params are the trial's
    params = " ".join(page.text(f"{monitor} [data-testid=jt-params]").split())
    trial = next(t for t in sweep.state["trials"] if t["number"] == number)
    assert f"hidden {trial['params']['hidden']}" in params
    # as the user would write them (12 significant digits, no float noise), and one process
    # of the python launcher names no backend, as it joins no process group
    lr = trial["params"]["lr"]
    assert f"lr {float(f'{lr:.12g}')!r}" in params, (params, lr)
    assert "backend" not in page.text(f"{monitor} [data-testid=jt-meta]")

    # the table reaches 4 finished trials; the header, best and charts show the final state
    pw.wait_for_selector(
        within("[data-testid=jt-sweep-status]:text-is('completed')"), timeout=120_000
    )
    state = sweep.state
    assert state["status"] == "completed" and state["counts"] == {"completed": 4}
    rows = pw.locator(within("[data-testid=jt-sweep-trial]"))
    assert rows.count() == 4
    assert [r.get_attribute("data-status") for r in rows.all()] == ["completed"] * 4
    # the trial the monitor shows printed nothing: now that it has ended its log says so
    pw.wait_for_selector(f"{monitor} [data-testid=jt-status]:text-is('completed')")
    assert page.text(f"{monitor} [data-testid=jt-log-body]") == "no output"
    assert page.text(within("[data-testid=jt-sweep-started]")) == "4 of 4 trials started"
    assert page.text(within("[data-testid=jt-sweep-counts]")) == "4 completed"
    assert pw.locator(within("[data-testid=jt-sweep-cancel]")).is_hidden()
    best = state["best"]
    shown = pw.get_attribute(
        within("[data-testid=jt-sweep-best] .jt-sweep-best-value"), "data-value"
    )
    assert float(shown) == best["objective"]
    said = " ".join(page.text(within("[data-testid=jt-sweep-best]")).split())
    assert said.startswith(f"★ best #{best['number']} val_acc ")
    assert f"hidden {best['params']['hidden']}" in said
    best_row = within(f"[data-testid=jt-sweep-trial][data-number='{best['number']}']")
    assert "★" in page.text(f"{best_row} .jt-sweep-objective")
    cells = [c.strip() for c in pw.locator(f"{best_row} td").all_inner_texts()]
    keys = list(spec["space"])  # columns: #, params..., status, objective, step, time, note
    assert cells[0] == str(best["number"]) and cells[1 + len(keys)].lower() == "completed"
    assert cells[1 + keys.index("hidden")] == str(best["params"]["hidden"])
    assert cells[2 + len(keys) + 1] == "39"  # the last step
    minutes, seconds = cells[2 + len(keys) + 2].split(":")  # it slept 40 × 0.1 s
    assert 4 <= int(minutes) * 60 + int(seconds) < 60, cells
    # both charts are drawn: the best-so-far line over 4 trials, a parallel line per trial
    canvas = within("[data-testid=jt-sweep-best-canvas]")
    assert pw.get_attribute(canvas, "data-points") == "4"
    assert float(pw.get_attribute(canvas, "data-best")) == best["objective"]
    assert best_chart_ink(page) > 500
    lines = parallel_lines(page)
    assert sorted(ln["n"] for ln in lines) == [0, 1, 2, 3]
    assert all(ln["s"] == "completed" and ln["d"].count("L") == len(keys) for ln in lines), lines
    axes = pw.eval_on_selector_all(
        within("[data-testid=jt-sweep-parallel] .jt-pc-axis"), "gs => gs.map(g => g.dataset.axis)"
    )
    assert axes == [*keys, "val_acc"]
    assert pw.locator(within("[data-testid=jt-sweep-parallel] path.jt-pc-best")).get_attribute(
        "data-number"
    ) == str(best["number"])
    # hovering a line names its trial
    point = pw.eval_on_selector(
        within(f"[data-testid=jt-sweep-parallel] path.jt-pc-hit[data-number='{best['number']}']"),
        """p => {
        const at = p.getPointAtLength(p.getTotalLength() * 0.3), m = p.getScreenCTM();
        return [at.x * m.a + at.y * m.c + m.e, at.x * m.b + at.y * m.d + m.f]; }""",
    )
    pw.mouse.move(*point)
    tip = pw.locator(within("[data-testid=jt-sweep-parallel] .jt-chart-tip"))
    tip.wait_for(state="visible")
    assert tip.inner_text().startswith(f"trial #{best['number']} · completed · val_acc")
    pw.mouse.move(0, 0)
    page.shot("sweep-02-completed", ".jt-sweep-monitor")

    # a click on another trial replaces the run monitor (the cell has ended: no subshell needed)
    pw.wait_for_selector(".jp-InputArea-prompt:has-text('[3]')")
    other = next(t for t in state["trials"] if t["number"] != number)
    pw.click(within(f"[data-testid=jt-sweep-trial][data-number='{other['number']}']"))
    pw.wait_for_selector(f"{monitor} [data-testid=jt-run-id]:text-is('{other['run']}')")
    pw.wait_for_selector(f"{monitor} [data-testid=jt-status]:text-is('completed')")
    assert pw.locator(monitor).count() == 1
    # its row again closes it
    pw.click(within(f"[data-testid=jt-sweep-trial][data-number='{other['number']}']"))
    pw.wait_for_selector(monitor, state="detached")
    for t in state["trials"]:
        assert leftover(t["run"]) == []


def test_cancel_in_the_sweep_widget_ends_a_running_sweep(browser, home):
    lab, page = browser
    pw = page.page
    sweep = open_sweep(lab, page, "sweep-cancel", trials=12, steps=400)
    pw.wait_for_function(
        """sel => document.querySelectorAll(sel).length === 2""",
        arg=within("[data-testid=jt-sweep-trial][data-status=running]"),
    )
    driver = sweep.state["driver"]
    wait_for(
        lambda: all(t.get("last") is not None for t in sweep.state["trials"]),
        60,
        what="each running trial to have logged val_acc",
    )
    assert cell_busy(page)
    confirm_cancel(pw, SWEEP, "jt-sweep-cancel")
    wait_for(lambda: sweep.status == "canceled", 60, what="the sweep to be canceled")
    pw.wait_for_selector(within("[data-testid=jt-sweep-status]:text-is('canceled')"))
    assert "Canceled: canceled from the notebook (Cancel button)" in page.text(
        within("[data-testid=jt-sweep-banner]")
    )
    assert pw.locator(within("[data-testid=jt-sweep-cancel]")).is_hidden()
    statuses = [
        r.get_attribute("data-status")
        for r in pw.locator(within("[data-testid=jt-sweep-trial]")).all()
    ]
    assert statuses == ["canceled", "canceled"]
    # each canceled trial shows the last val_acc it logged, marked as no objective
    state = sweep.state
    shown = pw.eval_on_selector_all(
        within("[data-testid=jt-sweep-trial] .jt-sweep-reported"),
        "els => els.map(e => [+e.dataset.reported, e.textContent, e.title])",
    )
    assert [value for value, _, _ in shown] == [t["last"] for t in state["trials"]], (shown, state)
    assert all(text.endswith(" last") and "not an objective" in title for _, text, title in shown)
    # best so far counts completed trials only, and says so instead of waiting for one
    no_best = page.text(within("[data-testid=jt-sweep-no-best]"))
    assert no_best.startswith(
        "no trial completed (2 canceled): best so far counts completed trials only"
    ), no_best
    assert "waiting" not in page.text(within("[data-testid=jt-sweep-best-chart]"))
    assert "best so far counts completed trials only" in page.text(
        within("[data-testid=jt-sweep-best-chart]")
    )
    # parallel coordinates draw both trials, to the values they reported (hollow marks)
    lines = parallel_lines(page)
    assert sorted(ln["n"] for ln in lines) == [0, 1] and all(
        ln["d"].count("L") == 2 for ln in lines
    ), lines
    assert pw.locator(within("[data-testid=jt-sweep-parallel] circle.jt-pc-reported")).count() == 2
    page.shot("sweep-03-canceled", SWEEP)
    for trial in sweep.state["trials"]:
        wait_for(lambda: leftover(trial["run"]) == [], 15, what=f"run {trial['run']} to end")
    wait_for(
        lambda: not procs.is_alive(driver["pid"], driver.get("start_ticks")),
        15,
        what="the sweep's driver to exit",
    )
    pw.wait_for_selector(".jp-InputArea-prompt:has-text('[3]')")  # the cell ended with it
