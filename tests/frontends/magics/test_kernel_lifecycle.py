"""Nothing a kernel's lifecycle does ends a run or a sweep its cell waits for.

jupyter_client interrupts a kernel before every restart and every shutdown (the menu's
Restart and Shut Down, closing a notebook, the server stopping, idle culling), so a waiting
``%%train`` cell sees the same KeyboardInterrupt as the Stop button. Only the Stop button
cancels; these tests restart and shut down real kernels (jupyter_client, as jupyter_server
does) while a cell waits, and check that the run trains on and can be attached afterwards.
"""

from __future__ import annotations

import time

import pytest
from conftest import leftover, wait_for
from support.kernel_client import Kernel

import jupyter_trainer as jt
from jupyter_trainer.api import runs as api

RUN_CELL = """%%train --procs 2 --name through-{action}
import time
from jupyter_trainer import runtime as jt
for step in range(70):
    jt.log(step=step, x=step)
    jt.progress(step + 1, 70)
    time.sleep(0.1)
"""

SWEEP_CELL = """%%train --launcher python --sweep x=uniform(-1,1) --trials 4 --parallel 2 --metric score --seed 3
import time
from jupyter_trainer import runtime as jt
for step in range(20):
    jt.log(step=step, score=x * (step + 1))
    time.sleep(0.15)
"""


def _end_kernel(kernel: Kernel, action: str) -> None:
    """What jupyter_server does for Restart Kernel and for Shut Down Kernel."""
    if action == "restart":
        kernel.km.restart_kernel(now=False)
        kernel.kc.wait_for_ready(timeout=60)
    else:
        kernel.kc.stop_channels()
        kernel.km.shutdown_kernel(now=False)


def _close(*kernels: Kernel | None) -> None:
    for kernel in {id(k): k for k in kernels if k is not None}.values():
        if kernel.km.has_kernel:
            kernel.close()
        else:
            kernel.kc.stop_channels()


def _last_step(run: api.Run) -> int:
    events, _ = run.store.read_events(run.id, 0)
    steps = [e["step"] for e in events if e.get("step") is not None]
    return max(steps, default=-1)


def _attach_in(kernel: Kernel, ident: str) -> str:
    """``%train attach`` in text mode: it follows the run or sweep to its end."""
    kernel.execute("%load_ext jupyter_trainer\n%env JUPYTER_TRAINER_MONITOR=text")
    reply = kernel.execute(f"%train attach {ident}", timeout=180, allow_stdin=False)
    msg_id = reply["parent_header"]["msg_id"]
    return "".join(
        m["content"].get("text", "") + m["content"].get("data", {}).get("text/plain", "")
        for m in kernel.messages
        if m["parent_header"].get("msg_id") == msg_id
    )


@pytest.mark.parametrize("mode", ["widget", "text"])
@pytest.mark.parametrize("action", ["restart", "shutdown"])
def test_a_waiting_run_trains_on_through_a_kernel_restart_or_shutdown(home, action, mode):
    kernel = Kernel(JUPYTER_TRAINER_MONITOR=mode)
    after = None
    try:
        kernel.execute("%load_ext jupyter_trainer")
        kernel.kc.execute(RUN_CELL.format(action=action))
        run = wait_for(lambda: api.runs(home=home), timeout=60, what="the run")[0]
        wait_for(lambda: _last_step(run) >= 3, timeout=90, what="rank 0 at step 3")
        _end_kernel(kernel, action)
        at_end = _last_step(run)
        # The run goes on training: new steps arrive, nothing asked it to stop.
        wait_for(
            lambda: _last_step(run) >= at_end + 5,
            timeout=30,
            what=f"steps after the kernel's {action} (status {run.status})",
        )
        assert run.status == "running"
        assert run.store.cancel_request(run.id) is None
        after = kernel if action == "restart" else Kernel(JUPYTER_TRAINER_MONITOR="text")
        text = _attach_in(after, run.id)
        assert run.status == "completed", run.state
        assert _last_step(run) == 69
        assert f"run {run.id}" in text and "completed" in text
        assert leftover(run.id) == []
    finally:
        _close(kernel, after)


@pytest.mark.parametrize("action", ["restart", "shutdown"])
def test_a_waiting_sweep_goes_on_through_a_kernel_restart_or_shutdown(home, action):
    kernel = Kernel(JUPYTER_TRAINER_MONITOR="widget")
    after = None
    try:
        kernel.execute("%load_ext jupyter_trainer\nx = 0.0")
        kernel.kc.execute(SWEEP_CELL)
        sweep = wait_for(lambda: jt.sweeps(home=home), timeout=60, what="the sweep")[0]
        wait_for(
            lambda: sweep.state.get("counts", {}).get("running", 0) == 2,
            90,
            what="two trials running",
        )
        _end_kernel(kernel, action)
        time.sleep(3)  # longer than the cell waits for a shutdown request after an interrupt
        assert sweep.status == "running"
        assert sweep.sweeps.cancel_request(sweep.id) is None
        after = kernel if action == "restart" else Kernel(JUPYTER_TRAINER_MONITOR="text")
        text = _attach_in(after, sweep.id)
        state = sweep.state
        assert state["status"] == "completed", state
        assert [t["status"] for t in state["trials"]] == ["completed"] * 4
        assert f"sweep {sweep.id}: completed, 4 of 4 trials" in text
        for run in sweep.trials():
            assert leftover(run.id) == []
    finally:
        _close(kernel, after)
