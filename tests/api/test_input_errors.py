"""Input that used to be taken silently now gets a clear error: a rank the run does not have,
the same ``-p`` key twice, params of the wrong kind, and a sibling module left out of the
snapshot."""

from __future__ import annotations

import pytest
from conftest import leftover
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import EnvError, SpecError


@pytest.fixture
def two_ranks(home):
    run = api.submit(
        "from jupyter_trainer import runtime as jt\nprint('hello from', jt.rank)\n",
        launcher="torchrun",
        procs=2,
        name="two",
        wait=True,
    )
    assert leftover(run.id) == []
    return run


def test_a_rank_the_run_lacks_is_an_error_everywhere(two_ranks, ip):
    run = two_ranks
    assert run.logs(1) == "hello from 1\n"
    with pytest.raises(
        SpecError,
        match=rf"run {run.id} has no rank 99: it has ranks 0 to 1 "
        r"\(world size 2\)",
    ):
        run.logs(99)
    with pytest.raises(SpecError, match="has no rank -1"):
        run.logs(-1)

    done = cli("logs", run.id, "--rank", "99")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"jupyter-trainer: error: run {run.id} has no rank 99: it has "
        "ranks 0 to 1 (world size 2); pick one of those"
    )
    assert cli("logs", run.id, "--rank", "1").stdout == "hello from 1\n"

    result = ip.run_cell(f"%train logs {run.id} --rank 99")
    assert isinstance(result.error_in_exec, SpecError)
    assert "it has ranks 0 to 1" in str(result.error_in_exec)


def test_the_same_param_twice_is_refused(home, ip, tmp_path):
    result = ip.run_cell("%%train --launcher python -p x=1 -p y=2 -p x=2\nprint(x)\n")
    assert isinstance(result.error_in_exec, SpecError)
    assert "the key 'x' is given twice ('x=1', then 'x=2')" in str(result.error_in_exec)
    script = tmp_path / "train.py"
    script.write_text("print('never')\n")
    done = cli("submit", str(script), "--launcher", "python", "-p", "lr=0.1", "-p", " lr =0.2")
    assert done.returncode == 2 and done.stdout == ""
    assert "the key 'lr' is given twice ('lr=0.1', then ' lr =0.2')" in done.stderr
    with pytest.raises(SpecError, match="the parameter 'x' is given twice"):
        api.submit("print(x)\n", launcher="python", params=["x=1", "x=2"])
    assert api.runs() == []  # nothing was created


@pytest.mark.parametrize("params", ["lr=0.1", [("lr", 0.1)], 3])
def test_params_neither_a_mapping_nor_strings_are_refused(home, params):
    with pytest.raises(SpecError, match="params must be a mapping or KEY=VALUE strings"):
        api.submit("print(lr)\n", launcher="python", params=params)
    assert api.runs() == []  # nothing was created


def test_a_sibling_module_left_out_suggests_source(home, ip, tmp_path, monkeypatch):
    project = tmp_path / "my project"
    project.mkdir()
    (project / "helpers.py").write_text("def answer():\n    return 42\n")
    (project / "train.py").write_text("import helpers\nprint(helpers.answer())\n")
    done = cli("submit", "train.py", "--launcher", "python", cwd=project)
    assert done.returncode == 2 and done.stdout == ""
    assert (
        f"{project / 'helpers.py'} is in the current folder but not in the run's snapshot: "
        f"take that folder along with --source '{project}'"
    ) in done.stderr
    assert "install the package" not in done.stderr
    assert api.runs() == []
    done = cli("submit", "train.py", "--launcher", "python", "--source", ".", "--wait", cwd=project)
    assert done.returncode == 0, done.stderr
    run = api.get_run(done.stdout.strip())
    assert run.logs() == "42\n" and leftover(run.id) == []

    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    result = ip.run_cell("%%train --launcher python\nimport helpers\nprint(helpers.answer())\n")
    assert isinstance(result.error_in_exec, EnvError)
    assert f"take that folder along with --source '{project}'" in str(result.error_in_exec)
