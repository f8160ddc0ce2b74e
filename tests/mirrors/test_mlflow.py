"""Runs mirrored to a real MLflow tracking server (``mlflow server`` on loopback, SQLite
backend): params, every metric value with its step per rank, tags, the outputs as artifacts
and registered models read back with ``MlflowClient``; a server that is down or hangs never
changes a run's outcome, and ``jupyter-trainer mlflow sync`` fills the record in later."""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import wait_for
from mlflow import MlflowClient
from support.jt_cli import cli

from jupyter_trainer.api import runs as api
from jupyter_trainer.mirrors.tensorboard.server import end_group, group_alive
from jupyter_trainer.rankside.host import procs

STEPS = 2000
PARAMS = {"lr": 0.1, "opt": {"name": "adam", "betas": [0.9, 0.999]}, "amp": False, "tag": "x y"}
CODE = f"""\
import os
from jupyter_trainer import runtime as jt
for i in range({STEPS}):
    jt.log(step=i, loss=1.0 / (i + 1) + jt.rank, lr=0.1 * 0.5 ** (i // 500))
for i in range(3):
    jt.log(acc=0.25 * i + jt.rank)  # no step given: 0, 1, 2
jt.log(step={STEPS}, loss=float("nan"))
jt.log(step={STEPS} + 1, loss=float("inf"))
jt.log(phase="done")
if jt.rank == 0:
    with open(os.path.join(jt.outputs_dir, "model.pt"), "w") as fh:
        fh.write("weights")
    os.makedirs(os.path.join(jt.outputs_dir, "plots"))
    with open(os.path.join(jt.outputs_dir, "plots", "loss.txt"), "w") as fh:
        fh.write("a plot")
    os.symlink("model.pt", os.path.join(jt.outputs_dir, "alias.pt"))  # a file of outputs/
    os.symlink(os.path.abspath(os.path.join(jt.run_dir, "spec.json")),
               os.path.join(jt.outputs_dir, "outside.json"))  # never uploaded
"""


