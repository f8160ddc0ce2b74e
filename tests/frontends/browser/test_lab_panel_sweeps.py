"""Sweeps in the Training Runs panel, in a real JupyterLab and headless Chromium.

A sweep is one row (status, trials ended of the total, best objective) that expands to its
trials, each a sub-row with its params, status and objective, live while the sweep runs;
its trials are not listed as runs of their own, and a click on one opens its run's view as
a click on a run does. A running sweep can be canceled from its row.
"""

from __future__ import annotations

import math

from conftest import leftover, wait_for
from support.browser_page import TIMEOUT_MS, browser  # noqa: F401 (the fixture)
from support.browser_views import open_panel

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api

# Trials 0 and 1 learn, alike up to step 2 and then as their params say; later ones do
# not, and the median policy, judging at step 2 only, prunes them there (each starts once
# an earlier trial has completed).
TRAIN = """
import re, time
from jupyter_trainer import runtime as jt
lr, hidden = jt.params["lr"], jt.params["hidden"]
number = int(re.search(r"-t(\\d+)-", jt.run_id).group(1))
steps = int(jt.params.get("steps", 10))
for step in range(steps):
    if number < 2:
        val_acc = 0.5 * (step + 1) / steps + (lr + hidden / 1000) * max(0, step - 2) / steps
    else:
        val_acc = 0.05 * (step + 1) / steps
    jt.log(step=step, val_acc=val_acc)
    time.sleep(float(jt.params.get("pause", 0.3)))
"""
SPACE = {"lr": "loguniform(1e-3,1e-1)", "hidden": "choice(32,64,128)"}


def start_sweep(tmp_path, **options) -> jt.Sweep:
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    space = {**SPACE, **options.pop("space", {})}
    return jt.sweep(
        script=str(script),
        space=space,
        metric="val_acc",
        trials=4,
        parallel=2,
        launcher="python",
        **options,
    )


def row_of(sweep_id: str) -> str:
    return f"[data-testid=jt-sweeps-row][data-sweep='{sweep_id}']"


def panel_trials(pw, row: str) -> list[dict]:
    return pw.eval_on_selector_all(
        f"{row} [data-testid=jt-sweeps-trial]",
        """ts => ts.map(t => ({
        number: +t.dataset.number, run: t.dataset.run || null, status: t.dataset.status,
        objective: t.dataset.objective === undefined ? null : +t.dataset.objective,
        shown: t.querySelector('[data-testid=jt-sweeps-objective]').textContent,
        badge: t.querySelector('[data-testid=jt-sweeps-trial-status]').textContent,
        params: t.querySelector('[data-testid=jt-sweeps-params]').textContent}))""",
    )


