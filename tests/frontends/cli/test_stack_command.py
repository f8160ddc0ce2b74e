"""``jupyter-trainer stack`` and ``%train stack``: each live rank's Python stack, named by rank,
host and pid, from a real two-rank run on the local target."""

from __future__ import annotations

from conftest import wait_for
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside import hotstart as pool

WAITING = """\
import time
from jupyter_trainer import runtime as jt

def waiting_in_a_named_function():
    print("ready", flush=True)
    time.sleep(120)

waiting_in_a_named_function()
"""


def test_stack_names_each_rank_its_host_and_pid(ip, home, tmp_path, capsys):
    script = tmp_path / "wait.py"
    script.write_text(WAITING)
    run = api.submit(script=script, procs=2, stall_timeout=0)
    wait_for(
        lambda: run.status == "running" and all("ready" in run.logs(r) for r in (0, 1)),
        timeout=60,
        what="both ranks waiting",
    )
    records = run.store.rank_records(run.id)
    alive = pool.leftover_pids(run.id, run.path)  # the ranks, however they were started
    assert all(records[r]["pid"] in alive for r in (0, 1))

    done = cli("stack", run.id)
    assert done.returncode == 0, done.stderr
    for rank in (0, 1):
        assert (
            f"rank {rank} ({records[rank]['host']}, pid {records[rank]['pid']}):\n" in done.stdout
        )
    assert done.stdout.count("waiting_in_a_named_function") >= 2
    one = cli("stack", run.id, "--rank", "1")
    assert one.returncode == 0 and one.stdout.startswith(f"rank 1 ({records[1]['host']}, pid ")
    assert "rank 0 (" not in one.stdout
    assert list(run.stacks(rank=0)) == [0]

    capsys.readouterr()
    assert ip.run_line_magic("train", f"stack {run.id} --rank 0") is None
    shown = capsys.readouterr().out
    assert shown.startswith(f"rank 0 ({records[0]['host']}, pid {records[0]['pid']}):\n")
    assert "waiting_in_a_named_function" in shown

    missing = cli("stack", run.id, "--rank", "5")
    assert missing.returncode == 2 and "no rank 5" in missing.stderr
    run.cancel()
    ended = cli("stack", run.id)
    assert ended.returncode == 2 and "it has no live ranks" in ended.stderr


def test_stacks_are_plain_text_when_colour_is_forced(monkeypatch):
    """ipykernel sets FORCE_COLOR and CLICOLOR_FORCE, and a supervisor started from a
    notebook inherits them: py-spy, here and on other hosts, must still write plain text."""
    import subprocess
    import sys
    import time

    from jupyter_trainer.rankside.host import procs

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("CLICOLOR_FORCE", "1")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.3)
        here = procs.python_stack(sleeper.pid)
        remote = subprocess.run(
            procs.py_spy_argv(sys.executable, sleeper.pid), capture_output=True, text=True
        ).stdout
        for stack in (here, remote):
            assert f"Process {sleeper.pid}: " in stack and "\x1b[" not in stack, stack
    finally:
        sleeper.kill()
        sleeper.wait()
