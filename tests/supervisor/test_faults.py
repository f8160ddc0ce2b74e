"""The fault suite: a real process fault in a real run, then a real check of its record.

For every launcher: SIGKILL a rank, an exception in a rank, SIGKILL the supervisor, SIGKILL
the launcher, on the local target; SIGKILL and exception on the ssh hosts too. Each case waits
until every rank has started and is in its loop of small collectives, then strikes, and
checks the final state, the rank it names, the index row, and that no process is left.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from conftest import leftover, leftover_pids, wait_for
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.rankside.observe import death_watch
from jupyter_trainer.store import Store
from jupyter_trainer.supervisor import starter

# On this machine and on ssh nodes torchrun's ranks are also forked by the warm pool ("hot"),
# and every case runs both ways.
LAUNCHERS = ("torchrun", "hot", "mpirun", "horovod", "python")

# Every rank starts, meets the others, says so (the test waits for that), then runs a loop of
# small collectives; with RAISE the last rank raises at step 20, well after all are up.
TORCH_LOOP = """
import time
import torch
import torch.distributed as dist
from jupyter_trainer import runtime as jt

if jt.world_size > 1:
    dist.init_process_group()
    dist.barrier()
jt.log(step=0, up=1)
for step in range(1, 100_000):
    if RAISE and jt.rank == jt.world_size - 1 and step == 20:
        raise RuntimeError(f"rank {jt.rank} gave up")
    if jt.world_size > 1:
        dist.all_reduce(torch.ones(1))
    time.sleep(0.02)
"""

HOROVOD_LOOP = """
import time
import torch
import horovod.torch as hvd
from jupyter_trainer import runtime as jt

hvd.init()
hvd.allreduce(torch.ones(1), op=hvd.Sum, name="up")
jt.log(step=0, up=1)
for step in range(1, 100_000):
    if RAISE and jt.rank == jt.world_size - 1 and step == 20:
        raise RuntimeError(f"rank {jt.rank} gave up")
    hvd.allreduce(torch.ones(1), op=hvd.Sum, name=f"s{step}")
    time.sleep(0.02)
"""


def submit(launcher: str, *, raise_: bool, name: str, target: str = "local") -> api.Run:
    code = (HOROVOD_LOOP if launcher == "horovod" else TORCH_LOOP).replace("RAISE", str(raise_))
    kwargs = {"nodes": 2, "procs": 1} if target != "local" and launcher != "python" else {}
    if target == "local":
        kwargs["procs"] = 1 if launcher == "python" else 2
    if launcher in ("torchrun", "hot"):
        kwargs["hot"] = launcher == "hot"
    run = api.submit(
        code,
        launcher="torchrun" if launcher == "hot" else launcher,
        target=target,
        name=name,
        **kwargs,
    )
    return run


def check_mode(run: api.Run, launcher: str) -> None:
    """The run was started the way the case asked: forked by the pool only for "hot"."""
    hot = (run.state["launcher"].get("hot") or {}).get("used", False)
    assert hot is (launcher == "hot"), run.state["launcher"]


def world(launcher: str) -> int:
    return 1 if launcher == "python" else 2


def all_up(run: api.Run, ranks: int) -> dict[int, dict]:
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(ranks)),
        timeout=120,
        what=f"every rank of {run.id} to start",
    )
    return run.store.rank_records(run.id)


def finished(run: api.Run, timeout: float = 90) -> dict:
    """The final state, once the supervisor wrote it to state.json and to the index, and ended."""
    wait_for(
        lambda: run.status in ("completed", "failed", "canceled", "lost"),
        timeout=timeout,
        what=f"{run.id} to end",
    )
    supervisor = run.state["supervisor"]
    wait_for(
        lambda: not procs.is_alive(supervisor["pid"], supervisor.get("start_ticks")),
        timeout=30,
        what=f"the supervisor of {run.id} to exit",
    )
    return run.state


def index_row(home, run_id: str) -> dict:
    """The run's row as the SQLite index holds it, read without the package."""
    conn = sqlite3.connect(str(home / "runs.db"))
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    finally:
        conn.close()
    assert row is not None, f"{run_id} has no row in runs.db"
    return dict(row)


