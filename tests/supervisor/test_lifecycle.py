"""Cancel, interrupt and supervisor loss: the run always ends and no process is left."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
from conftest import launched_by, leftover, wait_for
from support.jt_cli import CLI, cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunCanceled

LONG_CELL = """
import time
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
for step in range(10_000):
    jt.log(step=step, x=step)
    jt.progress(step, 10_000)
    time.sleep(0.05)
"""


def wait_until_all_ranks_log(run: api.Run, ranks: int = 2) -> None:
    store = run.store
    wait_for(
        lambda: all(store.read_events(run.id, r)[0] for r in range(ranks)),
        timeout=60,
        what=f"events from {ranks} ranks of {run.id}",
    )


def test_cancel_mid_run_ends_every_process_within_5s(home, launch_mode):
    run = api.submit(LONG_CELL, procs=2, name="cancel-me")
    wait_until_all_ranks_log(run)
    pids = {rec["pid"] for rec in run.store.rank_records(run.id).values()}
    assert len(pids) == 2 and leftover(run.id)
    started = time.monotonic()
    run.cancel(wait=True, timeout=5)
    assert run.status == "canceled"
    assert leftover(run.id) == []
    assert time.monotonic() - started < 5
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)
    state = run.state
    assert state["reason"] == "canceled by user" and state["teardown"]["leftovers"] == []
    with pytest.raises(RunCanceled):
        run.raise_for_status()
    assert launched_by(run) == launch_mode


def test_kernel_interrupt_cancels_the_run(home, tmp_path, launch_mode):
    """The notebook's Stop button: a real kernel, interrupted while %%train waits."""
    from jupyter_client.manager import start_new_kernel

    km, kc = start_new_kernel(kernel_name="python3", env={**os.environ})
    try:
        kc.execute_interactive("%load_ext jupyter_trainer", timeout=60)
        msg_id = kc.execute("%%train --procs 2 --name stop-button\n" + LONG_CELL)
        run = wait_for(lambda: api.runs(home=home), timeout=60, what="the run")[0]
        wait_until_all_ranks_log(run)
        interrupted = time.monotonic()
        km.interrupt_kernel()
        reply = kc.get_shell_msg(timeout=30)
        while reply["parent_header"].get("msg_id") != msg_id:
            reply = kc.get_shell_msg(timeout=30)
        content = reply["content"]
        assert content["status"] == "error"
        # One line, not the interrupt's traceback through the package's frames.
        assert content["ename"] == "RunCanceled", content["ename"]
        assert len(content["traceback"]) == 1, content["traceback"]
        assert "the cell was interrupted" in content["traceback"][0]
        wait_for(lambda: leftover(run.id) == [], timeout=5, what="every rank to end")
        assert time.monotonic() - interrupted < 5 + 1
        assert run.status == "canceled" and launched_by(run) == launch_mode
        assert run.state["reason"] == "stopped from the notebook (Stop button)"
        said = []
        while kc.iopub_channel.msg_ready():
            msg = kc.get_iopub_msg(timeout=1)
            if msg["msg_type"] == "stream" and msg["parent_header"].get("msg_id") == msg_id:
                said.append(msg["content"]["text"])
        assert (
            f"Stop button: canceling run {run.id} (a kernel restart or shutdown would leave "
            "it running)"
        ) in "".join(said)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def test_lost_supervisor_is_reported_and_its_ranks_die(home, launch_mode):
    run = api.submit(LONG_CELL, procs=2, name="orphan")
    wait_until_all_ranks_log(run)
    supervisor = run.state["supervisor"]["pid"]
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: run.status == "lost", timeout=10, what="status lost")
    wait_for(lambda: leftover(run.id) == [], timeout=10, what="ranks to end with their supervisor")
    with pytest.raises(api.RunFailed, match="lost"):
        run.wait(timeout=1)
    assert [r.id for r in api.runs(status="lost", home=home)] == [run.id]
    assert launched_by(run) == launch_mode


def test_failing_mpirun_rank_stops_the_others(home):
    code = """
import time
from jupyter_trainer import runtime as jt
if jt.rank == 0:
    time.sleep(0.5)
    raise SystemExit(3)
time.sleep(600)
"""
    run = api.submit(code, procs=2, launcher="mpirun", name="mpi-fail")
    with pytest.raises(api.RunFailed) as info:
        run.wait(timeout=60)
    assert info.value.failed_rank == 0
    assert run.state["rank_exit_codes"]["0"] == 3
    assert leftover(run.id) == []


