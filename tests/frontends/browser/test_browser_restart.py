"""A kernel restart or shutdown from the front end never ends the run a cell waits for, and
the output the cell left behind stays truthful.

JupyterLab asks jupyter_server to restart or shut the kernel down, and jupyter_client
interrupts the kernel first, as the Stop button does; the waiting %%train cell must tell
the two apart. The run trains on, and a cell run afterwards attaches to it and sees it
complete. The old widget says within 2 s that its kernel is gone, and after a reload the
output shows the run from the server, in JupyterLab and in Notebook 7.
"""

from __future__ import annotations

import pytest
from conftest import leftover, wait_for
from support.browser_page import TIMEOUT_MS, Page, any_front_end, browser  # noqa: F401 (the fixtures)
from support.browser_views import confirm_cancel

import jupyter_trainer
from jupyter_trainer import api

WAITING_CELL = """%%train --procs 2 --name waiting
import time
from jupyter_trainer import runtime as jt
for step in range(150):
    jt.log(step=step, x=step)
    jt.progress(step + 1, 150)
    time.sleep(0.1)
"""
ATTACH_CELL = """%load_ext jupyter_trainer
import jupyter_trainer as jt
jt.runs()[0].monitor()"""


def last_step(run: api.Run) -> int:
    events, _ = run.store.read_events(run.id, 0)
    return max((e["step"] for e in events if e.get("step") is not None), default=-1)


@pytest.mark.parametrize(
    "command", ["kernelmenu:restart", "kernelmenu:shutdown"], ids=["restart", "shutdown"]
)
def test_the_kernel_menu_never_ends_the_run_a_cell_waits_for(browser, home, command):
    lab, page = browser
    pw = page.page
    lab.write_notebook("waiting.ipynb", ["%load_ext jupyter_trainer", WAITING_CELL, ATTACH_CELL])
    page.open("waiting.ipynb")
    page.run_all()
    run = wait_for(lambda: jupyter_trainer.runs(home=home), 90, what="the run")[0]
    wait_for(lambda: last_step(run) >= 5, 90, what="rank 0 at step 5")
    pw.click(".lm-MenuBar-item:has-text('Kernel')")
    pw.click(f".lm-Menu-item[data-command='{command}']")
    page.answer_dialogs()
    pw.wait_for_timeout(4000)  # twice what the cell waits for a shutdown after an interrupt
    at = last_step(run)
    wait_for(lambda: last_step(run) > at + 5, 30, what="steps after the kernel's end")
    assert run.status == "running" and run.store.cancel_request(run.id) is None
    # A cell run now (in the restarted kernel, or a new one after a shutdown) attaches to it.
    pw.locator(".jp-Notebook .jp-Cell").nth(2).locator(".jp-InputArea-editor").click()
    pw.keyboard.press("Shift+Enter")
    page.answer_dialogs()  # after a shutdown: start the notebook's kernel again
    attached = pw.locator(".jp-Notebook .jp-Cell").nth(2)
    attached.locator("[data-testid=jt-status]:text-is('completed')").wait_for(timeout=120_000)
    assert attached.locator("[data-testid=jt-run-id]").inner_text() == run.id
    assert run.status == "completed" and last_step(run) == 149
    assert leftover(run.id) == []
    page.shot(f"15-{command.split(':')[1]}-while-waiting")


LONG_CELL = """%%train --no-wait --name long
import time
from jupyter_trainer import runtime as jt
for step in range(3000):
    jt.progress(step + 1, 3000)
    print("long step", step, flush=True)
    time.sleep(0.05)
"""


def start_a_long_run(lab, page: Page, name: str):
    """A notebook whose %%train --no-wait cell is running; its run."""
    lab.write_notebook(name, ["%load_ext jupyter_trainer", LONG_CELL])
    page.open(name)
    page.run_all()
    page.page.wait_for_selector("[data-testid=jt-status]:text-is('running')")
    return api.get_run(page.text("[data-testid=jt-run-id]"))


# Every 50 ms from now on: the widget's status, elapsed clock and Cancel, with the time.
WATCH_WIDGET = """() => {
    window.__jtSeen = [];
    // when a dialog's accept button is clicked: the moment a person confirms a restart
    document.addEventListener('click', e => {
        if (e.target.closest('.jp-Dialog-button.jp-mod-accept')) window.__jtAccepted = performance.now();
    }, true);
    const q = s => document.querySelector(s);
    window.__jtWatch = setInterval(() => window.__jtSeen.push([performance.now(),
        q('[data-testid=jt-status]').textContent, q('[data-testid=jt-elapsed]').textContent,
        q('[data-testid=jt-cancel]').disabled]), 50);
}"""


def clock_seconds(text: str) -> int:
    """``1:02`` or ``1:02:03`` in seconds."""
    seconds = 0
    for part in text.split(":"):
        seconds = seconds * 60 + int(part)
    return seconds


