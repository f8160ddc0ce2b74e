"""Environments used by runs: %%environment + %%train in a real IPython shell, the pre-flight
check, the run's record of its environment, the CLI, and a notebook under papermill."""

from __future__ import annotations

import json
import shutil
import sys
import warnings

import nbformat
import papermill
import pytest

from jupyter_trainer import environment
from jupyter_trainer.api import runs as api
from jupyter_trainer.environment import EnvDriftWarning
from jupyter_trainer.frontends import cli
from jupyter_trainer.targets.local.target import LocalTarget

LAYERED = """%%environment layered
inherit: true          # torch comes from the kernel
pip:
  - tomli==2.0.1       # the kernel does not have tomli at all
  - six==1.16.0        # the kernel has six 1.17.0: the environment's wins
env:
  OMP_NUM_THREADS: "3"
"""

TRAIN = """%%train --env layered --procs 2
import os, sys
from importlib.metadata import version
import six, tomli
import torch.distributed as dist
dist.init_process_group()
print("tomli", version("tomli"), "six", six.__version__, "omp", os.environ["OMP_NUM_THREADS"])
print("python", sys.executable)
dist.destroy_process_group()
"""


def run_cell(ip, source: str):
    return ip.run_cell(source, store_history=True)


def nothing_started(home) -> bool:
    runs = home / "runs"
    staging = home / "staging"
    return (
        api.runs(home=home) == []
        and (not runs.exists() or not any(runs.iterdir()))
        and (not staging.exists() or not any(staging.iterdir()))
    )


def test_environment_cell_then_train_cell_builds_once_and_records_it(ip, home, capsys):
    result = run_cell(ip, LAYERED)
    assert result.success, result.error_in_exec
    record = environment.Registry(home).get("layered")
    assert f"environment layered version {record.version} (new version)" in capsys.readouterr().out

    first = run_cell(ip, TRAIN)
    assert first.success, first.error_in_exec
    run = first.result
    for rank in (0, 1):
        log = run.logs(rank)
        assert "tomli 2.0.1 six 1.16.0 omp 3" in log
        assert f"python {home / 'environments' / 'venvs'}" in log
    spec = json.loads((run.path / "spec.json").read_text())
    assert spec["env"]["name"] == "layered" and spec["env"]["version"] == record.version
    state = run.state["environment"]
    assert state["name"] == "layered" and state["version"] == record.version
    assert state["built"] is True and state["build_seconds"] > 0
    assert state["python"] == run.state["python"]
    assert state["preflight"]["ok"] is True and state["preflight"]["missing"] == []
    assert {"six", "tomli", "torch"} <= set(state["preflight"]["checked"])
    assert state["preflight"]["differences"] == []  # same Python, the kernel's torch

    second = run_cell(ip, TRAIN)
    assert second.success, second.error_in_exec
    again = second.result.state["environment"]
    assert again["built"] is False and again["build_seconds"] is None
    assert again["python"] == state["python"] and again["env_id"] == state["env_id"]


def test_missing_import_is_stopped_before_anything_starts(ip, home):
    assert run_cell(ip, "%environment lean --pip six==1.16.0").success
    result = run_cell(ip, "%%train --env lean --launcher python\nimport six\nimport sklearn\n")
    assert not result.success
    message = str(result.error_in_exec)
    assert type(result.error_in_exec).__name__ == "EnvError"
    assert "environment 'lean'" in message and "cannot import 'sklearn'" in message
    assert "imported by the cell, line 3: `import sklearn`" in message
    assert "add `scikit-learn` to the pip list of environment 'lean'" in message
    assert "or set inherit: true" in message
    assert nothing_started(home)


def test_torchrun_needs_torch_in_the_environment(ip, home):
    assert run_cell(ip, "%environment lean --pip six==1.16.0").success
    result = run_cell(ip, "%%train --env lean --procs 2\nimport six\n")
    assert not result.success
    assert "'torch' (needed by --launcher torchrun)" in str(result.error_in_exec)
    assert "set inherit: true to use the notebook's torch" in str(result.error_in_exec)
    assert nothing_started(home)


def test_kernel_runs_are_checked_too(ip, home, tmp_path, monkeypatch):
    (tmp_path / "helpers_only_here.py").write_text("VALUE = 41\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the notebook finds it; the run would not
    result = run_cell(ip, "%%train --launcher python\nimport helpers_only_here\n")
    assert not result.success
    message = str(result.error_in_exec)
    assert "the notebook kernel's Python cannot import 'helpers_only_here'" in message
    assert "add its folder to the snapshot with --source DIR" in message
    assert nothing_started(home)
    result = run_cell(
        ip,
        f"%%train --launcher python --source {tmp_path}\n"
        "import helpers_only_here\nprint(helpers_only_here.VALUE + 1)\n",
    )
    assert result.success, result.error_in_exec
    run = result.result
    assert run.logs(0).strip() == "42"
    state = run.state["environment"]
    assert state["name"] is None and state["python"] == sys.executable and state["built"] is False
    assert state["preflight"]["ok"] and "helpers_only_here" in state["preflight"]["checked"]


def test_runs_pin_versions_and_report_drift(home):
    environment.define(environment.from_line("pinned", pip=["six==1.16.0"]), home=home)
    old = environment.Registry(home).get("pinned").version
    environment.define(environment.from_line("pinned", pip=["six==1.15.0"]), home=home)
    code = "import six\nprint(six.__version__)\n"
    with pytest.warns(
        EnvDriftWarning, match="torch .* in the notebook, not installed in the run's"
    ):
        latest = api.submit(code, env="pinned", launcher="python", wait=True, home=home)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EnvDriftWarning)
        pinned = api.submit(code, env=f"pinned@{old[:7]}", launcher="python", wait=True, home=home)
    assert latest.logs(0).strip() == "1.15.0" and pinned.logs(0).strip() == "1.16.0"
    assert pinned.spec.env.version == old != latest.spec.env.version
    assert pinned.state["environment"]["preflight"]["differences"] == [
        f"torch {pinned.state['environment']['preflight']['kernel']['torch']} in the notebook, "
        "not installed in the run's environment"
    ]


