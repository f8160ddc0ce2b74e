"""transformers, Accelerate and Lightning code reports to the run with no extra line
(``rankside/frameworks/hf_hooks.py``, ``rankside/frameworks/lightning_hooks.py``): real 2-rank DDP trainers of tiny
models built from a config, under torchrun and the warm pool; their checkpoints kept in the
run and resumed from after a restart and by ``resume``; the classes for explicit use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import launched_by, leftover
from support.hf_trainer import hf_code

import jupyter_trainer
from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.frameworks import hf_hooks, lightning_hooks


def test_a_ddp_trainer_reports_its_logs_progress_and_arguments(home, launch_mode):
    run = api.submit(hf_code(), procs=2, name="hf")
    run.wait(timeout=240)
    assert launched_by(run) == launch_mode
    for rank in (0, 1):
        metrics = run.metrics(rank=rank)
        assert [s for s, _ in metrics["loss"]] == [2, 4, 6, 8], metrics
        assert [s for s, _ in metrics["learning_rate"]] == [2, 4, 6, 8]
        assert metrics["learning_rate"][0][1] == pytest.approx(1e-3 * 7 / 8)  # linear decay
        assert [s for s, _ in metrics["eval_loss"]] == [4, 8]
        assert "train_loss" in metrics and "grad_norm" in metrics
    follower = run.follower()
    follower.poll()
    assert {r: (p.done, p.total) for r, p in follower.progress.items()} == {
        0: (8, 8),
        1: (8, 8),
    }
    tags = run.tags
    assert tags["transformers.learning_rate"] == "0.001"
    assert tags["transformers.max_steps"] == "8"
    assert tags["transformers.hub_token"] == "***"
    assert "hf_secret_value" not in str(tags)
    assert "transformers.accelerator_config" not in tags  # not a plain value
    kept = run.path / "checkpoints" / "out"
    assert sorted(p.name for p in kept.iterdir()) == ["checkpoint-4", "checkpoint-8"]
    assert f"kept in {kept}" in run.logs(0)
    assert leftover(run.id) == []


def test_a_restarted_trainer_resumes_from_its_checkpoint_not_from_step_0(home):
    run = api.submit(hf_code(), procs=2, max_restarts=1, params={"crash_at": 6}, name="hf")
    run.wait(timeout=300)
    first, _ = run.state["attempts"]
    assert first["failed_rank"] == 1 and "SIGKILL" in first["error"], first
    log = run.logs(0)
    assert "first step 1 attempt 0" in log
    assert f"resuming the Trainer from {run.path / 'checkpoints' / 'out' / 'checkpoint-4'}" in log
    assert "first step 5 attempt 1" in log
    assert run.metrics(0)["loss"][-1][0] == 8
    assert leftover(run.id) == []


def test_resume_starts_a_trainer_from_the_earlier_runs_checkpoint(home):
    params = {"max_steps": 4, "export": False}
    old = api.submit(hf_code(), procs=1, launcher="python", params=params, wait=True)
    assert "first step 1 attempt 0" in old.logs(0)
    new = api.resume(old.id, params={"max_steps": 8, "export": True}, wait=True)
    assert new.spec.lineage == {"resumed_from": old.id, "checkpoint": "out/checkpoint-4"}
    assert "first step 5 attempt 0" in new.logs(0)
    assert [s for s, _ in new.metrics(0)["loss"]] == [6, 8]
    assert (new.path / "checkpoints" / "out" / "checkpoint-8" / "trainer_state.json").is_file()
    # the model the Trainer saved registers as it is, and its model object exports to ONNX
    model = new.register_model("bert-tiny", "bert")
    assert {"config.json", "model.safetensors"} <= {Path(f.path).name for f in model.files}
    record = json.loads((new.path / "outputs" / "bert.onnx.json").read_text())
    assert record["checked"] and record["within_tolerance"], record


def test_a_trainer_metric_is_a_sweep_objective_pruned_at_an_evaluation(home):
    code = hf_code().replace("learning_rate=1e-3", "learning_rate=lr")
    sweep = jupyter_trainer.sweep(
        code,
        space={"lr": "choice(0.001, 0.002, 30.0, 40.0)"},
        metric="eval_loss",
        goal="min",
        trials=4,
        sampler="grid",
        prune="median:1",
        launcher="python",
        namespace={"lr": 0.001},
        seed=4,  # the grid runs a good trial (lr 0.001) first
    )
    sweep.wait(timeout=400)
    trials = sweep.state["trials"]
    # The first trial has no completed trial to be compared with. When it is a good one,
    # every bad trial after it is worse than the median of the good ones at step 4.
    assert trials[0]["params"]["lr"] < 1, "the seed no longer runs a good trial first"
    for trial in trials:
        run = run_of(trial)
        if trial["params"]["lr"] < 1:
            assert trial["status"] == "completed", trial
            assert trial["objective"] == run.metrics(0)["eval_loss"][-1][1] < 5
            continue
        assert trial["status"] == "pruned" and trial["pruned_at"] == 4, trial
        assert "eval_loss" in trial["reason"] and "median" in trial["reason"]
        assert run.status == "canceled" and "Traceback" not in run.logs(0)
        assert leftover(run.id) == []


def run_of(trial):
    return api.get_run(trial["run"])


def test_the_explicit_callback_reports_once_with_or_without_autolog(home):
    explicit = "[jt.TransformersCallback()]"
    for autolog in (True, False):
        run = api.submit(
            hf_code(explicit),
            procs=1,
            launcher="python",
            autolog=autolog,
            params={"max_steps": 4},
            wait=True,
        )
        assert [s for s, _ in run.metrics(0)["loss"]] == [2, 4], autolog
        assert [s for s, _ in run.metrics(0)["eval_loss"]] == [4], autolog
        checkpoints = run.path / "checkpoints" / "out"
        assert checkpoints.is_dir() is autolog  # without autolog the Trainer is left alone


LIGHTNING = """
import torch
import {package} as pl
from jupyter_trainer import runtime as jt

