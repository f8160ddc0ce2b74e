"""Lightning Fabric reports to the run with no extra line (``rankside/frameworks/lightning_hooks.py``):
``fabric.log``, ``fabric.log_dict`` and a logger's own ``log_metrics`` each become metrics
once, under a real 2-rank Fabric of a tiny model, whose relative ``fabric.save`` is kept in
the run's ``checkpoints/``; and a Lightning ``Trainer()`` or ``Fabric()``
left to see one device in a run of two ranks stops with what to set, before it trains."""

from __future__ import annotations

import pytest
from conftest import leftover

from jupyter_trainer.api import runs as api

FABRIC = """
import os
import torch
from lightning.fabric import Fabric
from lightning.fabric.loggers import CSVLogger, TensorBoardLogger

tensorboard = TensorBoardLogger("logs", name="fabric")
csv = CSVLogger("logs", name="csv")
fabric = Fabric(accelerator="cpu", devices=2, strategy="ddp", loggers=[tensorboard, csv])
fabric.launch()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = fabric.setup(model, optimizer)
x = torch.randn(32, 4, generator=torch.Generator().manual_seed(fabric.global_rank))
for step in range(4):
    loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
    fabric.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    fabric.log("loss", loss, step=step)
    fabric.log_dict({"lr": 0.1, "grad/steps": step + 1}, step=step)
    tensorboard.log_metrics({"tb_direct": 2.0 * step}, step=step)
    csv.log_metrics({"csv_direct": 3.0 * step}, step=step)
csv.finalize("success")
fabric.save("ckpt/last.ckpt", {"model": model, "step": 4})
state = fabric.load("ckpt/last.ckpt")
print("loaded step", state["step"], "in the working folder:", os.path.exists("ckpt"), flush=True)
"""


def test_fabric_log_log_dict_and_loggers_report_every_series_once(home):
    run = api.submit(FABRIC, procs=2, name="fabric")
    run.wait(timeout=240)
    assert run.status == "completed", run.logs(1)[-3000:]
    for rank in (0, 1):
        metrics = run.metrics(rank=rank)
        for name in ("loss", "lr", "grad/steps", "tb_direct", "csv_direct"):
            assert [s for s, _ in metrics[name]] == [0, 1, 2, 3], (rank, name, metrics)
        assert [v for _, v in metrics["grad/steps"]] == [1, 2, 3, 4]
        assert [v for _, v in metrics["csv_direct"]] == [0.0, 3.0, 6.0, 9.0]
        assert isinstance(metrics["loss"][0][1], float)
    # a relative fabric.save is kept with the run, and fabric.load reads it there
    assert (run.path / "checkpoints" / "ckpt" / "last.ckpt").is_file()
    for rank in (0, 1):
        assert "loaded step 4 in the working folder: False" in run.logs(rank), run.logs(rank)
    assert leftover(run.id) == []


LEFT_TO_ONE_DEVICE = """
import torch
import lightning.pytorch as pl

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(4, 1)
    def training_step(self, batch, i):
        loss = self.net(batch[0]).pow(2).mean()
        self.log("train_loss", loss)
        return loss
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

print("making the trainer", flush=True)
trainer = pl.Trainer(max_epochs=1, enable_progress_bar=False, enable_model_summary=False)
data = torch.utils.data.TensorDataset(torch.randn(16, 4))
trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
"""


FABRIC_LEFT_TO_ONE_DEVICE = """
from lightning.fabric import Fabric
print("making fabric", flush=True)
fabric = Fabric(accelerator="cpu")
fabric.launch()
fabric.log("train_loss", 1.0, step=0)
"""


@pytest.mark.parametrize(
    "code, name", [(LEFT_TO_ONE_DEVICE, "Trainer"), (FABRIC_LEFT_TO_ONE_DEVICE, "Fabric")]
)
def test_lightning_that_sees_one_device_in_a_two_rank_run_stops_with_what_to_set(home, code, name):
    run = api.submit(code, procs=2, name="pl-auto")
    run.wait(timeout=240, raise_on_failure=False)
    assert run.status == "failed", run.logs(0)[-3000:]
    error = run.state["error"]
    assert "2 ranks" in error and "sees one process (world size 1)" in error, error
    assert f'{name}(accelerator="cpu", devices=2, strategy="ddp")' in error, error
    assert "Traceback" not in run.logs(0)
    assert "train_loss" not in run.metrics(0)  # stopped before it trained
    assert leftover(run.id) == []
