"""MLflow and W&B calls in every rank become the run's metrics, params and tags, live, with no
code change (``rankside/frameworks/mlflow_hooks.py``, ``wandb_hooks.py``): the real packages
under torchrun and the warm pool, a real ``mlflow server`` on loopback that still gets the
calls, W&B offline (its files still written), ``$JUPYTER_TRAINER_TRACKERS=here``, no tracking URI at all,
the MLflow mirror's one run for every rank, and two ssh hosts."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import launched_by, leftover, wait_for
from mirrors.test_mlflow import Server, mirrored
from mlflow import MlflowClient

from jupyter_trainer.api import runs as api
from jupyter_trainer.rankside.host import procs

# Each rank logs, then waits for the test to have read its metrics while the run goes on.
WAIT = """
deadline = time.monotonic() + 120
while not os.path.exists({go!r}) and time.monotonic() < deadline:
    time.sleep(0.05)
"""
MLFLOW_CODE = """
import os, time
import mlflow
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
with mlflow.start_run(run_name=f"rank-{{rank}}"):
    mlflow.log_params({{"lr": 0.1, "layers": 2}})
    mlflow.set_tag("stage", "train")
    for step in range(3):
        mlflow.log_metric("loss", 1 / (step + 1) + rank, step=step)
        mlflow.log_metrics({{"acc": 0.25 * step + rank}}, step=step)
    {wait}
print("cwd holds", sorted(os.listdir(".")), flush=True)
dist.destroy_process_group()
"""
WANDB_CODE = """
import os, time
import wandb
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
run = wandb.init(project="jt", config={{"lr": 0.1, "opt": {{"name": "sgd"}}, "api_key": "k-123"}})
wandb.config.update({{"epochs": 2}})
wandb.config.batch = 32
for step in range(3):
    wandb.log({{"loss": 1 / (step + 1) + rank, "grad": {{"norm": step + rank}}}})
wandb.log({{"val": 1.5}}, step=10)
wandb.summary["best"] = 0.5 + rank
{wait}
run.finish()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("mlflow"), procs.free_port()).start()
    yield running
    running.stop()


def live_metrics(run: api.Run, want: dict[str, list], ranks: int = 2) -> None:
    """Every rank's metrics as ``want`` says (``{name: [(step, value of rank 0), ...]}``,
    rank R's values R more), read while the run is still running."""

    def arrived() -> bool:
        assert run.status not in ("completed", "failed", "canceled", "lost"), run.state.get("error")
        return all(
            run.metrics(rank=r).get(n) == shifted(p, r)
            for n, p in want.items()
            for r in range(ranks)
        )

    try:
        wait_for(arrived, timeout=120, what="every rank's metrics while running")
    except AssertionError as exc:
        seen = {r: run.metrics(rank=r) for r in range(ranks)}
        raise AssertionError(f"{exc}: {seen}\n{run.logs(0)[-3000:]}") from None
    assert run.status == "running"


def shifted(points: list, rank: int) -> list:
    return [(s, v + rank if n else v) for s, v, n in points]


def test_mlflow_calls_reach_the_run_live_and_the_server(home, server, tmp_path, monkeypatch):
    monkeypatch.setenv("JT_HOT", "0")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "user-exp")
    client = MlflowClient(server.uri)
    experiment = client.create_experiment("user-exp")  # the ranks would race to make it
    go = tmp_path / "go"
    code = MLFLOW_CODE.format(wait=WAIT.format(go=str(go)).replace("\n", "\n    "))
    run = api.submit(code, procs=2, name="tracked-mlflow", system_interval=0)
    live_metrics(
        run,
        {
            "loss": [(0, 1.0, True), (1, 0.5, True), (2, 1 / 3, True)],
            "acc": [(0, 0.0, True), (1, 0.25, True), (2, 0.5, True)],
        },
    )
    loss1 = run.metrics(rank=1)["loss"]
    assert loss1 == [(0, 2.0), (1, 1.5), (2, 1 / 3 + 1)]
    go.touch()
    run.wait(timeout=240)
    assert launched_by(run) == "torchrun"
    assert run.tags == {"param.lr": "0.1", "param.layers": "2", "stage": "train"}

    # The user's own MLflow runs got every call, as they would have without us.
    found = client.search_runs([experiment])
    assert sorted(r.info.run_name for r in found) == ["rank-0", "rank-1"]
    for user_run in found:
        rank = int(user_run.info.run_name[-1])
        points = client.get_metric_history(user_run.info.run_id, "loss")
        assert sorted((m.step, m.value) for m in points) == [
            (s, 1 / (s + 1) + rank) for s in range(3)
        ]
        assert user_run.data.params == {"lr": "0.1", "layers": "2"}
        assert user_run.data.tags["stage"] == "train"

    # The mirror: one MLflow run for the whole run, rank 1's metrics under NAME/rank-1.
    record = mirrored(run)
    assert record["status"] == "synced", record
    mirror = client.get_run(record["mlflow_run_id"])
    assert len(client.search_runs([mirror.info.experiment_id])) == 1
    assert set(mirror.data.metrics) == {"loss", "acc", "loss/rank-1", "acc/rank-1"}
    history = client.get_metric_history(mirror.info.run_id, "loss/rank-1")
    assert sorted((m.step, m.value) for m in history) == loss1
    assert mirror.data.params == {"lr": "0.1", "layers": "2"}
    assert mirror.data.tags["stage"] == "train"
    assert "cwd holds ['_jt', 'logs', 'outputs'" in run.logs(0)  # no mlruns/, no mlflow.db
    assert leftover(run.id) == []