class Tiny(pl.LightningModule):
    def __init__(self, lr=0.05, width=8, sizes=None):
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(),
                                       torch.nn.Linear(width, 1))
    def on_train_start(self):
        print("starting at step", self.global_step, "attempt", jt.attempt, flush=True)
    def training_step(self, batch, i):
        if jt.params.get("crash") and jt.attempt == 0 and jt.rank == 1 and self.global_step == 9:
            raise RuntimeError("boom at step 9")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train_loss", loss)
        return loss
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.net(x), y), sync_dist=True)
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

g = torch.Generator().manual_seed(0)
x = torch.randn(64, 4, generator=g)
data = torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True))
loader = lambda: torch.utils.data.DataLoader(data, batch_size=8)
trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=2, strategy="ddp",
                     log_every_n_steps=2, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(Tiny(sizes={{"in": 4}}), loader(), loader())
print("root", trainer.default_root_dir, flush=True)
"""


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_a_ddp_lightning_trainer_reports_self_log_progress_and_hparams(home, package):
    run = api.submit(LIGHTNING.format(package=package), procs=2, name="pl")
    run.wait(timeout=240)
    for rank in (0, 1):
        metrics = run.metrics(rank=rank)
        # 64 samples over 2 ranks in batches of 8: 4 steps an epoch, logged every 2nd step
        assert [s for s, _ in metrics["train_loss"]] == [1, 3, 5, 7, 9, 11], metrics
        assert [s for s, _ in metrics["val_loss"]] == [3, 7, 11]
    assert run.metrics(0)["val_loss"] == run.metrics(1)["val_loss"]  # sync_dist
    follower = run.follower()
    follower.poll()
    assert {r: (p.done, p.total) for r, p in follower.progress.items()} == {
        0: (12, 12),
        1: (12, 12),
    }
    assert run.tags["lightning.lr"] == "0.05" and run.tags["lightning.sizes.in"] == "4"
    root = run.path / "checkpoints" / "lightning"
    assert f"root {root}" in run.logs(0)
    assert [p.name for p in root.rglob("*.ckpt")] == ["epoch=2-step=12.ckpt"]
    assert leftover(run.id) == []


def test_a_restarted_lightning_trainer_resumes_from_its_last_checkpoint(home):
    code = LIGHTNING.format(package="lightning.pytorch")
    run = api.submit(code, procs=2, max_restarts=1, params={"crash": True}, name="pl")
    run.wait(timeout=300)
    first, _ = run.state["attempts"]
    assert first["failed_rank"] == 1 and "boom at step 9" in first["error"]
    log = run.logs(0)
    assert "starting at step 0 attempt 0" in log
    resumed = next(line for line in log.splitlines() if "resuming the Lightning" in line)
    assert resumed.endswith("epoch=1-step=8.ckpt"), resumed
    assert "starting at step 8 attempt 1" in log
    assert run.metrics(0)["train_loss"][-1][0] == 11
    assert leftover(run.id) == []


ACCELERATE = """
import torch
from accelerate import Accelerator
from jupyter_trainer import runtime as jt
acc = Accelerator(cpu=True, log_with=EXTRA)
acc.init_trackers("demo", config={"lr": 0.1, "batch": 8})
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 4, generator=torch.Generator().manual_seed(0))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, x.sum(1, keepdim=True)),
                                     batch_size=8)