def test_after_a_kernel_restart_the_old_widget_says_its_kernel_is_gone(browser, home):
    lab, page = browser
    run = start_a_long_run(lab, page, "restart.ipynb")
    pw = page.page
    wait_for(
        lambda: clock_seconds(page.text("[data-testid=jt-elapsed]")) >= 7,
        30,
        what="the clock past the feeder's first state refresh",
    )
    pw.evaluate(WATCH_WIDGET)
    pw.click(".lm-MenuBar-item:has-text('Kernel')")
    pw.click(".lm-Menu-item[data-command='kernelmenu:restart']")
    pw.wait_for_selector(".jp-Dialog")
    page.answer_dialogs()
    # the moment the restart was confirmed, in the page's clock: not before the dialog's
    # screenshot, whose time on a loaded machine is the test's, not the widget's
    restarted = pw.evaluate("window.__jtAccepted")
    assert isinstance(restarted, (int, float)), "no click on the restart dialog's accept was seen"
    # the run goes on without the kernel; its old widget no longer pretends to follow it
    pw.wait_for_selector("[data-testid=jt-status]:text-is('running?')", timeout=30_000)
    pw.wait_for_timeout(2500)
    seen = pw.evaluate("clearInterval(window.__jtWatch) || window.__jtSeen")
    gone = next(t for t, status, _, _ in seen if status == "running?")
    assert gone - restarted <= 2000, f"the widget noticed after {gone - restarted:.0f} ms"
    assert all(disabled for t, _, _, disabled in seen if t >= gone)
    clocks = [clock_seconds(clock) for _, _, clock, _ in seen]
    assert clocks == sorted(clocks), f"the clock went back: {clocks}"
    assert len({clock for t, _, clock, _ in seen if t >= gone + 100}) == 1, "the clock ran on"
    notice = page.text("[data-testid=jt-notice]")
    assert "kernel that showed this run is gone" in notice and f"%train attach {run.id}" in notice
    assert "ETA" not in page.text("[data-testid=jt-progress-text]")
    assert not page.errors, page.errors  # no "Cannot send" in the page
    page.shot("13-kernel-restarted")
    assert run.status == "running"
    run.cancel()
    assert leftover(run.id) == []


def widths(pw, view: str) -> dict:
    """The width of the output that holds ``view`` and of the view itself, in pixels."""
    return pw.eval_on_selector(
        view,
        """el => {
        const child = el.closest('.jp-OutputArea-child');
        const prompt = child.querySelector('.jp-OutputArea-prompt');
        return {area: child.getBoundingClientRect().width - (prompt ? prompt.getBoundingClientRect().width : 0),
                view: el.getBoundingClientRect().width}; }""",
    )


def test_after_a_restart_and_a_reload_the_output_shows_the_run_from_the_server(any_front_end, home):
    lab, page = any_front_end
    run = start_a_long_run(lab, page, "reloaded.ipynb")
    pw = page.page
    widget = widths(pw, "[data-testid=jt-monitor]")
    pw.keyboard.press("Control+s")
    pw.wait_for_selector(".jp-mod-dirty", state="detached")
    page.restart_kernel()
    page.wait_idle()
    pw.reload()
    # not "Error displaying widget: model not found": the run view, fed by the server
    view = "[data-testid=jt-monitor][data-source=server]"
    pw.wait_for_selector(f"{view} [data-testid=jt-status]:text-is('running')", timeout=TIMEOUT_MS)
    assert "model not found" not in pw.inner_text(".jp-OutputArea")
    assert page.text("[data-testid=jt-run-id]") == run.id
    # it fills the output area as the widget did, not the width of its text
    server = widths(pw, view)
    assert server["view"] >= server["area"] - 2 and server["view"] >= widget["view"] - 2, (
        server,
        widget,
    )
    progress = pw.eval_on_selector(
        f"{view} [data-testid=jt-progress-text]", "el => el.scrollWidth <= el.clientWidth"
    )
    assert progress, "the progress line is cut off"
    fraction = lambda: float(page.attr("[data-testid=jt-progress-fill]", "data-fraction") or 0)
    before = wait_for(fraction, 30, what="progress")
    wait_for(lambda: fraction() > before, 30, what="progress from the server")
    wait_for(
        lambda: page.page.locator("[data-testid=jt-log-line]:has-text('long step')").count() > 3,
        30,
        what="log lines from the server",
    )
    page.shot("14-reloaded-after-restart")
    confirm_cancel(pw)
    wait_for(
        lambda: run.status == "canceled", 20, what="the run to be canceled from the server view"
    )
    pw.wait_for_selector("[data-testid=jt-status]:text-is('canceled')")
    assert leftover(run.id) == []
