"""A kernel restart or shutdown from JupyterLab's menu never ends the run a cell waits for.

JupyterLab asks jupyter_server to restart or shut the kernel down, and jupyter_client
interrupts the kernel first, as the Stop button does; the waiting %%train cell must tell
the two apart. The run trains on, and a cell run afterwards attaches to it and sees it
complete.
"""

from __future__ import annotations

import pytest
from conftest import leftover, wait_for
from test_browser import browser  # noqa: F401 (the fixture)

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