def test_a_sweep_is_one_row_that_expands_to_its_trials(browser, home, tmp_path):
    lab, page = browser
    plain = api.submit("print('alone')", launcher="python", name="alone", wait=True)
    pw = page.page
    open_panel(page, lab)
    pw.wait_for_selector(f"[data-testid=jt-runs-row][data-run='{plain.id}']")

    sweep = start_sweep(tmp_path, prune="median:1", prune_after=2, prune_every=100)
    row = row_of(sweep.id)
    pw.wait_for_selector(row)
    pw.click(f"{row} [data-testid=jt-sweeps-toggle]")
    assert pw.get_attribute(f"{row} [data-testid=jt-sweeps-toggle]", "aria-expanded") == "true"
    # live: a trial is seen running, then the sweep's row and its trials catch up with it
    running = f"{row} [data-testid=jt-sweeps-trial][data-status=running]"
    number = pw.get_attribute(running, "data-number")
    page.shot("panel-sweep-running", "#jupyter-trainer-runs")
    pw.wait_for_selector(
        f"{row}[data-status=completed] [data-testid=jt-sweeps-trials]"
        "[data-done='4'][data-total='4']",
        timeout=TIMEOUT_MS,
    )
    assert sweep.status == "completed"
    state = sweep.state
    pw.wait_for_function(
        "([row, n]) => document.querySelectorAll(row + ' [data-testid=jt-sweeps-trial]').length === n"
        " && ![...document.querySelectorAll(row + ' [data-testid=jt-sweeps-trial]')]"
        ".some(t => ['running', 'starting'].includes(t.dataset.status))",
        arg=[row, 4],
    )
    assert pw.get_attribute(
        f"{row} [data-testid=jt-sweeps-trial][data-number='{number}']", "data-status"
    ) in ("completed", "pruned")
    head = pw.inner_text(f"{row} [data-testid=jt-sweeps-trials]")
    assert head.startswith("4/4 trials") and "2 pruned" in head, head
    assert pw.text_content(f"{row} [data-testid=jt-sweeps-status-badge]") == "completed"

    # each trial as the state has it: number, run, status, objective and params
    trials = panel_trials(pw, row)
    assert [(t["number"], t["run"], t["status"], t["badge"]) for t in trials] == [
        (t["number"], t["run"], t["status"], t["status"]) for t in state["trials"]
    ]
    assert [t["status"] for t in trials] == ["completed", "completed", "pruned", "pruned"]
    for shown, recorded in zip(trials, state["trials"]):
        assert shown["objective"] == recorded["objective"]
        if recorded["objective"] is None:  # pruned: the last value it reported, marked
            value, kind = shown["shown"].split()
            assert kind == "last" and math.isclose(float(value), recorded["last"], rel_tol=1e-4)
        else:
            assert math.isclose(float(shown["shown"]), recorded["objective"], rel_tol=1e-4)
        assert f"hidden={recorded['params']['hidden']}" in shown["params"]
        assert math.isclose(
            float(shown["params"].split("lr=")[1]), recorded["params"]["lr"], rel_tol=1e-4
        )
    best = f"{row} [data-testid=jt-sweeps-best]"
    assert float(pw.get_attribute(best, "data-objective")) == state["best"]["objective"]
    assert pw.get_attribute(best, "data-run") == state["best"]["run"]
    assert "best val_acc" in pw.inner_text(
        best
    ) and f"(#{state['best']['number']})" in pw.inner_text(best)
    assert "jt-sweeps-best-trial" in pw.get_attribute(
        f"{row} [data-testid=jt-sweeps-trial][data-number='{state['best']['number']}']", "class"
    )
    pruned = f"{row} [data-testid=jt-sweeps-trial][data-status=pruned]"
    assert "median" in pw.get_attribute(pruned, "title")
    badges = {
        s: pw.eval_on_selector(
            f"{row} [data-testid=jt-sweeps-trial][data-status={s}] .jt-badge",
            "el => getComputedStyle(el).backgroundColor",
        )
        for s in ("completed", "pruned")
    }
    assert badges["completed"] != badges["pruned"], badges

    # the trials are not runs of their own in the list
    runs = pw.eval_on_selector_all("[data-testid=jt-runs-row]", "rs => rs.map(r => r.dataset.run)")
    assert runs == [plain.id]
    shot = page.shot("panel-sweep", "#jupyter-trainer-runs")
    assert shot.exists()

    # the list's filters apply to sweeps too
    pw.select_option("[data-testid=jt-runs-status]", "running")
    pw.wait_for_selector(row, state="detached")
    pw.select_option("[data-testid=jt-runs-status]", "completed")
    pw.wait_for_selector(row)
    pw.fill("[data-testid=jt-runs-name]", "no-such-name")
    pw.wait_for_selector(row, state="detached")
    pw.fill("[data-testid=jt-runs-name]", "")
    pw.select_option("[data-testid=jt-runs-status]", "")
    pw.wait_for_selector(f"{row} [data-testid=jt-sweeps-trial]")  # still expanded

    # a click on a trial opens its run's view, as a click on a run does
    best_run = state["best"]["run"]
    pw.click(f"{row} [data-testid=jt-sweeps-trial][data-run='{best_run}']")
    view = f"#jt-run-{best_run} [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('completed')")
    assert page.text(f"{view} [data-testid=jt-run-id]") == best_run
    # and the toggle folds the trials away
    pw.click(f"{row} [data-testid=jt-sweeps-toggle]")
    pw.wait_for_selector(f"{row} [data-testid=jt-sweeps-trial]", state="detached")
    assert pw.get_attribute(row, "aria-expanded") == "false"
    for trial in state["trials"]:
        assert leftover(trial["run"]) == []


