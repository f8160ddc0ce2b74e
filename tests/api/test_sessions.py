"""Live sessions through the Python API (``jupyter_trainer.api.sessions``), end to end: two
Gloo ranks started by torchrun on this machine that stay alive across cells. The tests that
only run cells share one session (``shared``); those that end a session start their own."""

from __future__ import annotations

import _thread
import io
import os
import signal
import stat
import subprocess
import sys
import threading
import time

import pytest
from conftest import wait_for
from support.sessions import (  # noqa: F401 (fixture)
    assert_ended,
    live_session,
    rank_pids,
    session_home,
)

from jupyter_trainer.api import runs
from jupyter_trainer.api.sessions import session, start_session
from jupyter_trainer.core.errors import CellFailed, RunStateError, SessionEnded, SpecError
from jupyter_trainer.rankside.rank.session_loop import socket_name
from jupyter_trainer.store import HOME_ENV
from jupyter_trainer.store.sessions import send

# One worker runs the module, so its tests share one session.
pytestmark = pytest.mark.xdist_group("api-sessions")


@pytest.fixture(scope="module")
def shared(session_home):
    with live_session("shared", session_home) as live:
        yield live


def ran(live, code: str, **options) -> list[str]:
    """The lines ``code`` printed on the session's ranks, sorted."""
    out = io.StringIO()
    live.run(code, stream=out, **options)
    return sorted(out.getvalue().splitlines())


# -- running cells --------------------------------------------------------------------------
def test_each_ranks_output_comes_back_prefixed_and_bound_names_stay(shared):
    code = "import torch.distributed as dist\nmy_rank = dist.get_rank()\nprint('hello', my_rank)"
    assert ran(shared, code) == ["[rank 0] hello 0", "[rank 1] hello 1"]
    # my_rank is the session's, so the notebook's value of that name does not replace it
    again = ran(shared, "print('again', my_rank * 10, lr)", namespace={"lr": 0.1, "my_rank": 99})
    assert again == ["[rank 0] again 0 0.1", "[rank 1] again 10 0.1"]


def test_a_cell_failing_on_one_rank_names_it_at_the_cells_line_and_the_session_goes_on(shared):
    code = "import torch.distributed as dist\nif dist.get_rank() == 1:\n    1 / 0\n"
    with pytest.raises(CellFailed) as info:
        shared.run(code, cell=12, first_line=2, stream=io.StringIO())
    failed = info.value
    assert failed.ranks == [1] and not failed.interrupted
    message = str(failed)
    assert "rank 1:" in message and "rank 0" not in message, message
    assert "Cell In [12], line 4" in message and "ZeroDivisionError" in message, message
    assert ran(shared, "print('still here')") == ["[rank 0] still here", "[rank 1] still here"]


# -- pull and push ---------------------------------------------------------------------------
def test_pull_one_rank_or_all_and_its_clear_errors(shared):
    shared.run(
        "import threading\nimport torch.distributed as dist\n"
        "pulled = dist.get_rank() + 40\nlock = threading.Lock()\nbig = b'x' * 4096\n",
        stream=io.StringIO(),
    )
    assert shared.pull("pulled") == 40
    assert shared.pull("pulled", rank=1) == 41
    assert shared.pull("pulled", rank=None) == [40, 41]
    with pytest.raises((CellFailed, SpecError)) as info:
        shared.pull("lock")
    assert "'lock'" in str(info.value) and "cannot be sent back" in str(info.value)
    with pytest.raises((CellFailed, SpecError)) as info:
        shared.pull("big", max_bytes=1000)
    assert "'big'" in str(info.value) and "over the limit of 1000" in str(info.value)
    with pytest.raises(SpecError, match="rank 5"):
        shared.pull("pulled", rank=5)


def test_a_pulled_instance_of_a_class_a_cell_defined_names_the_fix(shared):
    shared.run("class Point:\n    x = 3\npoint = Point()\n", stream=io.StringIO())
    with pytest.raises(SpecError) as info:
        shared.pull("point", rank=1)
    message = str(info.value)
    assert "pull 'point': rank 1's value" in message and "'Point'" in message, message
    assert "define it in the notebook too" in message, message
    assert shared.pull("vars(Point)['x']") == 3  # a plain part of it comes back