def test_wandb_offline_calls_reach_the_run_live_and_its_files(home, tmp_path, monkeypatch):
    files = tmp_path / "wandb-dir"
    files.mkdir()
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(files))
    go = tmp_path / "go"
    run = api.submit(WANDB_CODE.format(wait=WAIT.format(go=str(go))), procs=2, name="tracked-wandb")
    live_metrics(
        run,
        {
            "loss": [(0, 1.0, True), (1, 0.5, True), (2, 1 / 3, True)],
            "grad.norm": [(0, 0.0, True), (1, 1.0, True), (2, 2.0, True)],
            "val": [(10, 1.5, False)],
            "summary/best": [(None, 0.5, True)],
        },
    )
    go.touch()
    run.wait(timeout=240)
    assert run.tags == {
        "param.lr": "0.1",
        "param.opt.name": "sgd",
        "param.api_key": "***",
        "param.epochs": "2",
        "param.batch": "32",
    }
    offline = sorted((files / "wandb").glob("offline-run-*"))
    assert len(offline) == 2, offline  # each rank's W&B run, written as without us
    assert all(list(d.glob("run-*.wandb")) for d in offline)
    assert leftover(run.id) == []


# wandb/examples' pytorch-ddp/log-ddp.py without --log_all, in a few lines: W&B on rank 0 only,
# its gradients watched, a histogram logged beside the numbers.
RANK_ZERO_CODE = """
import torch, wandb
import torch.distributed as dist
dist.init_process_group("gloo")
run = wandb.init(project="ddp", group="DDP") if dist.get_rank() == 0 else None
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
if run is not None:
    run.watch(model, log="all", log_freq=1)
optimizer = torch.optim.SGD(model.parameters(), 0.1)
for step in range(3):
    loss = model(torch.ones(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if run is not None:
        run.log({"batch_loss": 0.5 / (step + 1), "hist": wandb.Histogram([1, 2, 3])})
if run is not None:
    run.log({"epoch": 0, "loss": 0.25})
    run.finish()
dist.destroy_process_group()
"""


def test_wandb_on_rank_zero_only_reports_rank_zero(home, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    run = api.submit(RANK_ZERO_CODE, procs=2, name="rank-zero-wandb", system_interval=0)
    run.wait(timeout=240)
    assert run.metrics(rank=0) == {
        "batch_loss": [(0, 0.5), (1, 0.25), (2, 0.5 / 3)],
        "epoch": [(3, 0)],
        "loss": [(3, 0.25)],
    }
    assert run.metrics(rank=1) == {}
    assert len(list((tmp_path / "wandb").glob("offline-run-*"))) == 1
    assert leftover(run.id) == []


BOTH_CODE = """
import os, time
import mlflow, wandb
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
mlflow.log_param("lr", 0.1)
wandb.init(project="jt", config={{"batch": 8}})
for step in range(2):
    mlflow.log_metric("loss", 1.0 + rank, step=step)
    wandb.log({{"acc": 0.5 + rank}}, step=step)
{wait}
wandb.finish()
dist.destroy_process_group()
"""


def test_only_here_keeps_the_calls_from_the_trackers(home, server, tmp_path, monkeypatch):
    files = tmp_path / "wandb-dir"
    files.mkdir()
    monkeypatch.setenv("JUPYTER_TRAINER_TRACKERS", "here")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "never-made")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(files))
    go = tmp_path / "go"
    run = api.submit(BOTH_CODE.format(wait=WAIT.format(go=str(go))), procs=2, name="here")
    live_metrics(
        run,
        {
            "loss": [(0, 1.0, True), (1, 1.0, True)],
            "acc": [(0, 0.5, True), (1, 0.5, True)],
        },
    )
    go.touch()
    run.wait(timeout=240)
    assert run.tags == {"param.lr": "0.1", "param.batch": "8"}
    assert MlflowClient(server.uri).get_experiment_by_name("never-made") is None
    assert not (files / "wandb").exists() or not any((files / "wandb").iterdir())