def expected(rank: int) -> dict[str, list[tuple[int, float]]]:
    """(step, value) of each metric that CODE logs on ``rank``, as MLflow keeps them."""
    loss = [(i, 1.0 / (i + 1) + rank) for i in range(STEPS)]
    loss += [(STEPS, math.nan), (STEPS + 1, sys.float_info.max)]  # MLflow: inf as max double
    return {
        "loss": loss,
        "lr": [(i, 0.1 * 0.5 ** (i // 500)) for i in range(STEPS)],
        "acc": [(i, 0.25 * i + rank) for i in range(3)],
    }


class Server:
    """``mlflow server`` on 127.0.0.1:``port`` in its own process group."""

    def __init__(self, folder: Path, port: int) -> None:
        self.folder, self.port = folder, port
        self.uri = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> Server:
        self.folder.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            f"sqlite:///{self.folder / 'mlflow.db'}",
            "--default-artifact-root",
            str(self.folder / "artifacts"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
        ]
        log = open(self.folder / "server.log", "ab")
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                text = (self.folder / "server.log").read_text(errors="replace")[-3000:]
                self.stop()
                raise AssertionError(f"mlflow server did not answer on {self.uri}:\n{text}")
            time.sleep(0.25)

    def stop(self) -> None:
        """SIGTERM the server's process group (uvicorn, its workers, the job runner), then
        SIGKILL what is left; no process of it remains."""
        if self.proc is not None:
            end_group(self.proc, grace=15)
            assert not group_alive(self.proc.pid)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("mlflow"), procs.free_port()).start()
    yield running
    running.stop()


def mirrored(run: api.Run, timeout: float = 120.0) -> dict:
    """The run's ``state["mlflow"]`` once its supervisor has written it and exited."""
    record = wait_for(lambda: run.state.get("mlflow"), timeout=timeout, what="state['mlflow']")
    pid = (run.state.get("supervisor") or {}).get("pid")
    wait_for(lambda: not procs.is_alive(pid), timeout=30, what="the supervisor's exit")
    return record


def history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    return [(m.step, m.value) for m in points]


def same(got: list, want: list) -> bool:
    return len(got) == len(want) and all(
        g == w or (isinstance(g, float) and math.isnan(g) and math.isnan(w))
        for got_row, want_row in zip(got, want)
        for g, w in zip(got_row, want_row)
    )


def test_a_run_is_mirrored_whole_and_a_second_sync_adds_nothing(home, server, tmp_path):
    digits = tmp_path / "digits.csv"
    digits.write_text("1,2,3\n")
    run = api.submit(
        CODE,
        launcher="python",
        system_interval=0,
        name="mirror-exp",
        params=PARAMS,
        data={"digits": str(digits)},
        mlflow=server.uri,
        wait=True,
    )
    record = mirrored(run)
    assert run.status == "completed"
    assert record["status"] == "synced" and record["error"] is None, record
    assert record["uri"] == server.uri and record["experiment"] == "mirror-exp"
    assert record["metrics"] == 2 * STEPS + 5 and record["artifacts"] == 3
    print(f"mirrored {record['metrics']} metric values in {record['seconds']} s")

    client = MlflowClient(server.uri)
    found = client.get_run(record["mlflow_run_id"])
    assert found.info.run_name == run.id and found.info.status == "FINISHED"
    assert client.get_experiment(found.info.experiment_id).name == "mirror-exp"
    assert found.info.start_time == int(run.state["created"] * 1000)
    assert found.info.end_time == int(run.state["ended"] * 1000)
    assert found.data.params == {
        "lr": "0.1",
        "opt.name": "adam",
        "opt.betas": "[0.9, 0.999]",
        "amp": "false",
        "tag": "x y",
    }
    tags = found.data.tags
    data = run.spec.data[0]
    want_tags = {
        "run_id": run.id,
        "status": "completed",
        "target": "local",
        "launcher": "python",
        "nodes": "1",
        "procs": "1",
        "world_size": "1",
        "code_hash": run.spec.code.hash,
        "data.digits": data.hash,
        "data.digits.source": data.source,
        "text.phase": "done",
    }
    assert {k: tags.get(f"jupyter_trainer.{k}") for k in want_tags} == want_tags
    assert set(found.data.metrics) == {"loss", "lr", "acc"}  # one rank: no /rank-N
    for name, want in expected(0).items():
        assert same(history(client, found.info.run_id, name), want), name
    times = [
        int(e["t"] * 1000)
        for e in run.store.iter_events(run.id, 0)
        if e["kind"] == "metric" and "lr" in e["values"]
    ]
    assert [
        m.timestamp
        for m in sorted(client.get_metric_history(found.info.run_id, "lr"), key=lambda m: m.step)
    ] == times
    got = Path(client.download_artifacts(found.info.run_id, "outputs", str(tmp_path / "dl")))
    assert (got / "model.pt").read_text() == "weights"
    assert (got / "plots" / "loss.txt").read_text() == "a plot"
    assert (got / "alias.pt").read_text() == "weights" and not (got / "alias.pt").is_symlink()
    assert not (got / "outside.json").exists()

    # Registering a model of the run registers it in MLflow at once, with our version.
    first = run.register_model("mirror-net", "model.pt", tags={"stage": "dev"})
    second = run.register_model("mirror-net", "model.pt")
    assert first.mlflow["status"] == "synced" and second.mlflow["status"] == "synced"
    versions = {
        v.tags["jupyter_trainer.version"]: v
        for v in client.search_model_versions("name = 'mirror-net'")
    }
    assert sorted(versions) == ["1", "2"]
    assert versions["1"].run_id == found.info.run_id
    assert versions["1"].tags["jupyter_trainer.run_id"] == run.id
    assert versions["1"].tags["jupyter_trainer.tag.stage"] == "dev"
    model_file = client.download_artifacts(
        found.info.run_id, "models/mirror-net/1/model.pt", str(tmp_path / "model")
    )
    assert Path(model_file).read_text() == "weights"

    # Syncing again updates the same MLflow run: no second run, point or model version.
    done = cli("mlflow", "sync", run.id, "--json")
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stdout)
    assert again["mlflow_run_id"] == found.info.run_id and again["status"] == "synced"
    assert sorted(again["models"]) == ["mirror-net@1", "mirror-net@2"]
    assert run.state["mlflow"] == again
    assert len(client.search_runs([found.info.experiment_id])) == 1
    assert len(client.get_metric_history(found.info.run_id, "loss")) == STEPS + 2
    assert len(client.search_model_versions("name = 'mirror-net'")) == 2


def test_torchrun_ranks_get_their_own_metrics_and_the_magic_syncs(ip, home, server, capsys):
    run = api.submit(
        CODE, procs=2, name="mirror-ddp", mlflow=server.uri, system_interval=0, wait=True
    )
    record = mirrored(run)
    assert record["status"] == "synced", record
    assert record["metrics"] == 2 * (2 * STEPS + 5)
    client = MlflowClient(server.uri)
    found = client.get_run(record["mlflow_run_id"])
    assert set(found.data.metrics) == {
        "loss",
        "lr",
        "acc",
        "loss/rank-1",
        "lr/rank-1",
        "acc/rank-1",
    }
    assert found.data.tags["jupyter_trainer.launcher"] == "torchrun"
    assert found.data.tags["jupyter_trainer.world_size"] == "2"
    for rank, suffix in ((0, ""), (1, "/rank-1")):
        for name, want in expected(rank).items():
            assert same(history(client, found.info.run_id, name + suffix), want), (rank, name)

    assert ip.run_cell(f"%train mlflow sync {run.id}", store_history=True).success
    out = capsys.readouterr().out
    assert f"{run.id} -> MLflow run {found.info.run_id} in experiment 'mirror-ddp'" in out, out


def test_system_figures_are_mirrored_as_system_metrics(home, server):
    run = api.submit(
        "import time; time.sleep(2.5)",
        launcher="python",
        name="mirror-system",
        mlflow=server.uri,
        system_interval=0.5,
        wait=True,
    )
    record = mirrored(run)
    assert record["status"] == "synced", record
    client = MlflowClient(server.uri)
    found = client.get_run(record["mlflow_run_id"])
    figures = run.system()
    assert set(found.data.metrics) == {f"system/{name}" for name in figures}
    assert len(figures["rss_bytes"]) >= 3
    for name, points in figures.items():
        got = history(client, record["mlflow_run_id"], f"system/{name}")
        assert got == [(i, value) for i, (_, value) in enumerate(points)], name


def test_a_down_server_fails_only_the_mirror_and_sync_fills_it_in(home, tmp_path):
    later = Server(tmp_path / "later", procs.free_port())  # nothing listens there yet
    run = api.submit(CODE, launcher="python", name="mirror-down", mlflow=later.uri, wait=True)
    record = mirrored(run)
    assert run.status == "completed" and run.state.get("error") is None
    assert record["status"] == "failed" and record["uri"] == later.uri, record
    assert str(later.port) in record["error"] and record["mlflow_run_id"] is None
    with pytest.warns(RuntimeWarning, match="not in MLflow"):
        model = run.register_model("down-net", "model.pt")
    assert model.mlflow["status"] == "failed" and api.get_run(run.id).status == "completed"

    later.start()
    try:
        done = cli("mlflow", "sync", run.id)  # the real CLI, in its own process
        assert done.returncode == 0, done.stderr
        assert f"{run.id} -> MLflow run" in done.stdout and "down-net@1" in done.stdout
        record = run.state["mlflow"]
        assert record["status"] == "synced" and record["error"] is None
        client = MlflowClient(later.uri)
        assert same(history(client, record["mlflow_run_id"], "loss"), expected(0)["loss"])
        [version] = client.search_model_versions("name = 'down-net'")
        assert version.tags["jupyter_trainer.version"] == "1"
    finally:
        later.stop()


def test_a_hanging_server_is_given_up_on_after_the_time_limit(home, monkeypatch):
    silent = socket.socket()  # accepts connections (the backlog) and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
    monkeypatch.setenv("JT_MLFLOW_TIMEOUT", "3")
    try:
        start = time.monotonic()
        run = api.submit("print('hi')", launcher="python", mlflow=uri, wait=True)
        record = mirrored(run, timeout=60)
        assert time.monotonic() - start < 45
    finally:
        silent.close()
    assert run.status == "completed"
    assert record["status"] == "failed" and "did not end within 3 s" in record["error"], record


def test_bad_run_no_uri_and_missing_mlflow_name_the_fix(home, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    run = api.submit("print('hi')", launcher="python", wait=True)
    done = cli("mlflow", "sync", "no-such-run")
    assert done.returncode == 2 and "jupyter-trainer runs" in done.stderr, done.stderr
    done = cli("mlflow", "sync", run.id)
    assert (
        done.returncode == 2 and "--uri URI" in done.stderr and "MLFLOW_TRACKING_URI" in done.stderr
    ), done.stderr
    assert "mlflow" not in run.state

    code = (
        "import sys; sys.modules['mlflow'] = None\n"
        "from jupyter_trainer.frontends.cli import main\n"
        f"sys.exit(main(['mlflow', 'sync', {run.id!r}, '--uri', 'http://127.0.0.1:9']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "pip install jupyter_trainer[mlflow]" in done.stderr, done.stderr
    record = run.state["mlflow"]
    assert record["status"] == "failed" and "jupyter_trainer[mlflow]" in record["error"]


def test_the_worker_without_mlflow_records_the_extra(home):
    """The child that mirrors (what the supervisor runs) without MLflow: a failed record that
    names the extra, not a crash."""
    run = api.submit("print('hi')", launcher="python", wait=True)
    code = (
        "import sys; sys.modules['mlflow'] = None\n"
        "from jupyter_trainer.mirrors.mlflow.sync import main\n"
        f"sys.exit(main(['worker', {run.id!r}, '--uri', 'http://127.0.0.1:9', '--record']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    record = json.loads(done.stdout.strip().splitlines()[-1])
    assert record["status"] == "failed"
    assert "pip install jupyter_trainer[mlflow]" in record["error"]
    assert run.state["mlflow"] == record
