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
from ssh_hosts import pair, ssh_pair, user_home  # noqa: F401 (fixtures)

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside import procs

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
