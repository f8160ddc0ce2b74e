"""How ``submit`` starts a run: the supervisor's interpreter starts while the snapshot is
written and is handed the run id; a refused submit leaves no process behind; a repeated
pre-flight check is reused only while nothing it looked at has changed."""

from __future__ import annotations

import os

import pytest

from jupyter_trainer import api, procs
from jupyter_trainer.errors import EnvError

from conftest import leftover
from ssh_hosts import _children


def supervisors_of_this_process() -> list[str]:
    """Live children of this process that run the supervisor."""
    return [procs.describe(pid) for pid in _children(os.getpid())
            if procs.start_ticks(pid) is not None
            and "jupyter_trainer.supervisor" in procs.describe(pid)]


def test_a_refused_submit_leaves_no_supervisor(home):
    with pytest.raises(EnvError, match="cannot import 'surely_not_installed_xyz'"):
        api.submit("import surely_not_installed_xyz\n", launcher="python")
    assert supervisors_of_this_process() == []
    assert api.runs() == []
    run = api.submit("print('ran')\n", launcher="python", wait=True)
    assert run.status == "completed" and run.logs() == "ran\n" and leftover(run.id) == []
    assert supervisors_of_this_process() == []


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