NO_URI_CODE = """
import os
import mlflow, wandb
mlflow.log_metric("loss", 0.5, step=1)
mlflow.log_params({"lr": 0.1})
wandb.init(project="jt")
wandb.log({"acc": 0.9})
wandb.finish()
print("cwd holds", sorted(os.listdir(".")), flush=True)
"""


def test_mlflow_without_a_uri_and_wandb_disabled_make_nothing(home, tmp_path, monkeypatch):
    """No tracking URI: MLflow would make ``mlflow.db`` in the rank's working folder, which
    the run removes; the calls are recorded here only, and nothing is made anywhere."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    monkeypatch.chdir(tmp_path)
    run = api.submit(NO_URI_CODE, launcher="python", name="no-uri").wait(timeout=120)
    assert run.metrics(rank=0) == {"loss": [(1, 0.5)], "acc": [(0, 0.9)]}
    assert run.tags == {"param.lr": "0.1"}
    assert "cwd holds ['_jt', 'logs', 'outputs'" in run.logs(0), run.logs(0)
    made = [p.name for p in [*tmp_path.iterdir(), *Path(run.path).rglob("*")]]
    assert not {"mlflow.db", "mlruns", "wandb", "mlflow"} & set(made), made


# MLflow's examples/pytorch/mnist_tensorboard_artifact.py, its pattern in a few lines: no
# tracking URI, a run started on every rank, each value logged to TensorBoard with its step and
# to MLflow without one, TensorBoard's files logged as the MLflow run's artifacts.
BOTH_LOGGERS_CODE = """
import os, tempfile
import mlflow
from tensorboardX import SummaryWriter

rank = int(os.environ["RANK"])
with mlflow.start_run():
    mlflow.log_param("lr", 0.01)
    folder = tempfile.mkdtemp()
    writer = SummaryWriter(folder)
    for step in range(3):
        writer.add_scalar("train_loss", 1.0 / (step + 1) + rank, step)
        mlflow.log_metric("train_loss", 1.0 / (step + 1) + rank)
    writer.close()
    mlflow.log_artifacts(folder, artifact_path="events")
    print("artifacts at", mlflow.get_artifact_uri(), flush=True)
"""


def test_mlflow_runs_of_every_rank_without_a_uri_are_kept_apart_in_the_outputs(home):
    """MLflow's default store is one ``mlflow.db`` in the working folder, which the ranks of a
    node share: their first ``start_run`` calls raced to create it and one failed
    (``duplicate column name: step``). Each rank's store is its own, kept in ``outputs/``,
    and a value logged to TensorBoard and to MLflow is one point, not two."""
    run = api.submit(BOTH_LOGGERS_CODE, procs=2, name="both-loggers", system_interval=0)
    run.wait(timeout=240)
    for rank in (0, 1):
        assert run.metrics(rank=rank) == {"train_loss": [(s, 1 / (s + 1) + rank) for s in range(3)]}
        store = run.outputs / "mlflow" / f"rank-{rank}"
        assert (store / "mlflow.db").is_file()
        events = list((store / "artifacts").rglob("events.out.tfevents.*"))
        assert len(events) == 1 and f"artifacts at {store / 'artifacts'}" in run.logs(rank)
    assert run.tags == {"param.lr": "0.01"}
    assert leftover(run.id) == []


SSH_CODE = """
import os, time
import mlflow
import torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(2):
    mlflow.log_metric("loss", 1.0 + rank, step=step)
{wait}
dist.destroy_process_group()
"""


def test_mlflow_calls_on_two_ssh_hosts_reach_the_run_live_and_the_server(
    pair, home, server, tmp_path
):
    from support.ssh_hosts import add_pair_target

    env = {"GLOO_SOCKET_IFNAME": "lo", "MLFLOW_TRACKING_URI": server.uri}
    env["MLFLOW_EXPERIMENT_NAME"] = "ssh-exp"
    add_pair_target("pair", home, tmp_path, replace=True, env=env)
    experiment = MlflowClient(server.uri).create_experiment("ssh-exp")
    go = tmp_path / "go"
    code = SSH_CODE.format(wait=WAIT.format(go=str(go)))
    run = api.submit(code, target="pair", nodes=2, procs=1, name="ssh-tracked")
    live_metrics(run, {"loss": [(0, 1.0, True), (1, 1.0, True)]})
    go.touch()
    run.wait(timeout=240)
    found = MlflowClient(server.uri).search_runs([experiment])
    assert sorted(r.data.metrics["loss"] for r in found) == [1.0, 2.0]
    assert leftover(run.id) == []