def test_supervisor_outlives_the_submitting_process(home, tmp_path):
    """The kernel never owns a run: kill the process that submitted it, the run goes on."""
    import subprocess

    script = tmp_path / "submitter.py"
    script.write_text(
        "import jupyter_trainer as jt, time\n"
        "run = jt.submit('import time\\nfor i in range(30):\\n    time.sleep(0.1)',"
        " launcher='python', name='outlive')\n"
        "print(run.id, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    run_id = proc.stdout.readline().strip()
    proc.kill()
    proc.wait()
    run = api.get_run(run_id)
    run.wait(timeout=60)
    assert run.status == "completed"


def test_rank_killed_by_a_signal_is_named(home, launch_mode):
    code = """
import os, signal, time
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
jt.log(step=0, x=1)
if jt.rank == 1:
    os.kill(os.getpid(), signal.SIGKILL)   # what the out-of-memory killer does
time.sleep(600)
"""
    run = api.submit(code, procs=2, name="oom")
    with pytest.raises(api.RunFailed) as info:
        run.wait(timeout=90)
    assert info.value.failed_rank == 1
    assert "rank 1 ended without recording an exit" in str(info.value)
    assert "SIGKILL" in run.state["error"], run.state["error"]
    assert leftover(run.id) == [] and launched_by(run) == launch_mode


def test_a_rank_ends_as_python_would_but_never_aborts_in_native_teardown(home, launch_mode):
    """A finished rank joins its threads and runs its atexit handlers, and an abort in C/C++
    static teardown (where torch's Gloo can abort after ``destroy_process_group``; here a
    C-level exit handler that calls abort()) does not turn the finished run into a crash."""
    code = """
import atexit, ctypes, os, threading, time
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
libc = ctypes.CDLL(None)
libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)
os.makedirs("outputs", exist_ok=True)
atexit.register(lambda: open(f"outputs/atexit-{jt.rank}", "w").write("ran"))
def late():
    time.sleep(1)
    open(f"outputs/thread-{jt.rank}", "w").write("joined")
threading.Thread(target=late).start()
"""
    run = api.submit(code, procs=2, name="native-teardown")
    run.wait(timeout=90)
    assert run.status == "completed", run.state.get("error")
    for rank in range(2):
        assert (run.outputs / f"atexit-{rank}").read_text() == "ran"
        assert (run.outputs / f"thread-{rank}").read_text() == "joined"
    assert leftover(run.id) == [] and launched_by(run) == launch_mode


def test_a_cells_traceback_cites_the_cells_own_lines(home):
    """The cell runs from a script with the parameters and carried definitions above it; a
    traceback gives the cell's lines (``Cell In [n]`` when the notebook said which cell, as
    %%train does; tests/frontends/magics/test_magics.py); the frames of other files stay as they are."""

    def helper(x):
        return 1 / x

    code = "a = 1\nb = helper(0)\n"
    run = api.submit(code, launcher="python", namespace={"helper": helper})
    state = run.wait(timeout=60, raise_on_failure=False).state
    tb = state["traceback"]
    assert state["status"] == "failed" and "ZeroDivisionError" in tb
    assert "  the cell, line 2, in <module>" in tb, tb
    assert ", in helper" in tb and "cell.py" not in tb
    numbered = api.submit(
        code, launcher="python", namespace={"helper": helper}, origin={"cell": 12}
    ).wait(timeout=60, raise_on_failure=False)
    assert "  Cell In [12], line 2, in <module>" in numbered.state["traceback"]
    assert leftover(run.id) == [] and leftover(numbered.id) == []


@pytest.mark.parametrize("launcher", ["torchrun", "python"])
def test_a_rank_that_finished_and_then_died_by_a_signal_is_named(home, launcher):
    """The last rank's code finishes (it records exit code 0), then its process aborts in
    native teardown, as torch's C++ destructors can: the error names the rank and the signal,
    not "the launcher exited with code 1". torch is not imported, so boot leaves the rank to
    Python's own exit, where the C exit handler runs."""
    code = """
import ctypes, resource
from jupyter_trainer import runtime as jt
jt.log(step=0, x=1)
if jt.rank == jt.world_size - 1:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file in the working directory
    libc = ctypes.CDLL(None)
    libc.__cxa_atexit(ctypes.cast(libc.abort, ctypes.c_void_p), None, None)
"""
    procs = 2 if launcher == "torchrun" else 1
    run = api.submit(code, procs=procs, launcher=launcher, hot=False, name="teardown-abort")
    with pytest.raises(api.RunFailed) as info:
        run.wait(timeout=90)
    state = run.state
    assert info.value.failed_rank == procs - 1, state.get("error")
    assert state["rank_exit_codes"][str(procs - 1)] == 0
    assert f"rank {procs - 1} finished its code (it recorded exit code 0)" in state["error"]
    assert "killed by SIGABRT" in state["error"], state["error"]
    assert state["failure"]["signal"] == "SIGABRT"
    assert leftover(run.id) == []


@pytest.mark.parametrize("how", ["cli", "api"])
def test_a_running_run_whose_state_is_gone_is_named_and_still_canceled(home, how):
    """With state.json gone from a running run (its supervisor stopped, so it cannot write
    the state again), every reader names the file and the fix in one line, and cancel goes
    through the supervisor, found by its pid record; once it runs again it ends the run."""
    import subprocess
    import threading

    from jupyter_trainer.core.errors import TrainerError

    run = api.submit(LONG_CELL, procs=2, name="no-state")
    wait_until_all_ranks_log(run)
    paths = run.store.paths(run.id)
    supervisor = run.state["supervisor"]["pid"]
    os.kill(supervisor, signal.SIGSTOP)
    canceled: dict[str, object] = {}
    try:
        paths.state.unlink()
        shown = cli("show", run.id)
        assert shown.returncode == 2 and shown.stderr.count("\n") == 1, shown.stderr
        assert f"state {paths.state} is missing" in shown.stderr
        assert "`jupyter-trainer doctor --fix`" in shown.stderr
        assert "Traceback" not in shown.stderr
        with pytest.raises(TrainerError, match="doctor --fix"):
            run.status
        listed = cli("runs")
        assert listed.returncode == 0 and f"state {paths.state} is missing" in listed.stdout
        logs = cli("logs", run.id)
        assert logs.returncode == 0 and logs.stderr == ""
        if how == "cli":
            canceling = subprocess.Popen(
                [*CLI, "cancel", run.id], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        else:
            canceling = threading.Thread(
                target=lambda: canceled.update(status=run.cancel(timeout=60))
            )
            canceling.start()
        wait_for(paths.cancel_request.exists, timeout=30, what="the cancel request")
    finally:
        os.kill(supervisor, signal.SIGCONT)
    if how == "cli":
        out, err = canceling.communicate(timeout=60)
        assert canceling.returncode == 0 and out == f"run {run.id} canceled\n", (out, err)
    else:
        canceling.join(60)
        assert canceled == {"status": "canceled"}
    assert run.status == "canceled" and run.state["reason"] == "canceled by user"
    wait_for(lambda: leftover(run.id) == [], timeout=10, what="every process of the run to end")


def test_a_cancel_its_supervisor_does_not_answer_says_so_and_is_kept(home):
    """A supervisor that does not act on a cancel within its timeout (stopped here, hung or
    slow on a loaded node) leaves the run running: cancel says so in one line, with no
    traceback, and the request stays, so the run ends once the supervisor looks again."""

    run = api.submit(LONG_CELL, procs=1, name="unanswered")
    wait_until_all_ranks_log(run, ranks=1)
    supervisor = run.state["supervisor"]["pid"]
    os.kill(supervisor, signal.SIGSTOP)
    try:
        canceled = cli("cancel", run.id, "--timeout", "3", timeout=90)
    finally:
        os.kill(supervisor, signal.SIGCONT)
    assert canceled.returncode == 1 and "Traceback" not in canceled.stderr, canceled.stderr
    assert canceled.stdout.startswith(f"run {run.id} is still running: the cancel is asked for")
    run.wait(60, raise_on_failure=False)
    assert run.status == "canceled" and run.state["reason"] == "canceled by user"
    wait_for(lambda: leftover(run.id) == [], timeout=10, what="every process of the run to end")
