"""Rerun and resume: a new run of a stored run's snapshot, environment, params and launch,
started from the API, the CLI and %train, on the local target."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.jt_cli import cli

import jupyter_trainer as jt
from jupyter_trainer import environment
from jupyter_trainer.api import runs as api
from jupyter_trainer.capture import hash_snapshot
from jupyter_trainer.core.errors import (
    InvalidRunId,
    RunNotFound,
    RunStateError,
    SpecError,
    StoreError,
    TargetError,
)
from jupyter_trainer.environment.definition import EnvDefinition
from jupyter_trainer.store import Store, latest_checkpoint

SGD = """\
import torch
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
torch.manual_seed(1234)
w = torch.zeros(4, requires_grad=True)
x = torch.randn(32, 4)
y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.1 * torch.randn(32)
opt = torch.optim.SGD([w], lr=jt.params["lr"])
for step in range(6):
    loss = ((x @ w - y) ** 2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
    jt.log(step=step, loss=loss.item(), w0=w[0].item())
dist.destroy_process_group()
"""

# Lists the run's checkpoints folder (what a resumed run finds there) and what each holds.
CHECKPOINTS = """\
import os, sys
from jupyter_trainer import runtime as jt
folder = os.path.join(os.environ["JT_RUN_DIR"], "checkpoints")
names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
print("checkpoints", names)
for name in names:
    print(name, open(os.path.join(folder, name), "rb").read())
print("lr", jt.params["lr"], "args", sys.argv[1:])
"""


def script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def started_nothing(home: Path, runs: list[str]) -> None:
    """The store holds exactly ``runs`` and no snapshot is left in staging."""
    assert Store(home).run_ids_on_disk() == sorted(runs)
    assert sorted(r.id for r in api.runs(home=home)) == sorted(runs)
    staging = home / "staging"
    assert not staging.exists() or not any(staging.iterdir())


def test_rerun_reproduces_a_completed_run_exactly(home, tmp_path):
    old = api.submit(
        script=script(tmp_path, SGD),
        procs=2,
        params={"lr": 0.05},
        max_restarts=1,
        stall_timeout=120,
        stop_on_nan=["loss"],
        wait=True,
    )
    new = jt.rerun(old.id, wait=True)
    assert new.id != old.id and new.status == "completed"
    for rank in (0, 1):
        first, again = old.metrics(rank), new.metrics(rank)
        assert len(first["loss"]) == 6
        assert again == first  # every step, every value, bit for bit
    assert new.spec.lineage == {"rerun_of": old.id}
    for part in ("name", "code", "launch", "watch", "params", "carried", "target"):
        assert getattr(new.spec, part) == getattr(old.spec, part), part
    assert (new.spec.env.name, new.spec.env.python) == (old.spec.env.name, old.spec.env.python)
    assert hash_snapshot(new.path / "code") == old.spec.code.hash
    assert old.spec.lineage == {}


def test_rerun_with_a_param_reaches_the_cell_code(ip, home):
    assert ip.run_cell("lr = 0.1\nsteps = 3", store_history=True).success
    first = ip.run_cell(
        """%%train --name cell
from jupyter_trainer import runtime as jt
for step in range(steps):
    jt.log(step=step, scaled=lr * (step + 1))
print("lr seen", lr, jt.params["lr"])
""",
        store_history=True,
    )
    assert first.success, first.error_in_exec
    old = first.result
    again = ip.run_line_magic("train", f"rerun {old.id} -p lr=0.5")
    assert isinstance(again, api.Run) and again.status == "completed"
    assert "lr seen 0.5 0.5" in again.logs(0)
    assert again.metrics()["scaled"] == [(0, 0.5), (1, 1.0), (2, 1.5)]
    assert again.spec.params == {"lr": 0.5, "steps": 3}
    assert again.spec.lineage == {"rerun_of": old.id}
    assert "lr seen 0.1 0.1" in old.logs(0) and old.spec.params == {"lr": 0.1, "steps": 3}


def test_cli_rerun_changes_a_param_and_keeps_the_script_arguments(home, tmp_path):
    old = api.submit(
        script=script(tmp_path, CHECKPOINTS),
        args=["--epochs", "'; rm -rf ~'"],
        launcher="python",
        params={"lr": 0.1},
        wait=True,
    )
    done = cli("rerun", old.id, "-p", "lr=[1, 2]", "--target", "local", "--wait")
    assert done.returncode == 0, done.stderr
    new = api.get_run(done.stdout.strip())
    assert new.status == "completed" and "completed" in done.stderr
    assert "lr [1, 2] args ['--epochs', \"'; rm -rf ~'\"]" in new.logs(0)
    assert new.spec.params == {"lr": [1, 2]} and new.spec.lineage == {"rerun_of": old.id}
    started = cli("rerun", new.id)  # without --wait: the new run's id at once
    assert started.returncode == 0, started.stderr
    assert api.get_run(started.stdout.strip()).wait().spec.lineage == {"rerun_of": new.id}


def test_rerun_keeps_the_runs_environment_lock(home, tmp_path):
    environment.define(EnvDefinition.from_yaml("pinned", "inherit: true\npip:\n  - six==1.16.0\n"))
    probe = (
        "import importlib.util, six\n"
        "print('six', six.__version__, 'tomli', importlib.util.find_spec('tomli') is not None)\n"
    )
    old = api.submit(probe, env="pinned", launcher="python", wait=True)
    environment.define(
        EnvDefinition.from_yaml(
            "pinned", "inherit: true\npip:\n  - six==1.16.0\n  - tomli==2.0.1\n"
        )
    )
    newer = api.submit(probe, env="pinned", launcher="python", wait=True)
    assert newer.spec.env.lock != old.spec.env.lock and "tomli True" in newer.logs(0)
    again = old.rerun(wait=True)
    assert (again.spec.env.version, again.spec.env.lock) == (
        old.spec.env.version,
        old.spec.env.lock,
    )
    assert "six 1.16.0 tomli False" in again.logs(0)


def test_resume_copies_the_latest_complete_checkpoint(ip, home, tmp_path):
    old = api.submit(
        script=script(tmp_path, CHECKPOINTS), launcher="python", params={"lr": 0.1}, wait=True
    )
    assert "checkpoints []" in old.logs(0)
    folder = old.path / "checkpoints"
    folder.mkdir(exist_ok=True)
    files = {
        "step-2.pt": b"two",
        "step-10.pkl": b"ten",
        "step-9.pt": b"nine",
        ".step-11.pt.tmp": b"being written",
        "step-12.pt.partial": b"no",
        "step-x.pt": b"no",
        "notes.txt": b"no",
    }
    for name, data in files.items():
        (folder / name).write_bytes(data)
    assert latest_checkpoint(folder) == folder / "step-10.pkl"
    new = ip.run_line_magic("train", f"resume {old.id} -p lr=0.2")
    assert isinstance(new, api.Run) and new.status == "completed"
    assert "checkpoints ['step-10.pkl']" in new.logs(0) and "step-10.pkl b'ten'" in new.logs(0)
    assert "lr 0.2" in new.logs(0)
    assert new.spec.lineage == {"resumed_from": old.id, "checkpoint": "step-10.pkl"}
    assert sorted(p.name for p in folder.iterdir()) == sorted(files)  # the old run's stay
    started = ip.run_line_magic("train", f"resume {new.id} --no-wait")
    assert started.wait().spec.lineage == {"resumed_from": new.id, "checkpoint": "step-10.pkl"}


def test_bad_input_starts_nothing(ip, home, tmp_path):
    old = api.submit(
        script=script(tmp_path, CHECKPOINTS),
        launcher="python",
        params={"lr": 0.1, "batch": 8},
        wait=True,
    )
    with pytest.raises(InvalidRunId, match="invalid run id '../x'"):
        jt.rerun("../x")
    with pytest.raises(RunNotFound, match="no run 'gone-20260101-000000-000000'"):
        jt.rerun("gone-20260101-000000-000000")
    with pytest.raises(
        SpecError,
        match=r"has no parameter 'momentum'; its parameters are: "
        r"batch, lr",
    ):
        jt.rerun(old.id, params={"momentum": 0.9, "lr": 0.2})
    with pytest.raises(SpecError, match="invalid parameter 'lr'"):
        jt.rerun(old.id, params=["lr"])
    with pytest.raises(TargetError, match="nowhere"):
        jt.rerun(old.id, target="nowhere")
    with pytest.raises(
        RunStateError, match="has no checkpoint .*; use rerun to start it from the beginning"
    ):
        jt.resume(old.id)
    (old.path / "checkpoints").mkdir(exist_ok=True)
    (old.path / "checkpoints" / ".step-3.pt.tmp").write_bytes(b"half")
    with pytest.raises(RunStateError, match="has no checkpoint"):
        old.resume()
    bad_id = cli("rerun", "../x")
    assert bad_id.returncode == 2 and "invalid run id" in bad_id.stderr
    unknown = cli("rerun", old.id, "-p", "momentum=0.9")
    assert unknown.returncode == 2 and "its parameters are: batch, lr" in unknown.stderr
    with_args = cli("rerun", old.id, "--", "--epochs", "3")
    assert with_args.returncode == 2 and "rerun takes no script arguments" in with_args.stderr
    no_checkpoint = cli("resume", old.id, "--wait")
    assert no_checkpoint.returncode == 2 and "use rerun" in no_checkpoint.stderr
    shown = ip.run_line_magic  # the magic reports the same errors
    with pytest.raises(SpecError, match="its parameters are: batch, lr"):
        shown("train", f"rerun {old.id} -p momentum=0.9")
    with pytest.raises(SpecError, match="given twice"):
        shown("train", f"rerun {old.id} -p lr=1 -p lr=2")
    started_nothing(home, [old.id])


def test_rerun_refuses_a_changed_snapshot(home, tmp_path):
    old = api.submit(
        script=script(tmp_path, CHECKPOINTS), launcher="python", params={"lr": 0.1}, wait=True
    )
    changed = old.path / "code" / "train.py"
    os.chmod(changed, 0o644)
    changed.write_text(CHECKPOINTS + "print('edited')\n")
    with pytest.raises(StoreError, match=f"the code snapshot of run {old.id} changed"):
        jt.rerun(old.id)
    started_nothing(home, [old.id])
    assert json.loads((old.path / "spec.json").read_text())["code"]["hash"] == old.spec.code.hash


def test_resumed_run_loads_what_the_earlier_run_saved(home, tmp_path):
    counting = script(
        tmp_path,
        """\
from jupyter_trainer import runtime as jt
found = jt.load_checkpoint()
start = found.step + 1 if found else 0
print("starting at", start, "from", found.state if found else None)
for step in range(start, start + 3):
    jt.log(step=step, value=float(step))
    jt.save_checkpoint({"step": step}, step)
""",
    )
    old = api.submit(script=counting, launcher="python", wait=True)
    assert "starting at 0 from None" in old.logs(0)
    new = jt.resume(old.id, wait=True)
    assert "starting at 3 from {'step': 2}" in new.logs(0)
    assert new.spec.lineage == {"resumed_from": old.id, "checkpoint": "step-2.pkl"}
    assert [v for _, v in new.metrics()["value"]] == [3.0, 4.0, 5.0]
    assert latest_checkpoint(new.path / "checkpoints").name == "step-5.pkl"