def listed(home, run_id: str) -> dict:
    rows = [r for r in Store(home).list_runs(limit=1000) if r["id"] == run_id]
    assert len(rows) == 1, rows
    return rows[0]


def nothing_left(run: api.Run) -> None:
    """Every process of the run (launcher, ranks, their watchers) carries its JT_RUN_ID."""
    wait_for(lambda: leftover(run.id) == [], timeout=15, what=f"every process of {run.id} to end")
    assert procs.pids_with_env("JT_RUN_ID", run.id) == []


# What the ranks recorded of their ends, shown when a test blames the wrong rank.
EVIDENCE = ("host", "exit_code", "failed_at", "ended", "exited", "signal", "peers_gone", "orphaned")


def check_failed(home, run: api.Run, state: dict, rank: int | None) -> None:
    assert state["status"] == "failed", state
    evidence = {
        r: {k: rec.get(k) for k in EVIDENCE if k in rec}
        for r, rec in run.store.rank_records(run.id).items()
    }
    assert state.get("failed_rank") == rank, (
        state.get("failed_rank"),
        state.get("error"),
        evidence,
    )
    row = index_row(home, run.id)
    assert (row["status"], row["failed_rank"]) == ("failed", rank), row
    assert (listed(home, run.id)["status"], listed(home, run.id)["failed_rank"]) == ("failed", rank)
    assert state["teardown"]["leftovers"] == []


def kill_rank_case(home, launcher: str, target: str = "local") -> None:
    victim = world(launcher) - 1
    run = submit(launcher, raise_=False, name=f"kill-{launcher}", target=target)
    records = all_up(run, world(launcher))
    time.sleep(0.3)  # a few collectives in: every peer is now waiting on the victim
    killed_at = time.time()
    os.kill(records[victim]["pid"], signal.SIGKILL)
    state = finished(run)
    check_failed(home, run, state, victim)
    # The signal is named where the rank's zombie or the launcher's words tell it: always
    # here; over ssh, horovodrun only hears the remote shell's exit code 255.
    known = "SIGKILL" if target == "local" or launcher != "horovod" else ""
    assert state["error"].startswith(
        f"rank {victim} ended without recording an exit (killed by {known}"
    ), state["error"]
    failure = state["failure"]
    assert failure["rank"] == victim and failure["how"] == "killed", failure
    exited = run.store.rank_records(run.id)[victim]["exited"]
    assert killed_at <= exited < killed_at + 5, (killed_at, exited)
    nothing_left(run)
    check_mode(run, launcher)


def exception_case(home, launcher: str, target: str = "local") -> None:
    victim = world(launcher) - 1
    run = submit(launcher, raise_=True, name=f"raise-{launcher}", target=target)
    all_up(run, world(launcher))
    state = finished(run)
    check_failed(home, run, state, victim)
    assert state["error"] == f"RuntimeError: rank {victim} gave up", state["error"]
    assert state["failure"]["how"] == "exception"
    assert f"rank {victim} gave up" in state["traceback"]
    nothing_left(run)
    check_mode(run, launcher)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigkill_a_rank_names_it(home, launcher):
    kill_rank_case(home, launcher)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_exception_in_a_rank_names_it(home, launcher):
    exception_case(home, launcher)