def test_a_pull_that_is_no_expression_starts_nothing(shared):
    requests = shared.files.requests
    before = sorted(os.listdir(requests))
    with pytest.raises(SpecError, match="not an expression"):
        shared.pull("pulled +")
    with pytest.raises(SpecError, match="not an expression"):
        shared.pull("x = 1")
    assert sorted(os.listdir(requests)) == before


def test_pushed_values_are_read_by_the_next_cell_and_win_over_the_notebook(shared):
    shared.push(pushed_lr=0.5, pushed_list=[1, 2])
    lines = ran(shared, "print(pushed_lr * 2, sum(pushed_list))", namespace={"pushed_lr": 9})
    assert lines == ["[rank 0] 1.0 3", "[rank 1] 1.0 3"]
    with pytest.raises(SpecError, match="cannot be pickled") as info:
        shared.push(unpicklable=threading.Lock())
    assert "push unpicklable" in str(info.value)


# -- interrupting ----------------------------------------------------------------------------
SLEEPER = "import time\nprint('sleeping', flush=True)\ntime.sleep(60)\nprint('woke')\n"


def test_interrupt_from_another_handle_ends_the_cell_and_the_session_goes_on(shared):
    out = io.StringIO()
    ended: list[BaseException | None] = []

    def run_sleeper() -> None:
        try:
            shared.run(SLEEPER, stream=out)
            ended.append(None)
        except BaseException as exc:
            ended.append(exc)

    runner = threading.Thread(target=run_sleeper, daemon=True)
    runner.start()
    wait_for(lambda: out.getvalue().count("sleeping") == 2, 30, what="both ranks in the cell")
    began = time.monotonic()
    session(shared.name, home=shared.record.store.home).interrupt()
    runner.join(15)
    assert not runner.is_alive(), "run still waits 15 s after the interrupt"
    assert time.monotonic() - began < 15  # not the 60 s the cell sleeps
    failed = ended[0]
    assert isinstance(failed, CellFailed), failed
    assert failed.interrupted and failed.ranks == [0, 1], str(failed)
    assert "KeyboardInterrupt" in str(failed) and "woke" not in out.getvalue()
    assert ran(shared, "print('after')") == ["[rank 0] after", "[rank 1] after"]


def test_a_datagram_alone_interrupts_nothing(shared):
    """The ranks' sockets are open to anyone on the host: an "interrupt N" sent there only
    makes them look for the owner's interrupt file, which is not there."""
    out = io.StringIO()
    code = "import time\nprint('dozing', flush=True)\ntime.sleep(1.5)\nprint('done')\n"
    runner = threading.Thread(target=shared.run, args=(code,), kwargs={"stream": out})
    runner.start()
    wait_for(lambda: out.getvalue().count("dozing") == 2, 30, what="both ranks in the cell")
    n = shared.files.count()
    for rank in shared.ranks:
        send(socket_name(shared.id, rank), f"interrupt {n}".encode())
    runner.join(30)
    assert out.getvalue().count("done") == 2, out.getvalue()


def test_keyboard_interrupt_in_the_waiting_thread_interrupts_the_ranks(shared):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("interrupt_main reaches the main thread only")
    out = io.StringIO()

    def interrupt_when_sleeping() -> None:
        wait_for(lambda: out.getvalue().count("sleeping") == 2, 30, what="both ranks in the cell")
        _thread.interrupt_main()

    threading.Thread(target=interrupt_when_sleeping, daemon=True).start()
    began = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        shared.run(SLEEPER, stream=out)
    assert time.monotonic() - began < 20 and "woke" not in out.getvalue()
    assert ran(shared, "print('after')") == ["[rank 0] after", "[rank 1] after"]


# -- the session's files ---------------------------------------------------------------------
def test_the_session_folder_is_the_owners_alone(shared):
    shared.push(secret_token="s3cret")
    assert shared.pull("secret_token") == "s3cret"
    folder = shared.record.path / "session"
    folders = [folder, *(p for p in folder.rglob("*") if p.is_dir())]
    assert {folder / "requests", folder / "results"} <= set(folders)
    for path in folders:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    # and every file in them is the owner's alone too: requests, cells, pushed values, results
    values = [p for p in folder.rglob("*") if p.is_file() and p.parent != folder]
    assert {p.suffix for p in values} >= {".json", ".pkl"}, values
    for path in values:
        assert not stat.S_IMODE(path.stat().st_mode) & 0o077, path


