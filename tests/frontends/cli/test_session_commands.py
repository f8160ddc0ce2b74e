"""``jupyter-trainer session ...`` and ``jupyter-trainer sessions`` as a user runs them (a
real process each), on a live session of two Gloo ranks started by torchrun."""

from __future__ import annotations

import json
import os
import signal

import pytest
from conftest import wait_for
from support.jt_cli import cli
from support.sessions import assert_ended, session_home  # noqa: F401 (fixture)

from jupyter_trainer.api import runs
from jupyter_trainer.api.sessions import session
from jupyter_trainer.store import TERMINAL

# One worker runs the module, so its tests share one session.
pytestmark = pytest.mark.xdist_group("cli-sessions")

PREFIX = "jupyter-trainer: error: "


@pytest.fixture(scope="module")
def clis(session_home):
    """The session ``clis``, started by ``session start``."""
    started = cli("session", "start", "clis", "--procs", "2", "--idle", "600")
    assert started.returncode == 0, started.stderr
    live = session("clis", home=session_home)
    assert started.stdout.startswith(f"session clis ready: 2 ranks (run {live.id})"), started
    yield live
    if live.status not in TERMINAL:
        assert live.stop() == "completed"
    assert_ended(live)


def ok(*args: str) -> str:
    done = cli(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def failed(*args: str) -> str:
    """The one-line error of a command that exits 2."""
    done = cli(*args)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    # a message, not the command's own traceback (a rank's cites the cell, not a file)
    assert done.stderr.startswith(PREFIX) and 'File "' not in done.stderr, done.stderr
    return done.stderr.removeprefix(PREFIX)


def test_run_c_prints_each_ranks_output_and_pull_reads_it_back(clis):
    code = "import torch.distributed as dist\nr = dist.get_rank() + 7\nprint('cli', r)"
    out = ok("session", "run", "clis", "-c", code)
    assert sorted(out.splitlines()) == ["[rank 0] cli 7", "[rank 1] cli 8"]
    assert ok("session", "pull", "clis", "r") == "7\n"
    assert ok("session", "pull", "clis", "r", "--rank", "1") == "8\n"
    assert ok("session", "pull", "clis", "r", "--all") == "[7, 8]\n"


def test_push_key_value_sets_literals_on_every_rank(clis):
    out = ok("session", "push", "clis", "a=3", "b=hello", "c=[1, 2]")
    assert out == "pushed a, b, c to session clis\n"
    out = ok("session", "run", "clis", "-c", "print(a + 1, b, sum(c))")
    assert sorted(out.splitlines()) == ["[rank 0] 4 hello 3", "[rank 1] 4 hello 3"]


def test_push_of_a_bare_name_is_a_clear_error(clis):
    before = clis.files.count()
    assert failed("session", "push", "clis", "lr") == "push lr: outside a notebook, give lr=VALUE\n"
    assert "KEY a Python name" in failed("session", "push", "clis", "1x=2")
    assert clis.files.count() == before


def test_a_failing_cell_exits_nonzero_with_the_ranks_traceback(clis):
    code = "import torch.distributed as dist\nif dist.get_rank() == 1:\n    raise ValueError('bad')"
    error = failed("session", "run", "clis", "-c", code)
    assert "rank 1:" in error and "ValueError: bad" in error and "the session goes on" in error
    assert ok("session", "pull", "clis", "1 + 1") == "2\n"


def test_sessions_lists_the_session_as_a_table_and_as_json(clis):
    table = ok("sessions").splitlines()
    assert table[0].split() == ["NAME", "RUN", "RANKS", "TARGET", "STATUS", "REQUESTS"]
    row = next(line.split() for line in table[1:] if line.split()[0] == "clis")
    assert row[1:5] == [clis.id, "2", "local", "running"], table
    listed = [json.loads(line) for line in ok("sessions", "--json").splitlines()]
    mine = next(r for r in listed if r["name"] == "clis")
    assert mine["run"] == clis.id and mine["ranks"] == 2 and mine["status"] == "running"
    assert mine["cells"] == clis.files.count() and mine["age_s"] >= 0


@pytest.mark.slow
def test_save_as_names_the_run_that_replays_the_session(clis):
    ok("session", "run", "clis", "-c", "saved_value = 5\nprint('to save', saved_value)")
    out = ok("session", "save", "clis", "--as", "clis-replay", "--wait")
    run_id = out.split(" saved as run ", 1)[1].split(";", 1)[0]
    assert out == (
        f"session clis saved as run {run_id}; `jupyter-trainer rerun {run_id}` replays it\n"
    )
    saved = runs.get_run(run_id)
    assert saved.name == "clis-replay" and saved.status == "completed"
    assert "to save 5" in saved.logs(1)


@pytest.mark.slow
def test_start_stop_and_the_errors_of_names(session_home):
    assert "no session named 'nosuch'" in failed("session", "pull", "nosuch", "x")
    before = sorted(p.name for p in session_home.glob("runs/*"))
    for bad in ("a/b", ""):
        assert "invalid session name" in failed("session", "start", bad, "--procs", "2")
    assert sorted(p.name for p in session_home.glob("runs/*")) == before
    ok("session", "start", "ends", "--procs", "2", "--idle", "600")
    live = session("ends", home=session_home)
    assert ok("session", "stop", "ends") == f"session ends stopped (run {live.id}: completed)\n"
    assert_ended(live)
    assert "no session named 'ends'" in failed("session", "pull", "ends", "x")
    assert not [
        r for r in map(json.loads, ok("sessions", "--json").splitlines()) if r["name"] == "ends"
    ]


def test_a_dead_rank_is_named_and_restart_rank_brings_it_back(clis):
    ok("session", "run", "clis", "-c", "kept_here = 9")
    os.kill(int((clis.files.folder / "ready.1").read_text()), signal.SIGKILL)
    wait_for(lambda: 1 in clis.dead(), 15, what="rank 1 named dead")
    error = failed("session", "run", "clis", "-c", "print('never')")
    assert "rank 1 killed by SIGKILL" in error and "restart clis --rank 1" in error, error
    mine = next(
        r for r in map(json.loads, ok("sessions", "--json").splitlines()) if r["name"] == "clis"
    )
    assert mine["dead_ranks"] == [1] and mine["restarted_ranks"] == []
    out = ok("session", "restart", "clis", "--rank", "1")
    assert (
        "session clis: rank 1 restarted, in a new process group with rank 0, which kept its namespace"
        in out
    ), out
    assert "The namespace of rank 1 is empty: it lost" in out and "kept_here" in out, out
    code = "import torch, torch.distributed as dist\nt = torch.ones(1)\ndist.all_reduce(t)\nprint(t.item())"
    assert sorted(ok("session", "run", "clis", "-c", code).splitlines()) == [
        "[rank 0] 2.0",
        "[rank 1] 2.0",
    ]
    assert ok("session", "pull", "clis", "kept_here") == "9\n"
    mine = next(
        r for r in map(json.loads, ok("sessions", "--json").splitlines()) if r["name"] == "clis"
    )
    assert mine["dead_ranks"] == [] and mine["restarted_ranks"] == [1]
