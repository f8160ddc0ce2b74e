"""Framework calls report to the run with no extra line (``rankside/frameworks/autolog.py``): a real
TensorBoard ``SummaryWriter`` (torch's and tensorboardX's) under torchrun and the warm pool,
``--no-autolog`` / ``autolog=False``, and a rank whose code imports no framework loads none."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import launched_by, leftover

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError

WRITER = """
import os, sys, tempfile
import torch.distributed as dist
from {module} import SummaryWriter
dist.init_process_group("gloo")
rank = dist.get_rank()
logdir = os.path.join(tempfile.mkdtemp(), f"rank{{rank}}")
writer = SummaryWriter(logdir)
for step in range(4):
    writer.add_scalar("train/loss", (rank + 1) / (step + 1), step)
    writer.add_scalars("lr", {{"head": 0.1 * step, "body": 0.01}}, global_step=step)
writer.close()
files = [f for _, _, fs in os.walk(logdir) for f in fs]
print("event files", len(files) >= 1, flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("module", ["torch.utils.tensorboard", "tensorboardX"])
def test_a_summary_writer_reports_every_rank_with_its_steps(module, home, launch_mode):
    run = api.submit(WRITER.format(module=module), procs=2, name="tb-writer")
    run.wait(timeout=180)
    assert launched_by(run) == launch_mode
    for rank in (0, 1):
        metrics = run.metrics(rank=rank)
        assert metrics["train/loss"] == [(s, (rank + 1) / (s + 1)) for s in range(4)], metrics
        assert [v for _, v in metrics["lr/head"]] == pytest.approx([0.0, 0.1, 0.2, 0.3])
        assert [s for s, _ in metrics["lr/body"]] == [0, 1, 2, 3]
        assert "event files True" in run.logs(rank)  # TensorBoard still wrote its own files
    assert leftover(run.id) == []


def test_no_autolog_leaves_the_writer_alone_and_is_recorded(home, tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(module="torch.utils.tensorboard"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jupyter_trainer",
            "submit",
            str(script),
            "--procs",
            "2",
            "--no-autolog",
            "--wait",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (run,) = api.runs(home=home)
    assert run.status == "completed" and run.spec.watch.autolog is False
    assert run.metrics(rank=0) == {} and "event files True" in run.logs(0)
    assert '"autolog": false' in (run.path / "spec.json").read_text()


LOOKS = """
import sys
from jupyter_trainer.rankside.frameworks.import_hooks import PatchOnImport
hooks = sorted(f.name for f in sys.meta_path if isinstance(f, PatchOnImport))
frameworks = ("tensorboard", "torch.utils.tensorboard", "transformers", "accelerate", "lightning",
              "pytorch_lightning", "mlflow", "wandb", "jupyter_trainer.rankside.frameworks.hf_hooks",
              "jupyter_trainer.rankside.frameworks.lightning_hooks",
              "jupyter_trainer.rankside.frameworks.mlflow_hooks",
              "jupyter_trainer.rankside.frameworks.wandb_hooks",
              "jupyter_trainer.rankside.frameworks.trackers")
loaded = sorted(m for m in sys.modules if m.startswith(frameworks))
print("hooks", hooks, "loaded", loaded, flush=True)
"""


@pytest.mark.parametrize("autolog", [True, False])
def test_code_that_imports_no_framework_loads_none(autolog, home, launch_mode):
    """The hooks are registered (or, with autolog off, not), and nothing of a framework is
    imported on the code's behalf."""
    run = api.submit(LOOKS, procs=1, autolog=autolog, name="looks")
    run.wait(timeout=120)
    assert launched_by(run) == launch_mode
    hooked = [
        "accelerate.accelerator",
        "lightning.fabric.fabric",
        "lightning.fabric.loggers",
        "lightning.pytorch.loggers",
        "lightning.pytorch.trainer.trainer",
        "lightning_fabric.fabric",
        "lightning_fabric.loggers",
        "mlflow",
        "pytorch_lightning.loggers",
        "pytorch_lightning.trainer.trainer",
        "tensorboardX.writer",
        "torch.utils.tensorboard.writer",
        "transformers.trainer",
        "wandb",
    ]
    expected = str(hooked) if autolog else "[]"
    assert f"hooks {expected} loaded []" in run.logs(0)


def test_a_bad_autolog_value_is_refused_before_anything_exists(home):
    with pytest.raises(SpecError, match="autolog must be True or False"):
        api.submit("print(1)", launcher="python", autolog="no")
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_every_patch_asked_for_one_module_is_made_once_it_is_imported(tmp_path):
    """Two parts of the rank side patching the same module before the code imports it (the
    rendezvous store: a warm pool's held port and the store kept for leaving together) both
    get their patch, in the order they asked."""
    (tmp_path / "late_module.py").write_text("made = []\n")
    code = """
import sys
from jupyter_trainer.rankside.frameworks.import_hooks import when_imported
when_imported("late_module", lambda m: m.made.append("first"))
when_imported("late_module", lambda m: m.made.append("second"))
import late_module
when_imported("late_module", lambda m: m.made.append("loaded"))
print(late_module.made)
"""
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert out.stdout.split("\n")[0] == "['first', 'second', 'loaded']"