def test_a_session_whose_cells_read_a_secret_is_not_saved(shared):
    """A saved run's snapshot keeps what the cells read, for anyone who can read the run: a
    secret among them (by its name or its shape) refuses the save, and nothing starts."""
    token = "hf_" + "x" * 34
    ran(shared, "print('got', len(hf_token))", namespace={"hf_token": token})
    before = {p.name for p in (shared.record.store.home / "runs").iterdir()}
    with pytest.raises(SpecError, match="not saved: its cells read secrets") as refused:
        shared.save()
    assert "hf_token" in str(refused.value) and token not in str(refused.value)
    assert {p.name for p in (shared.record.store.home / "runs").iterdir()} == before


# -- save and rerun --------------------------------------------------------------------------
TRAIN = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=lr)
gen = torch.Generator().manual_seed(dist.get_rank())
X = torch.randn(64, 4, generator=gen)
Y = X @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
def train(steps):
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(X) - Y) ** 2).mean()
        loss.backward()
        opt.step()
    return loss.item()
loss = train(5)
"""
TRAIN_ON = """
from jupyter_trainer import runtime as jt
for group in opt.param_groups:
    group["lr"] = lr
loss = train(5)
jt.log(final_loss=loss)
"""


@pytest.mark.slow
def test_save_replays_the_cells_that_ran_well_and_rerun_repeats_them(home):
    with live_session("trainer", home) as live:
        live.run(TRAIN, namespace={"lr": 0.05}, cell=1, stream=io.StringIO())
        first = live.pull("loss")
        with pytest.raises(CellFailed):
            live.run("raise ValueError('not saved')", cell=2, stream=io.StringIO())
        live.run(TRAIN_ON, namespace={"lr": 0.2}, cell=3, stream=io.StringIO())
        assert live.pull("opt.param_groups[0]['lr']") == 0.2
        final = live.pull("loss")
        assert final != first
        saved = live.save("trainer-saved", wait=True)
    assert saved.status == "completed" and saved.name == "trainer-saved"
    assert saved.metrics()["final_loss"][-1][1] == final
    replayed = [line for line in saved.logs(0).splitlines() if "replaying" in line]
    assert replayed == ["[jt] replaying Cell In [1]", "[jt] replaying Cell In [3]"], replayed
    again = runs.rerun(saved.id, wait=True, home=home)
    assert again.status == "completed"
    assert again.metrics()["final_loss"][-1][1] == final


# -- starting, attaching, ending -------------------------------------------------------------
def test_invalid_names_start_nothing(home):
    for name in ("a/b", "", "-x", "a" * 65):
        with pytest.raises(SpecError, match="invalid session name"):
            start_session(name, procs=2, home=home)
        with pytest.raises(SpecError, match="invalid session name"):
            session(name, home=home)
    assert not list(home.glob("runs/*"))


ATTACH = """
from jupyter_trainer.api.sessions import session
live = session("life")
live.run("attached = seen * 2\\nprint('attached', attached)", namespace={"seen": 21})
"""


def test_one_session_per_name_attach_from_a_new_process_stop_and_after(home):
    with live_session("life", home) as live:
        with pytest.raises(SpecError, match="is running") as info:
            start_session("life", procs=2, home=home)
        assert live.id in str(info.value)
        attached = subprocess.run(
            [sys.executable, "-c", ATTACH],
            env={**os.environ, HOME_ENV: str(home)},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert attached.returncode == 0, attached.stderr
        lines = sorted(attached.stdout.splitlines())
        assert lines == ["[rank 0] attached 42", "[rank 1] attached 42"], attached.stdout
        assert live.pull("attached", rank=None) == [42, 42]
        assert live.stop() == "completed"
        assert_ended(live)
        for act in (
            lambda: live.run("x = 1"),
            lambda: live.pull("attached"),
            lambda: live.push(y=1),
        ):
            with pytest.raises(SessionEnded) as ended:
                act()
            assert f"session 'life' (run {live.id}) has ended: stopped by" in str(ended.value)
        with pytest.raises(SpecError, match="no session named 'life'"):
            session("life", home=home)


def test_an_idle_session_ends_itself(home):
    with live_session("idler", home, idle=3) as live:
        wait_for(lambda: live.status == "completed", 60, what="the idle session's end")
        assert live.files.stopped() == "idle for 3 s"
        assert_ended(live)
        with pytest.raises(SessionEnded, match="idle for 3 s"):
            live.run("x = 1")


ALL_REDUCE = (
    "import torch, torch.distributed as dist\n"
    "t = torch.ones(1) * (dist.get_rank() + 1)\n"
    "dist.all_reduce(t)\n"
    "print('sum', t.item(), 'of', dist.get_world_size())\n"
)


def test_a_rank_that_dies_is_named_and_restart_rank_brings_it_back_the_others_kept(home):
    with live_session("dies", home) as live:
        live.run("import torch.distributed as dist\nkept = 100 + dist.get_rank()\n")
        # a rank whose cell ends its process fails that cell, named; the session goes on
        with pytest.raises(CellFailed) as info:
            live.run("import os\nif dist.get_rank() == 1:\n    os._exit(3)\n", stream=io.StringIO())
        assert info.value.ranks == [1] and "rank 1 exited with 3" in str(info.value)
        assert "restart dies --rank 1" in str(info.value), info.value
        live.restart(rank=1, stream=io.StringIO())
        assert ran(live, ALL_REDUCE) == ["[rank 0] sum 3.0 of 2", "[rank 1] sum 3.0 of 2"]
        # a rank's process killed between cells: named, refused to cells, pulled around
        pid = int((live.files.folder / "ready.1").read_text())
        assert pid in rank_pids(live)  # its stack and stalls are read from that process
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: 1 in live.dead(), 15, what="rank 1 named dead")
        assert live.dead()[1]["how"] == "killed by SIGKILL"
        with pytest.raises(RunStateError, match="rank 1 killed by SIGKILL") as refused:
            live.run("print('never')")
        assert "restart dies --rank 1" in str(refused.value)
        assert live.pull("kept", rank=0) == 100  # a survivor answers meanwhile
        with pytest.raises(SpecError, match="alive"):
            live.restart(rank=0)
        live.restart(rank=1, stream=io.StringIO())
        assert live.dead() == {} and live.status == "running"
        assert ran(live, ALL_REDUCE) == ["[rank 0] sum 3.0 of 2", "[rank 1] sum 3.0 of 2"]
        assert live.pull("kept", rank=0) == 100  # the survivor kept its namespace
        with pytest.raises(CellFailed, match="NameError: name 'kept'"):
            live.pull("kept", rank=1)  # the restarted rank's is empty, as recorded
        restarts = live.restarts()
        assert [(r["ranks"], r["generation"]) for r in restarts] == [([1], 1), ([1], 2)]
        assert restarts[1]["how"] == {"1": "killed by SIGKILL"} and "kept" in restarts[1]["lost"]


def test_a_rank_is_stalled_only_while_a_cell_runs(home):
    """Between cells a session's ranks wait for work and none is stalled; a cell that logs
    nothing for longer than the stall timeout has its ranks named, at the cell's line."""
    with live_session("stalls", home, stall_timeout=3) as live:
        time.sleep(6)  # twice the timeout, idle
        assert not live.record.state.get("stalled"), live.record.state.get("stalled")
        cell = threading.Thread(
            target=live.run,
            args=("import time\ntime.sleep(10)\n",),
            kwargs={"cell": 7, "stream": io.StringIO()},
        )
        cell.start()
        try:
            stalled = wait_for(
                lambda: (lambda s: s if len(s) == 2 else None)(
                    live.record.state.get("stalled") or []
                ),
                20,
                what="both ranks named stalled while the cell runs",
            )
        finally:
            cell.join(30)
        assert [s["rank"] for s in stalled] == [0, 1], stalled
        assert {(s["frame"]["file"], s["frame"]["line"]) for s in stalled} == {("Cell In [7]", 2)}
        # the stack shows the cell's frames; the session loop's are counted as the package's
        assert all("session_loop" not in s["stack"] for s in stalled), stalled[0]["stack"]


def test_a_nan_of_a_watched_metric_ends_the_session_naming_it(home):
    with live_session("nans", home, stop_on_nan=["loss"]) as live:
        live.run("from jupyter_trainer import runtime as jt\njt.log(step=0, loss=1.0)\n")
        with pytest.raises(SessionEnded, match="loss") as ended:
            live.run(
                "import time\njt.log(step=1, loss=float('nan'))\njt.flush()\ntime.sleep(30)\n",
                stream=io.StringIO(),
            )
        assert_ended(live, "failed")
    assert "nans" in str(ended.value)
