"""A live session in JupyterLab, as a person drives it: the session's run view, what its
ranks print in the cell's output, the Stop button during a session cell (the cell ends, the
session goes on), and the view once the session is stopped."""

from __future__ import annotations

import time

import pytest
from conftest import leftover, wait_for
from support.browser_page import browser  # noqa: F401 (the fixture)

import jupyter_trainer as jt

CELLS = [
    "%load_ext jupyter_trainer",
    "%train session start web --procs 2",
    "%%train --session web\nfrom jupyter_trainer import runtime as jt\n"
    "print(f'hello from rank {jt.rank} of {jt.world_size}', flush=True)",
    "%%train --session web\nimport time\nprint('asleep', flush=True)\ntime.sleep(60)",
    "%%train --session web\nprint(f'awake on rank {jt.rank}', flush=True)",
    "%train session stop web",
]
STOP_BUTTON = ".jp-NotebookPanel-toolbar [data-command='notebook:interrupt-kernel']"


@pytest.fixture
def stopped_after(home):
    """Every session the test started is stopped at its end, whatever happened."""
    yield home
    for live in jt.sessions(home=home):
        live.stop()


def test_a_session_in_lab_shows_its_ranks_output_survives_stop_and_ends(
    stopped_after, browser, home
):
    lab, page = browser
    pw = page.page
    lab.write_notebook("session.ipynb", CELLS)
    page.open("session.ipynb")
    page.run_all()  # runs until the Stop button ends the sleeping cell with an error
    cells = pw.locator(".jp-Notebook .jp-Cell")
    view = cells.nth(1).locator("[data-testid=jt-monitor]")
    view.locator("[data-testid=jt-status]:text-is('running')").wait_for(timeout=120_000)
    [live] = wait_for(lambda: jt.sessions(home=home), 30, what="the session")
    assert view.locator("[data-testid=jt-run-id]").inner_text() == live.id
    hello = cells.nth(2).locator(".jp-OutputArea-output")
    for rank in (0, 1):
        hello.get_by_text(f"[rank {rank}] hello from rank {rank} of 2").wait_for()
    asleep = cells.nth(3).locator(".jp-OutputArea")
    for rank in (0, 1):
        asleep.get_by_text(f"[rank {rank}] asleep").wait_for(timeout=60_000)
    page.shot("session-asleep", ".jp-Notebook")

    pressed = time.monotonic()
    pw.click(STOP_BUTTON)
    asleep.locator("[data-mime-type='application/vnd.jupyter.stderr']").get_by_text(
        "KeyboardInterrupt"
    ).first.wait_for(timeout=30_000)
    took = time.monotonic() - pressed
    page.wait_idle()
    assert took < 15, f"the session cell took {took:.1f} s to end after Stop"
    assert live.status == "running"

    cells.nth(4).locator(".jp-InputArea-editor").click()
    pw.keyboard.press("Shift+Enter")
    awake = cells.nth(4).locator(".jp-OutputArea-output")
    for rank in (0, 1):
        awake.get_by_text(f"[rank {rank}] awake on rank {rank}").wait_for(timeout=60_000)
    page.wait_idle()
    pw.keyboard.press("Shift+Enter")  # the next cell: stop the session
    view.locator("[data-testid=jt-status]:text-is('completed')").wait_for(timeout=60_000)
    page.shot("session-stopped", ".jp-Notebook")
    assert jt.sessions(home=home) == [] and live.record.status == "completed"
    assert leftover(live.id) == []
