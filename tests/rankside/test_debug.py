"""Debugging a failed rank: ``--debug`` holds a rank that raises in pdb, served on a private
socket on its node, until someone attaches (``Run.debug``, ``jupyter-trainer debug``,
``%train debug``); ``jt.breakpoint`` stops a rank the same way."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time

import pytest
from conftest import leftover, wait_for
from support.ssh_netns import (
    far,  # noqa: F401 (fixture)
    netns_hosts,  # noqa: F401 (fixture)
)
from support.workloads import RAISES

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunStateError, SpecError
from jupyter_trainer.frontends.views.health import list_fields
from jupyter_trainer.frontends.views.health_text import HealthNotes

# Rank 1 raises in a helper with a local of its own; rank 0 waits for it in a collective.


def debugging(run, rank):
    return wait_for(
        lambda: [d for d in run.state.get("debugging") or [] if d["rank"] == rank],
        timeout=120,
        what=f"rank {rank} waiting in a debugger",
    )[0]


def test_a_rank_that_raises_under_debug_waits_for_pdb_and_the_run_then_fails(home):
    run = api.submit(RAISES, procs=2, debug=True, name="dbg")
    entry = debugging(run, 1)
    assert "ValueError: bad batch 3.0" in entry["where"] and entry["post_mortem"]
    assert entry["until"] - entry["since"] == pytest.approx(1800, abs=5)
    folder = os.path.dirname(entry["socket"])
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700  # only this user can connect
    assert run.status == "running"
    said = HealthNotes(run.spec, run.id).news(run.state, time.time())
    assert any(
        line.startswith("DEBUGGING: rank 1: ValueError: bad batch 3.0")
        and f"jupyter-trainer debug {run.id}" in line
        for line in said
    ), said
    assert list_fields(run.state, run.spec, time.time())["debugging"] == [1]
    shown = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "show", run.id], capture_output=True, text=True
    )
    assert "DEBUGGING: rank 1: ValueError: bad batch 3.0 at " in shown.stdout
    assert f"attach in a terminal with `jupyter-trainer debug {run.id}`" in shown.stdout
    with run.debug() as session:
        assert session.rank == 1
        first = session.read()
        assert "post-mortem of rank 1: ValueError: bad batch 3.0" in first
        assert first.endswith("(Pdb) ")
        assert session.command("p scale, lr").startswith("(3.0, 0.25)")
        assert "<module>()" in session.command("up")
        assert session.command("p batch.shape").startswith("torch.Size([3, 4])")
        session.command("q")
        assert session.ended
    run.wait(timeout=120, raise_on_failure=False)
    state = run.state
    assert state["status"] == "failed" and state["failed_rank"] == 1, state
    assert "ValueError: bad batch 3.0" in state["error"]
    assert "debugging" not in state
    assert run.store.rank_records(run.id)[1]["debugged"] == "quit"
    assert not os.path.exists(folder)
    assert leftover(run.id) == []


def test_nobody_attaching_within_the_time_limit_fails_the_run_as_without_debug(home):
    run = api.submit(RAISES, procs=2, launcher="mpirun", debug=2, name="dbg-limit")
    # the rank's own record: the supervisor may not look within the 2 s
    entry = wait_for(
        lambda: run.store.rank_records(run.id).get(1, {}).get("debugging"), timeout=120
    )
    assert entry["until"] - entry["since"] == pytest.approx(2, abs=0.5)
    run.wait(timeout=120, raise_on_failure=False)
    assert run.state["status"] == "failed" and run.state["failed_rank"] == 1
    assert run.store.rank_records(run.id)[1]["debugged"] == "time limit"
    assert not os.path.exists(entry["socket"])
    assert leftover(run.id) == []
    with pytest.raises(RunStateError, match="no rank of run .* waits in a debugger"):
        run.debug()


BREAKS = """
from jupyter_trainer import runtime as jt
total = 0
for step in range(3):
    total += step
    if step == 1:
        jt.breakpoint(rank=1)