def kill_once_up(launcher: str, whom: str) -> api.Run:
    """A run whose ``whom`` ("supervisor" or "launcher") gets SIGKILL once every rank is up;
    a hot run's launcher is the warm pool that forked its ranks."""
    run = submit(launcher, raise_=False, name=f"kill-{whom}-{launcher}")
    all_up(run, world(launcher))
    check_mode(run, launcher)
    victim = (
        run.state["launcher"]["hot"]["pool"]
        if (launcher, whom) == ("hot", "launcher")
        else run.state[whom]["pid"]
    )
    os.kill(victim, signal.SIGKILL)
    return run


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigkill_the_supervisor_leaves_a_lost_run_and_no_rank(home, launcher):
    run = kill_once_up(launcher, "supervisor")
    # The launcher gets SIGTERM from the kernel (PR_SET_PDEATHSIG) and ends its ranks.
    nothing_left(run)
    state = wait_for(
        lambda: (s := Store(home).read_state(run.id))["status"] == "lost" and s,
        timeout=30,
        what=f"{run.id} to read as lost",
    )
    assert state.get("failed_rank") is None
    row = listed(home, run.id)
    assert row["status"] == "lost" and row["failed_rank"] is None, row
    assert index_row(home, run.id)["status"] in ("running", "lost")


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_sigkill_the_launcher_names_the_launcher(home, launcher):
    run = kill_once_up(launcher, "launcher")
    state = finished(run)
    assert state["launcher"]["exit_code"] == -signal.SIGKILL
    if launcher == "hot":
        check_failed(home, run, state, None)
        assert state["error"].startswith(
            f"the warm rank pool (pid {state['launcher']['hot']['pool']}) was killed by "
            "SIGKILL before any rank failed"
        ), state["error"]
    elif launcher == "python":  # the launcher is rank 0 itself
        check_failed(home, run, state, 0)
        assert state["error"].startswith(
            "rank 0 ended without recording an exit (killed by SIGKILL)"
        ), state["error"]
    else:
        check_failed(home, run, state, None)
        assert state["error"].startswith(
            f"the launcher ({launcher}) was killed by SIGKILL before any rank failed"
        ), state["error"]
        assert state["failure"] == {
            "rank": None,
            "how": "killed",
            "signal": "SIGKILL",
            "at": state["failure"]["at"],
        }
    nothing_left(run)


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_ssh_sigkill_a_rank_names_it(mpi_pair, home, launcher):
    kill_rank_case(home, launcher, target="pair")


@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_ssh_exception_in_a_rank_names_it(mpi_pair, home, launcher):
    exception_case(home, launcher, target="pair")


# -- a full disk -----------------------------------------------------------------------------


