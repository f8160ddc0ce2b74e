"""Live sessions for the tests: a run store kept for a whole module (``session_home``), a
session started in it and stopped after (``live_session``), the check that a stopped
session left none of its rank processes, and one session's whole life on a target of
several nodes (``check_a_session_on``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
from conftest import leftover, leftover_pids, wait_for

from jupyter_trainer.api.sessions import Session, start_session
from jupyter_trainer.core.errors import CellFailed
from jupyter_trainer.rankside import hotstart as pool
from jupyter_trainer.store import HOME_ENV, TERMINAL
from jupyter_trainer.supervisor import starter


@pytest.fixture(scope="module")
def session_home(tmp_path_factory) -> Iterator[Path]:
    """A run store for the module's tests, ``$JUPYTER_TRAINER_HOME`` while they run (and
    no warm pool: torchrun starts every rank); every run left in it is checked for live
    processes at the end."""
    path = tmp_path_factory.mktemp("sessions") / "jt-home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(HOME_ENV, str(path))
        mp.setenv("JT_HOT", "0")  # torchrun starts the ranks, the CLI's included
        yield path
        starter.release_spare()
        pool.stop_pools(path)
        runs = [d.name for d in (path / "runs").glob("*") if not d.name.startswith(".")]
        for run_id in runs:
            wait_for(lambda r=run_id: not leftover_pids(r), 15, what=f"the processes of {run_id}")


def rank_pids(session: Session) -> list[int]:
    """The pids the run's rank records (``ranks/rank-<r>.json``) name."""
    found = []
    for record in sorted((session.record.path / "ranks").glob("rank-*.json")):
        pid = json.loads(record.read_text()).get("pid")
        if pid:
            found.append(int(pid))
    return found


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` that still run (a zombie does not)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def assert_ended(session: Session, status: str = "completed") -> None:
    """``session``'s run has ``status`` and no process of its ranks is left."""
    wait_for(lambda: session.status in TERMINAL, 60, what=f"the end of {session.id}")
    assert session.status == status, session.record.state
    pids = rank_pids(session)
    assert len(pids) == session.world_size, pids
    wait_for(lambda: not alive(pids), 15, what=f"the ranks {pids} to exit")
    wait_for(lambda: not leftover_pids(session.id), 15, what="the run's processes to exit")


@contextmanager
def live_session(name: str, home: Path, **options: Any) -> Iterator[Session]:
    """A 2-rank session of torchrun-started Gloo ranks on this machine, stopped after (its
    end checked unless the test ended it itself)."""
    options = {"procs": 2, "hot": False, "backend": "gloo", "idle": 600, **options}
    session = start_session(name, home=home, **options)
    try:
        yield session
    finally:
        if session.status not in TERMINAL:
            assert session.stop() == "completed", session.record.state
            assert_ended(session)


def check_a_session_on(target: str, nodes: int, procs: int, capsys: Any) -> None:
    """A session on ``target`` (``nodes`` x ``procs`` ranks) joins its ranks, runs cells with
    notebook values, pulls from one rank and all, takes a push, names a rank whose cell
    raised (at the cell's line) and goes on, and stops with nothing left."""
    live = start_session("remote", target=target, nodes=nodes, procs=procs, timeout=180)
    world = nodes * procs
    total = world * (world + 1) / 2
    try:
        assert live.files.ready() == set(range(world))
        live.run(
            "import torch, torch.distributed as dist\n"
            "t = torch.ones(1) * (dist.get_rank() + 1)\n"
            "dist.all_reduce(t)\n"
            "print('sum', t.item(), 'from', origin)\n",
            namespace={"origin": "notebook"},
        )
        out = capsys.readouterr().out
        for rank in range(world):
            assert f"[rank {rank}] sum {total} from notebook" in out, out
        assert live.pull("t.item()", rank=None) == [total] * world
        live.push(scale=10)
        live.run("t = t * scale")
        assert live.pull("t.item()", rank=world - 1) == total * 10
        with pytest.raises(CellFailed, match=f"rank {world - 1}:") as failed:
            live.run(f"if dist.get_rank() == {world - 1}:\n    raise KeyError('here')\n", cell=4)
        assert failed.value.ranks == [world - 1] and "Cell In [4], line 2" in str(failed.value)
        assert live.pull("t.item()") == total * 10  # the session went on
    finally:
        status = live.stop()
    assert status == "completed", live.record.state
    assert leftover(live.id) == []