jt.log(step=step, total=total)
"""


def test_jt_breakpoint_stops_the_named_rank_and_continue_lets_it_go_on(home):
    run = api.submit(BREAKS, procs=2, launcher="mpirun", name="bp")
    entry = debugging(run, 1)
    assert "jt.breakpoint() at the cell, line 7" in entry["where"]
    assert not entry["post_mortem"]
    with pytest.raises(SpecError, match="rank 0 .* does not wait in a debugger; these do: 1"):
        run.debug(rank=0)
    with run.debug(rank=1) as session:
        assert "stopped at rank 1" in session.read()
        assert session.command("p total, step").startswith("(1, 1)")
        session.command("total = 100")
        session.command("c")
        assert session.ended
    run.wait(timeout=120)
    assert run.metrics(1)["total"] == [(2, 102.0)]
    assert run.metrics(0)["total"] == [(2, 3.0)]
    assert leftover(run.id) == []


def test_the_cli_attaches_from_a_terminal(home):
    run = api.submit(RAISES, procs=2, debug=True, name="dbg-cli")
    debugging(run, 1)
    done = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer", "debug", run.id],
        input=b"p lr\nq\n",
        capture_output=True,
        timeout=120,
        env={**os.environ},
    )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "post-mortem of rank 1" in out and "0.25" in out
    run.wait(timeout=120, raise_on_failure=False)
    assert run.state["status"] == "failed"
    assert leftover(run.id) == []


def test_bad_debug_values_start_nothing(home):
    for bad in (-1, 0.5, float("nan"), "soon"):
        with pytest.raises(SpecError, match="--debug-timeout must be a number of seconds"):
            api.submit("pass", debug=bad)
    assert api.runs() == []


def test_a_rank_on_another_ssh_node_is_debugged_through_its_ssh_connection(far):
    # rank 1 runs on node-b, a network namespace of its own reached only by ssh
    far()
    run = api.submit(RAISES, target="far", nodes=2, procs=1, debug=True, name="dbg-ssh")
    entry = debugging(run, 1)
    assert entry["host"] == "node-b"
    with run.debug() as session:
        assert session.relay is not None and session.conn is None  # over ssh, not the socket
        assert "post-mortem of rank 1" in session.read()
        assert session.command("p scale * 4").startswith("12.0")
        assert "<module>()" in session.command("up")
        assert session.command("p lr").startswith("0.25")
        session.command("q")
        assert session.ended
    run.wait(timeout=180, raise_on_failure=False)
    assert run.state["status"] == "failed" and run.state["failed_rank"] == 1
    assert "ValueError: bad batch 3.0" in run.state["error"]
    assert run.state["teardown"]["leftovers"] == [] and leftover(run.id) == []


def test_train_debug_in_a_notebook_asks_through_the_kernels_input_box(home):
    from jupyter_client.manager import start_new_kernel

    run = api.submit(RAISES, procs=2, debug=True, name="dbg-nb")
    debugging(run, 1)
    km, kc = start_new_kernel(kernel_name="python3", env={**os.environ})
    try:
        kc.execute_interactive("%load_ext jupyter_trainer", timeout=60)
        answers, prompts, out = iter(["p lr * 2", "q"]), [], []

        def answer(msg):
            prompts.append(msg["content"]["prompt"])
            kc.input(next(answers))

        reply = kc.execute_interactive(
            f"%train debug {run.id}",
            allow_stdin=True,
            stdin_hook=answer,
            output_hook=out.append,
            timeout=120,
        )
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    text = "".join(m["content"].get("text", "") for m in out if m["msg_type"] == "stream")
    assert "post-mortem of rank 1" in text and "0.5" in text
    assert prompts == ["(Pdb) ", "(Pdb) "]
    run.wait(timeout=120, raise_on_failure=False)
    assert run.state["status"] == "failed" and leftover(run.id) == []


def test_papermill_refuses_debug_since_nobody_can_answer(home, tmp_path):
    import nbformat
    import papermill

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_trainer"),
        nbformat.v4.new_code_cell("%%train --procs 2 --debug\nraise ValueError('x')\n"),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    src, out = tmp_path / "debug.ipynb", tmp_path / "debug.out.ipynb"
    nbformat.write(nb, src)
    with pytest.raises(papermill.PapermillExecutionError) as info:
        papermill.execute_notebook(str(src), str(out), kernel_name="python3", progress_bar=False)
    assert info.value.ename == "SpecError"
    assert "runs without input (papermill, nbconvert)" in info.value.evalue
    assert api.runs() == []


def test_a_rank_of_a_slurm_job_is_debugged_through_srun(cluster, home):
    run = api.submit(RAISES, target="cluster", procs=2, debug=True, name="dbg-slurm")
    debugging(run, 1)
    with run.debug() as session:
        assert session.relay is not None  # srun --overlap, one more step of the job
        assert "post-mortem of rank 1" in session.read()
        assert session.command("p scale + lr").startswith("3.25")
        session.command("q")
        assert session.ended
    run.wait(timeout=180, raise_on_failure=False)
    assert run.state["status"] == "failed" and run.state["failed_rank"] == 1
    assert leftover(run.id) == []


def test_cancelling_a_run_that_waits_in_a_debugger_leaves_nothing(home):
    run = api.submit(RAISES, procs=2, debug=True, name="dbg-cancel")
    entry = debugging(run, 1)
    run.cancel()
    run.wait(timeout=120, raise_on_failure=False)
    assert run.state["status"] == "canceled"
    assert "debugging" not in run.state
    assert not os.path.exists(os.path.dirname(entry["socket"]))
    assert leftover(run.id) == []


def test_a_socket_path_from_a_record_is_checked_before_anything_connects():
    from jupyter_trainer.core.errors import TargetError
    from jupyter_trainer.targets.base import debug_socket

    good = {"rank": 1, "debugging": {"socket": "/tmp/jt-debug-ab_12/rank-1.sock"}}
    assert debug_socket(good) == "/tmp/jt-debug-ab_12/rank-1.sock"
    for bad in ("/etc/passwd", "/tmp/jt-debug-x/../../etc/rank-1.sock", "rank-1.sock", 7):
        with pytest.raises(TargetError, match="no socket jupyter_trainer makes"):
            debug_socket({"rank": 1, "debugging": {"socket": bad}})