model, opt, loader = acc.prepare(model, opt, loader)
for step, (xb, yb) in enumerate(loader):
    loss = torch.nn.functional.mse_loss(model(xb), yb)
    acc.backward(loss)
    opt.step()
    opt.zero_grad()
    acc.log({"loss": loss.item(), "note": "text is not a metric"}, step=step)
acc.end_training()
"""


def test_accelerate_log_reports_every_rank_and_the_tracker_reports_once(home):
    run = api.submit(ACCELERATE.replace("EXTRA", "None"), procs=2, name="acc")
    run.wait(timeout=240)
    for rank in (0, 1):
        assert [s for s, _ in run.metrics(rank=rank)["loss"]] == [0, 1, 2, 3]
    assert "note" not in run.metrics(0)
    assert run.tags["accelerate.lr"] == "0.1" and run.tags["accelerate.batch"] == "8"
    for autolog in (True, False):
        tracked = api.submit(
            ACCELERATE.replace("EXTRA", "[jt.AccelerateTracker()]"),
            procs=2,
            autolog=autolog,
            name="acc",
        )
        tracked.wait(timeout=240)
        assert [s for s, _ in tracked.metrics(0)["loss"]] == [0, 1, 2, 3], autolog
        # Accelerate calls a tracker on its main process only; autolog hears every rank
        assert ("loss" in tracked.metrics(1)) is autolog
        assert tracked.tags["accelerate.lr"] == "0.1"


def test_training_arguments_become_plain_masked_tags():
    from transformers import TrainingArguments

    args = TrainingArguments(
        output_dir="out", learning_rate=3e-4, use_cpu=True, hub_token="t0ken", report_to="none"
    )
    changed = hf_hooks.changed_arguments(args)
    assert changed["learning_rate"] == 3e-4 and changed["hub_token"] == "***"
    assert changed["output_dir"] == "out"
    assert "seed" not in changed and "report_to" not in changed and "debug" not in changed
    assert all(isinstance(v, (str, int, float, bool, list)) for v in changed.values())


def test_hyperparameters_flatten_into_dotted_names():
    from argparse import Namespace

    assert lightning_hooks.flat({"lr": 1, "opt": {"name": "sgd", "m": {"b": 2}}}) == {
        "lr": 1,
        "opt.name": "sgd",
        "opt.m.b": 2,
    }
    assert lightning_hooks.flat(Namespace(lr=0.1)) == {"lr": 0.1}


def test_a_lightning_checkpoint_cut_short_is_never_resumed_from(tmp_path):
    import torch

    from jupyter_trainer.rankside.rank.rank_files import framework_checkpoints

    whole = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=4.ckpt"
    whole.parent.mkdir(parents=True)
    torch.save({"state_dict": {"w": torch.ones(64)}, "global_step": 4}, whole)
    cut = whole.with_name("epoch=1-step=8.ckpt")  # newer, its writer killed mid-write
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert [p for _, p in framework_checkpoints(str(tmp_path))] == [str(whole)]
