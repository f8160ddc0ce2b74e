"""A notebook's code is cited by the cell it is in and the line the editor shows, wherever a
rank's code is shown: the traceback of a failure (the cell's and its helpers' from earlier
cells), the frames with their variables, the live py-spy stack of a stalled rank (with the
package's own frames under it counted, not listed) and pdb under ``--debug``."""

from __future__ import annotations

import json
import time

import pytest
from conftest import launched_by, leftover, wait_for

from jupyter_trainer.api import runs as api
from jupyter_trainer.api.stacks import run_stacks
from jupyter_trainer.capture import resolve_cell
from jupyter_trainer.capture.cellscript import cell_parts, render_cell_script
from jupyter_trainer.frontends.views.health_text import stall_lines

# An earlier cell (In [1]) with a helper on its lines 3-7; the helper raises on its line 6
# for a batch of 3, and sleeps on its line 7 for one of 5.
HELPER_CELL = """import time

def helper(batch):
    scale = batch * 2
    if batch == 3:
        raise ValueError(f"bad batch {batch}")
    time.sleep(600 if batch == 5 else 0)
    return scale
"""
HISTORY = ["", HELPER_CELL]


def notebook_helper():
    namespace: dict = {"__name__": "__main__"}
    exec(compile(HELPER_CELL, "<ipython-input-1>", "exec"), namespace)
    return namespace["helper"]


def cell(bad: int) -> str:
    """The %%train cell's body: its line 1 is the %%train line, so `helper(step)` is line 7."""
    return f"""import time
from jupyter_trainer import runtime as jt
for step in range(100):
    jt.log(step=step, loss=1.0 / (step + 1))
    if step == {bad}:
        helper(step)
    time.sleep(0.05)
"""


def submit(bad: int, **kwargs) -> api.Run:
    return api.submit(
        cell(bad),
        namespace={"helper": notebook_helper(), "time": time},
        history=HISTORY,
        origin={"cell": 9, "first_line": 2},
        **kwargs,
    )


def test_the_script_maps_each_part_to_the_cell_it_came_from():
    context = resolve_cell(cell(3), {"helper": notebook_helper()}, history=HISTORY, first_line=2)
    assert context.definition_cells == {"helper": (1, 3)}
    script = render_cell_script(cell(3), context, 2).splitlines()
    parts = json.loads(cell_parts(cell(3), context, 2))["parts"]
    helper, own = parts
    assert (helper["cell"], helper["line"], own["cell"], own["line"]) == (1, 3, None, 1)
    assert script[helper["start"] - 1] == "def helper(batch):"
    assert script[helper["end"] - 1] == "    return scale"
    assert "# Notebook definition: helper (Cell In [1], line 3)" in script
    assert script[own["start"]].startswith("import time")  # the cell's line 2
    assert script[own["start"] + 5] == "        helper(step)"  # line 7
    assert own["end"] == len(script)


@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_a_helper_from_an_earlier_cell_is_cited_by_its_cell_and_line(home, launcher):
    run = submit(3, launcher=launcher).wait(timeout=90, raise_on_failure=False)
    state = run.state
    tb = state["traceback"]
    assert state["status"] == "failed" and "ValueError: bad batch 3" in tb
    assert "  Cell In [9], line 7, in <module>\n    helper(step)" in tb, tb
    assert '  Cell In [1], line 6, in helper\n    raise ValueError(f"bad batch {batch}")' in tb, tb
    assert "cell.py" not in tb and "boot.py" not in tb
    assert tb in run.logs(0)  # the rank's log says the same
    frames = run.store.rank_records(run.id)[0]["frames"]
    assert [(f["file"], f["line"], f["function"]) for f in frames] == [
        ("Cell In [9]", 7, "<module>"),
        ("Cell In [1]", 6, "helper"),
    ]
    assert frames[1]["locals"] == {"batch": "3", "scale": "6"}
    assert leftover(run.id) == []


def test_a_stalled_ranks_stack_shows_the_cells_lines_and_hides_the_packages_frames(
    home, launch_mode
):
    run = submit(5, procs=1, stall_timeout=2, name="stall-lines")
    try:
        entry = wait_for(
            lambda: (run.state.get("stalled") or [None])[0], timeout=90, what="a stalled rank"
        )
        stack = entry["stack"]
        assert "    helper (Cell In [1]:7)\n    <module> (Cell In [9]:7)\n" in stack, stack
        assert "frames of jupyter_trainer hidden)" in stack
        assert "1 thread of jupyter_trainer hidden: jt-events" in stack
        for ours in ("boot.py", "runpy", "cell.py", "hotstart", "cell_run"):
            assert ours not in stack.split("Thread ", 1)[1], stack
        assert entry["frame"] == {"function": "helper", "file": "Cell In [1]", "line": 7}
        assert stall_lines(entry)[0].endswith(", in helper (Cell In [1], line 7)")
        live = run_stacks(run.store, run.id)[0]
        assert "helper (Cell In [1]:7)" in live and "frames of jupyter_trainer hidden" in live
        assert launched_by(run) == launch_mode
    finally:
        run.cancel()
    assert leftover(run.id) == []


def test_pdb_and_the_debug_banner_give_the_cells_own_lines(home):
    run = submit(3, launcher="python", debug=True, name="dbg-lines")
    entry = wait_for(
        lambda: (run.state.get("debugging") or [None])[0], timeout=90, what="a debugger"
    )
    try:
        assert entry["where"].endswith("ValueError: bad batch 3 at Cell In [1], line 6"), entry
        with run.debug() as session:
            first = session.read()
            assert "> Cell In [1](6)helper()" in first, first
            assert 'raise ValueError(f"bad batch {batch}")' in first
            listed = session.command("l")
            assert "  6  ->\t        raise ValueError" in listed, listed
            assert "> Cell In [9](7)<module>()" in session.command("up")
            session.command("q")
    except BaseException:
        run.cancel()  # the rank would wait for pdb for half an hour
        raise
    run.wait(timeout=90, raise_on_failure=False)
    assert run.state["status"] == "failed" and leftover(run.id) == []


def test_a_notebooks_helper_is_cited_by_its_cell_in_the_failed_cells_error(ip, launch_mode):
    """In a real IPython shell: the helper's cell and the %%train cell, by their In [n]."""
    helper_cell = ip.execution_count
    ip.run_cell("def scaled(x):\n    y = x * 2\n    return 1 / (y - 6)\n", store_history=True)
    train_cell = ip.execution_count
    result = ip.run_cell("%%train --procs 1\nz = 1\nscaled(3)\n", store_history=True)
    error = result.error_in_exec
    assert type(error).__name__ == "RunFailed", error
    tb = error.traceback
    assert f"  Cell In [{train_cell}], line 3, in <module>\n    scaled(3)" in tb, tb
    assert f"  Cell In [{helper_cell}], line 3, in scaled\n    return 1 / (y - 6)" in tb, tb
    assert "cell.py" not in tb and "_jt" not in tb
    [run] = api.runs()
    assert launched_by(run) == launch_mode and leftover(run.id) == []