def test_a_running_sweep_is_canceled_from_its_row(browser, home, tmp_path):
    lab, page = browser
    sweep = start_sweep(tmp_path, space={"steps": 400, "pause": 0.1})
    wait_for(
        lambda: sweep.state.get("counts", {}).get("running", 0) == 2, 120, what="two trials running"
    )
    pw = page.page
    open_panel(page, lab)
    row = row_of(sweep.id)
    pw.click(f"{row} [data-testid=jt-sweeps-toggle]")
    pw.wait_for_selector(f"{row} [data-testid=jt-sweeps-trial][data-status=running] >> nth=1")
    assert (
        pw.inner_text(f"{row} [data-testid=jt-sweeps-best]")
        == "maximize val_acc: no trial completed yet"
    )
    runs = sweep.trials()

    pw.click(f"{row} [data-testid=jt-sweeps-cancel]")
    pw.click(".jp-Dialog .jp-Dialog-button.jp-mod-warn")
    pw.wait_for_selector(f"{row}[data-status=canceled]", timeout=TIMEOUT_MS)
    pw.wait_for_function(
        "row => [...document.querySelectorAll(row + ' [data-testid=jt-sweeps-trial]')]"
        ".map(t => t.dataset.status).join() === 'canceled,canceled'",
        arg=row,
    )
    pw.wait_for_selector(f"{row} [data-testid=jt-sweeps-cancel]", state="detached")
    page.shot("panel-sweep-canceled", "#jupyter-trainer-runs")
    assert sweep.status == "canceled"
    for run in runs:
        assert run.status == "canceled" and leftover(run.id) == []


def test_a_sweep_shows_its_name_opens_its_own_view_and_attaches(browser, home, tmp_path):
    lab, page = browser
    name = "lr-and-hidden-search"
    sweep = start_sweep(tmp_path, name=name)
    sweep.wait(timeout=180)
    lab.write_notebook("sweep-attach.ipynb", ["%load_ext jupyter_trainer"])
    open_panel(page, lab, lab.notebook_url("sweep-attach.ipynb"))
    pw = page.page
    page.wait_idle()  # the notebook is open: it takes the focus no more
    row = row_of(sweep.id)
    # the whole name, at the panel's default width
    shown = f"{row} .jt-runs-name"
    pw.wait_for_selector(shown)
    assert pw.inner_text(shown) == name
    assert pw.eval_on_selector(
        shown, "el => el.scrollWidth <= el.clientWidth + 1 && el.getBoundingClientRect().width > 0"
    ), "the name is cut"
    page.shot("panel-sweep-name", "#jupyter-trainer-runs")

    # its own view: the trials table, best so far and parallel coordinates, from the server
    pw.click(f"{row} [data-testid=jt-sweeps-open]")
    view = f"#jt-sweep-{sweep.id} [data-testid=jt-sweep]"
    pw.wait_for_selector(f"{view} [data-testid=jt-sweep-status]:text-is('completed')")
    state = sweep.state
    assert page.text(f"{view} [data-testid=jt-sweep-id]") == sweep.id
    assert pw.locator(f"{view} [data-testid=jt-sweep-trial]").count() == len(state["trials"])
    assert pw.get_attribute(f"{view} [data-testid=jt-sweep-best-canvas]", "data-points") == str(
        state["counts"]["completed"]
    )
    pw.wait_for_function(
        "sel => document.querySelectorAll(sel).length === 4",
        arg=f"{view} [data-testid=jt-sweep-parallel] path.jt-pc-line",
    )
    assert (
        float(pw.get_attribute(f"{view} .jt-sweep-best-value", "data-value"))
        == state["best"]["objective"]
    )
    assert pw.locator(f"{view} [data-testid=jt-sweep-cancel]").is_hidden()
    page.shot("lab-sweep-view", f"#jt-sweep-{sweep.id}")
    # a trial opens its run's view
    best = state["best"]
    pw.click(f"{view} [data-testid=jt-sweep-trial][data-number='{best['number']}']")
    run_view = f"#jt-run-{best['run']} [data-testid=jt-monitor]"
    pw.wait_for_selector(f"{run_view} [data-testid=jt-status]:text-is('completed')")

    # "Attach in notebook" inserts and runs a cell that shows the sweep's widget
    pw.click(".lm-TabBar-tab:has-text('sweep-attach.ipynb')")
    pw.click(".jp-Notebook .jp-Cell >> nth=0")
    pw.click(f"{row} [data-testid=jt-sweeps-attach]")
    cell = pw.locator(".jp-Notebook .jp-Cell >> nth=1")
    cell.wait_for()
    assert f'get_sweep("{sweep.id}").monitor()' in cell.locator(".jp-InputArea-editor").inner_text()
    pw.wait_for_selector(f".jp-Cell >> nth=1 >> [data-testid=jt-sweep-id]:text-is('{sweep.id}')")
    pw.wait_for_selector(".jp-Cell >> nth=1 >> [data-testid=jt-sweep-status]:text-is('completed')")
    assert not pw.locator(".jp-Dialog").count()
    for trial in state["trials"]:
        assert leftover(trial["run"]) == []
