"""How ``submit`` starts a run: the supervisor's interpreter starts while the snapshot is
written (or was kept waiting since the last run) and is handed the run id; a refused submit
starts no run; a waiting supervisor is used only while nothing it was started with has
changed, and ends with its process; a repeated pre-flight check is reused only while
nothing it looked at has changed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import leftover, wait_for
from support.jt_cli import CLI
from support.ssh_hosts import _children

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import EnvError
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import HOME_ENV
from jupyter_trainer.supervisor import starter


def supervisors_of_this_process() -> list[str]:
    """Live children of this process that run the supervisor."""
    return [
        procs.describe(pid)
        for pid in _children(os.getpid())
        if procs.start_ticks(pid) is not None
        and "jupyter_trainer.supervisor" in procs.describe(pid)
    ]


def test_a_refused_submit_starts_nothing_and_keeps_one_supervisor_waiting(home):
    with pytest.raises(EnvError, match="cannot import 'surely_not_installed_xyz'"):
        api.submit("import surely_not_installed_xyz\n", launcher="python")
    assert api.runs() == []
    waiting = supervisors_of_this_process()
    assert len(waiting) == 1 and waiting[0].endswith("--target=local -")
    starter.release_spare()
    assert supervisors_of_this_process() == []


def test_no_supervisor_waits_when_spares_are_off(home, monkeypatch):
    monkeypatch.setenv(starter.SPARE_ENV, "0")
    with pytest.raises(EnvError, match="cannot import"):
        api.submit("import surely_not_installed_xyz\n", launcher="python")
    assert supervisors_of_this_process() == []
    run = api.submit("print('ran')\n", launcher="python", wait=True)
    assert run.status == "completed" and run.logs() == "ran\n" and leftover(run.id) == []
    assert supervisors_of_this_process() == []


def test_the_next_run_takes_the_waiting_supervisor(home):
    first = api.submit("print('one')\n", launcher="python", wait=True)
    waiting = starter._spare
    assert waiting is not None and waiting.proc.poll() is None
    second = api.submit("print('two')\n", launcher="python", wait=True)
    assert waiting.proc.returncode == 0  # handed the second run, then detached
    assert (first.logs(), second.logs()) == ("one\n", "two\n")
    assert starter._spare is not waiting and starter._spare.proc.poll() is None


def test_a_changed_environment_or_store_gets_a_new_supervisor(home, tmp_path, monkeypatch):
    code = "import os\nprint(os.environ.get('MARK_FOR_SPARE_TEST'), os.getcwd() != '')\n"
    monkeypatch.setenv("MARK_FOR_SPARE_TEST", "a")
    assert api.submit(code, launcher="python", wait=True).logs() == "a True\n"
    waiting = starter._spare
    monkeypatch.setenv("MARK_FOR_SPARE_TEST", "b")
    assert api.submit(code, launcher="python", wait=True).logs() == "b True\n"
    assert waiting.proc.returncode == -9  # not used: started with the old environment
    other = tmp_path / "other-home"
    run = api.submit("print(1)\n", launcher="python", wait=True, home=other)
    assert run.store.home == other and run.logs() == "1\n"
    assert starter._spare.home == str(other)


def test_a_waiting_supervisor_ends_with_the_process_that_started_it(home):
    script = (
        "import jupyter_trainer as jt, os, sys\n"
        "jt.submit(\"print(2)\\n\", launcher='python', wait=True)\n"
        "print(os.getpid())\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    parent = int(out.stdout.split()[-1])

    def waiting() -> list[int]:
        return [
            pid
            for pid in procs.pids_with_env(HOME_ENV, str(home))
            if "jupyter_trainer.supervisor" in procs.describe(pid)
        ]

    assert wait_for(lambda: not waiting(), timeout=20, what="the waiting supervisor to end")
    assert not procs.is_alive(parent)


def test_a_module_removed_after_a_passing_check_is_found_missing(home, tmp_path, monkeypatch):
    folder = tmp_path / "on path"
    folder.mkdir()
    (folder / "helper_mod_jt.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("PYTHONPATH", f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    code = "import helper_mod_jt\nprint(helper_mod_jt.VALUE)\n"
    for _ in range(2):  # the second check is the reused one
        run = api.submit(code, launcher="python", wait=True)
        assert run.logs() == "7\n" and leftover(run.id) == []
    (folder / "helper_mod_jt.py").unlink()
    with pytest.raises(EnvError, match="cannot import 'helper_mod_jt'"):
        api.submit(code, launcher="python")
    assert len(api.runs()) == 2


def test_the_command_line_keeps_no_supervisor_waiting(home, tmp_path):
    """``jupyter-trainer submit`` starts one run and ends: a supervisor kept for a next run
    would only be started to be killed."""
    go = tmp_path / "go"
    script = tmp_path / "hold.py"
    script.write_text(
        f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)\n"
    )
    cli = subprocess.Popen(
        [*CLI, "submit", str(script)] + ["--launcher", "python", "--wait"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = cli.stdout.readline().strip()
        assert run_id, cli.stderr.read()
        assert wait_for(lambda: api.get_run(run_id).status == "running", timeout=60, what="the run")
        children = [procs.describe(pid) for pid in _children(cli.pid)]
        assert not [c for c in children if "jupyter_trainer.supervisor" in c], children
    finally:
        go.touch()
        _, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    assert leftover(run_id) == []
