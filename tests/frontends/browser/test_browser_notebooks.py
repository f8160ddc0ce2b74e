"""The shipped notebooks, opened in a real JupyterLab and a real Notebook 7 (headless
Chromium) and run as a new user runs them: Run > Run All Cells, then saved. The saved
notebook must hold no error and a result in every code cell that prints one.

Papermill shows a ``%%train`` cell's run as its value; a live front end shows the run's
widget instead, and the next cell's ``run = _`` must still find the run there.
"""

from __future__ import annotations

import json
import shutil
import time

import pytest
from conftest import REPO
from support.browser_page import any_front_end  # noqa: F401 (the fixture)

BUSY = ".jp-InputArea-prompt:has-text('[*]')"
# what each notebook's last cells print when everything before them worked
EXPECTED = {
    "quickstart.ipynb": "final test accuracy",
    "sweep.ipynb": "best trial",
    "data_and_models.ipynb": "onnxruntime within tolerance: True",
    "sessions.ipynb": "session demo stopped",
}


def ran_to_the_end(page, timeout: float) -> None:
    """Wait until no cell is running for a few seconds in a row (Run All stops at the first
    error, so an error ends it too)."""
    deadline = time.monotonic() + timeout
    quiet_since = None
    while time.monotonic() < deadline:
        page.answer_dialogs()
        if page.page.locator(BUSY).count():
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > 4:
            return
        time.sleep(0.5)
    prompts = page.page.locator(".jp-InputArea-prompt").all_inner_texts()
    raise AssertionError(f"Run All did not end in {timeout:.0f} s; the prompts read {prompts}")


def saved(lab, page, name: str) -> dict:
    """Save the notebook from the page (Control+S) and read what was saved."""
    path = lab.root / name
    before = path.stat().st_mtime_ns
    page.page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.page.keyboard.press("Control+s")
    deadline = time.monotonic() + 30
    while path.stat().st_mtime_ns == before:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} was not saved 30 s after Control+S")
        page.answer_dialogs()
        time.sleep(0.3)
    time.sleep(0.5)  # the contents API writes then renames: let it end
    return json.loads(path.read_text())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_shipped_notebook_runs_clean_with_run_all(any_front_end, home, name):
    lab, page = any_front_end
    shutil.copy(REPO / "notebooks" / name, lab.root / name)
    page.open(name)
    page.run_all()
    ran_to_the_end(page, timeout=300)
    nb = saved(lab, page, name)
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    errors = [
        f"cell {i}: {o['ename']}: {o['evalue']}"
        for i, c in enumerate(code)
        for o in c["outputs"]
        if o["output_type"] == "error"
    ]
    assert not errors, errors
    unrun = [i for i, c in enumerate(code) if c["execution_count"] is None]
    assert not unrun, f"cells {unrun} of {name} did not run"
    text = "".join(
        "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
        for c in code
        for o in c["outputs"]
    )
    assert EXPECTED[name] in text, text[-2000:]
    assert not page.errors, page.errors