@pytest.fixture
def small_home(home):
    """``home`` on a 16 MiB tmpfs of its own, to be filled while a run runs. At the end, even
    on failure, whatever its runs left is ended (and reported), then it is unmounted."""
    home.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(home)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode:
        pytest.fail(f"a small tmpfs for the run store needs root and mount(8): {mounted.stderr}")
    leaks: dict[str, list[str]] = {}
    try:
        yield home
    finally:
        starter.release_spare()
        for run_dir in (home / "runs").glob("[!.]*"):
            left = wait_for_gone(run_dir.name)
            if left:
                leaks[run_dir.name] = [procs.describe(p) for p in left]
                procs.signal_pids(left, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while subprocess.run(["umount", str(home)], capture_output=True).returncode:
            if time.monotonic() > deadline:
                subprocess.run(["umount", "-l", str(home)], check=True)
                break
            time.sleep(0.2)
    assert not leaks, f"processes left behind: {leaks}"


def wait_for_gone(run_id: str, timeout: float = 15) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := leftover_pids(run_id)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def fill(path) -> None:
    """Write zeros to ``path`` until the file system says it is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        while True:
            os.write(fd, b"\0" * (1 << 16))
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


DISK_LOOP = """
import time
from jupyter_trainer import runtime as jt
jt.log(step=0, up=1)
for step in range(1, 100_000):
    if WRITES:
        print(f"step {step}", flush=True)
        jt.log(step=step, loss=1.0 / step)
    time.sleep(0.02)
"""


@pytest.mark.parametrize("writes", [True, False], ids=["ranks-write", "quiet-ranks"])
def test_a_full_disk_fails_the_run_as_disk_full_and_ends_its_ranks(small_home, writes):
    """The run store's file system fills while a real run runs, written by the ranks or not:
    the supervisor survives, records ``failed: disk full (path)`` (through the room it
    reserved), ends every process, and no reader ever sees the run lost or crashed."""
    run = api.submit(DISK_LOOP.replace("WRITES", str(writes)), procs=2, hot=False, name="disk-full")
    all_up(run, 2)
    supervisor = run.state["supervisor"]
    fill(small_home / "filler")
    seen = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        seen.append(run.status)  # what a reader sees meanwhile: never an exception, never lost
        if seen[-1] in ("completed", "failed", "canceled", "lost"):
            break
        time.sleep(0.05)
    state = run.state
    assert state["status"] == "failed" and "lost" not in seen, (seen[-5:], state.get("error"))
    assert state["error"].startswith(f"disk full ({small_home}"), state["error"]
    assert "rerun" in state["error"] and state["teardown"]["leftovers"] == []
    wait_for(
        lambda: not procs.is_alive(supervisor["pid"], supervisor["start_ticks"]),
        timeout=30,
        what="the supervisor to exit",
    )
    nothing_left(run)
    shown = cli("show", run.id, timeout=60)
    assert shown.returncode == 0 and "disk full" in shown.stdout, (shown.stdout, shown.stderr)
    assert index_row(small_home, run.id)["status"] == "failed"
    assert not list(run.path.glob(".state-spare-*"))  # the reserve is given back


WATCHED = """
import json, os, sys, time
from jupyter_trainer.rankside.observe import death_watch
path = sys.argv[1]
death_watch.write_json(path, {"rank": 1, "local_rank": 1, "pid": os.getpid(), "attempt": 0})
death_watch.watch_death(path)
print("watched", flush=True)
time.sleep(60)
"""


def test_a_restarted_rank_moving_the_record_aside_keeps_its_watchers_evidence(tmp_path):
    # torchrun started rank 1 again before the watcher of its first process wrote how that
    # one ended: the new process moved the record aside and wrote its own.
    path = tmp_path / "rank-1.json"
    first = subprocess.Popen([sys.executable, "-c", WATCHED, str(path)], stdout=subprocess.PIPE)
    try:
        assert first.stdout.readline() == b"watched\n"
        with death_watch.records_locked(str(tmp_path)):
            os.replace(path, tmp_path / "rank-1.attempt-0.json")
            death_watch.write_json(str(path), {"rank": 1, "pid": 1, "attempt": 1})
        first.send_signal(signal.SIGKILL)
        kept = tmp_path / "rank-1.attempt-0.json"
        wait_for(lambda: "exited" in json.loads(kept.read_text()), timeout=10)
    finally:
        first.kill()
        first.wait()
    assert json.loads(kept.read_text())["signal"] == "SIGKILL"
    assert json.loads(path.read_text()) == {"rank": 1, "pid": 1, "attempt": 1}


def test_a_peer_still_on_its_earlier_attempt_is_not_taken_as_gone(tmp_path):
    # Rank 0 of attempt 1 fails while rank 1's record is still attempt 0's, whose process
    # torchrun ended to start it again: that process being gone proves nothing.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = death_watch.hostname()
    mine = {"rank": 0, "pid": os.getpid(), "host": host, "attempt": 1}
    death_watch.write_json(str(tmp_path / "rank-0.json"), mine)
    peer = {"rank": 1, "pid": dead.pid, "host": host, "attempt": 0}
    death_watch.write_json(str(tmp_path / "rank-1.json"), peer)
    chain = [os.getppid()]
    assert death_watch.failure_evidence(str(tmp_path), 0, chain) == {}
    death_watch.write_json(str(tmp_path / "rank-1.json"), {**peer, "attempt": 1})
    assert death_watch.failure_evidence(str(tmp_path), 0, chain) == {"peers_gone": [1]}
