"""A run's processes that leave its process group, its session and its environment
(``setsid env -i ...``) are still the run's: its end ends them, and its state says so."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from conftest import wait_for

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.host import procs

# A rank starts a grandchild in a session of its own with an empty environment (so neither
# the launcher's process group nor JT_RUN_ID finds it), writes down which process it is,
# and either ends at once (the grandchild is orphaned) or stays until canceled.
ESCAPE = """
import json, os, subprocess, time
child = subprocess.Popen(["setsid", "env", "-i", "sleep", "600"])
while open(f"/proc/{child.pid}/cmdline", "rb").read().split(b"\\0")[0] != b"sleep":
    time.sleep(0.01)
stat = open(f"/proc/{child.pid}/stat").read()
ticks = int(stat[stat.rindex(")") + 2 :].split()[19])
with open(PIDFILE, "w") as f:
    json.dump({"pid": child.pid, "ticks": ticks}, f)
if STAY:
    time.sleep(600)
"""


def escaped(path: Path) -> dict[str, int]:
    wait_for(path.exists, timeout=60, what="the rank to start its grandchild")
    return json.loads(path.read_text())


def escape(target: str, stay: bool, tmp_path: Path) -> tuple[api.Run, dict[str, int]]:
    pidfile = tmp_path / "escaped.json"
    code = ESCAPE.replace("STAY", str(stay)).replace("PIDFILE", repr(str(pidfile)))
    run = api.submit(code, target=target, procs=1, hot=False, name="escape")
    return run, escaped(pidfile)


@pytest.mark.parametrize("stay", [False, True], ids=["orphaned", "canceled"])
def test_a_grandchild_that_leaves_the_session_and_environment_ends_with_the_run(
    home, tmp_path, stay
):
    run, grandchild = escape("local", stay, tmp_path)
    ends_with_the_run(run, grandchild, stay)


@pytest.mark.parametrize("stay", [False, True], ids=["orphaned", "canceled"])
def test_on_an_ssh_node_too(pair, home, tmp_path, stay):
    run, grandchild = escape("pair", stay, tmp_path)
    ends_with_the_run(run, grandchild, stay)


def ends_with_the_run(run: api.Run, grandchild: dict[str, int], stay: bool) -> None:
    """The run ends as asked, its grandchild with it, named among the teardown's stragglers."""
    try:
        if stay:
            run.cancel(wait=True, timeout=30)
        else:
            run.wait(timeout=60)
        state = run.state
        assert not procs.is_alive(grandchild["pid"], grandchild["ticks"]), state["teardown"]
        ended = state["teardown"].get("stragglers", [])  # "PID CMD" ("NODE: PID CMD" on ssh)
        assert any(f"{grandchild['pid']} sleep 600" in line for line in ended), state["teardown"]
        assert state["teardown"]["leftovers"] == []
        assert state["status"] == ("canceled" if stay else "completed")
    finally:
        if procs.is_alive(grandchild["pid"], grandchild["ticks"]):
            os.kill(grandchild["pid"], signal.SIGKILL)
            time.sleep(0.1)


# A second run of the same pool, which waits for its file, so that it still runs when the
# first run ends with its leftover
WAITER = """
import os, time
while not os.path.exists(GO):
    time.sleep(0.05)
print("went", flush=True)
"""


@pytest.mark.parametrize("stay", [False, True], ids=["orphaned", "canceled"])
def test_a_hot_ranks_grandchild_ends_with_its_run_and_no_other(home, tmp_path, stay):
    """A rank forked by the warm pool: the pool, not the run's supervisor, is its parent,
    and the pool outlives the run and serves other runs. What the rank leaves behind ends
    with its run, named in that run's launcher log; its death watcher still records the
    rank's end, and the pool's other run goes on untouched."""
    go = tmp_path / "go"
    other = api.submit(WAITER.replace("GO", repr(str(go))), procs=1, hot=True, name="waiter")
    pidfile = tmp_path / "escaped.json"
    code = ESCAPE.replace("STAY", str(stay)).replace("PIDFILE", repr(str(pidfile)))
    run = api.submit(code, procs=1, hot=True, name="escape-hot")
    grandchild = escaped(pidfile)
    try:
        wait_for(lambda: other.status == "running", timeout=60, what="the other run to start")
        if stay:
            run.cancel(wait=True, timeout=30)
        else:
            run.wait(timeout=60)
        assert run.state["launcher"]["hot"]["used"], run.state["launcher"]
        assert other.state["launcher"]["hot"]["pool"] == run.state["launcher"]["hot"]["pool"]
        assert not procs.is_alive(grandchild["pid"], grandchild["ticks"]), run.state["teardown"]
        log = (run.path / "logs" / "launcher.log").read_text()
        assert f"[jt] ended {grandchild['pid']} sleep 600, which rank 0 left behind" in log, log
        assert run.state["teardown"]["leftovers"] == []
        assert run.state["status"] == ("canceled" if stay else "completed")
        record = json.loads((run.path / "ranks" / "rank-0.json").read_text())
        assert record.get("exited"), record  # its death watcher was left to record it
        assert other.status == "running"
        go.touch()
        other.wait(timeout=60)
        assert other.status == "completed", other.state.get("error")
        assert "[jt] ended" not in (other.path / "logs" / "launcher.log").read_text()
        pool = run.state["launcher"]["hot"]["pool"]  # it collected each exit that came to it
        wait_for(
            lambda: not [p for p in procs.stats() if p.parent == pool and p.ended],
            timeout=10,
            what="the pool to collect the exits of what its ranks left",
        )
    finally:
        go.touch()
        if procs.is_alive(grandchild["pid"], grandchild["ticks"]):
            os.kill(grandchild["pid"], signal.SIGKILL)