def test_an_image_on_the_local_target_is_refused(ip, home):
    assert run_cell(ip, "%%environment boxed\nimage: pytorch/pytorch:2.3.0-runtime\n").success
    result = run_cell(ip, "%%train --env boxed --launcher python\nprint(1)\n")
    assert not result.success
    assert (
        "asks for the container image 'pytorch/pytorch:2.3.0-runtime', but target 'local' "
        "(local) starts processes directly" in str(result.error_in_exec)
    )
    assert nothing_started(home)


def test_supervisor_rebuilds_an_environment_deleted_after_submit(home, tmp_path):
    environment.define(environment.from_line("gone", pip=["six==1.16.0"], inherit=True), home=home)
    run = api.submit(
        "import six\nprint(six.__version__)\n", env="gone", launcher="python", wait=True, home=home
    )
    shutil.rmtree(run.state["environment"]["python"].rsplit("/bin/", 1)[0])
    realized = environment.realize(
        run.spec.env,
        LocalTarget(),
        home=home,
        code_dir=run.path / "code",
        entry=run.spec.code.entry,
    )
    assert realized.record["built"] is True and realized.python == run.spec.env.python
    assert realized.record["preflight"]["ok"]


def test_magic_lists_shows_and_exports(ip, home, capsys):
    assert run_cell(ip, "%environment").success
    assert "no environments yet" in capsys.readouterr().out
    assert run_cell(ip, "%environment tools --pip six==1.16.0 --var A=1 --build").success
    assert "; built in" in capsys.readouterr().out
    assert run_cell(ip, "%environment").success
    table = capsys.readouterr().out
    assert "tools" in table and "built" in table
    assert run_cell(ip, "%environment show tools").success
    shown = capsys.readouterr().out
    assert "pip:\n- six==1.16.0" in shown and "six==1.16.0" in shown and "built " in shown
    assert run_cell(ip, "%environment export tools").success
    exported = capsys.readouterr().out
    assert "six==1.16.0 \\\n    --hash=sha256:" in exported
    assert run_cell(ip, "%environment export tools --requirements").success
    assert capsys.readouterr().out == "six==1.16.0\n"
    result = run_cell(ip, "%environment show nothing")
    assert not result.success and "unknown environment 'nothing'" in str(result.error_in_exec)
    result = run_cell(ip, "%environment show --pip x")
    assert not result.success


def test_cli_env_commands(home, capsys):
    environment.define(environment.from_line("clienv", pip=["six==1.16.0"]), home=home)
    assert cli.main(["env"]) == 0 and "clienv" in capsys.readouterr().out
    assert cli.main(["env", "show", "clienv"]) == 0 and "lock " in capsys.readouterr().out
    assert cli.main(["env", "export", "clienv", "--requirements"]) == 0
    assert capsys.readouterr().out == "six==1.16.0\n"
    assert cli.main(["env", "build", "clienv"]) == 0 and "built in" in capsys.readouterr().out
    assert cli.main(["env", "show", "missing"]) == 2
    assert "unknown environment 'missing'" in capsys.readouterr().err


def test_papermill_notebook_defines_and_uses_an_environment(home, tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext jupyter_trainer"),
        nbformat.v4.new_code_cell(LAYERED),
        nbformat.v4.new_code_cell(TRAIN.replace("--procs 2", "--procs 2 --name nb-env")),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    src, out = tmp_path / "env.ipynb", tmp_path / "env.out.ipynb"
    nbformat.write(nb, src)
    papermill.execute_notebook(
        str(src), str(out), kernel_name="python3", progress_bar=False, cwd=str(tmp_path)
    )
    executed = nbformat.read(out, as_version=4)
    text = json.dumps([c.get("outputs", []) for c in executed.cells])
    assert "environment layered version" in text and " completed in " in text
    (run,) = api.runs(home=home)
    assert run.status == "completed" and run.state["environment"]["built"] is True
    assert "tomli 2.0.1 six 1.16.0 omp 3" in run.logs(1)


def test_text_summary_names_the_environment(home):
    from jupyter_trainer.api import runs as api
    from jupyter_trainer.frontends.views.text import summary_text

    run = api.submit("print('x')", launcher="python", wait=True)
    follower = run.follower()
    follower.poll()
    text = summary_text(follower, run.spec, run.outputs)
    assert "env: the kernel's Python · python 3." in text
