"""The Slurm target with its run folders on the cluster: a ``workdir`` apart from the run
store, and a ``login`` node reached over real sshd (127.0.0.2, alias n1) where every Slurm
command runs. The test's Slurm and the login node share this machine, so the cluster's
"shared filesystem" is a folder here that the run store is not in."""

from __future__ import annotations

import os

import pytest
from conftest import leftover, wait_for
from support.slurm_cluster import login, target  # noqa: F401 (login: a fixture)
from support.workloads import SLEEPER

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed, TargetError

TRAIN = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
for step in range(steps):
    jt.log(step=step, loss=1.0 / (step + 1))
    jt.progress(step + 1, steps)
if jt.rank == 0:
    (jt.outputs_dir / "weights.txt").write_text(str(t.item()))
print("rank", dist.get_rank(), "sum", t.item(), "dir", jt.run_dir, flush=True)
dist.destroy_process_group()
"""


def test_workdir_apart_from_the_store_is_staged_and_mirrored(cluster, home, tmp_path):
    shared = tmp_path / "shared"
    target(home, "apart", workdir=str(shared))
    run = api.submit(TRAIN, namespace={"steps": 4}, target="apart", procs=2, name="slurm-apart")
    run.wait(timeout=120)
    remote = shared / "runs" / run.id
    assert run.state["launcher"]["run_dir_remote"] == str(remote)
    assert (remote / "code").resolve().parent == shared / "snapshots"
    for rank in (0, 1):
        assert f"rank {rank} sum 3.0 dir {remote}" in run.logs(rank)  # mirrored here
    assert [s for s, _ in run.metrics(rank=1)["loss"]] == [0, 1, 2, 3]
    assert (run.outputs / "weights.txt").read_text() == "3.0"
    assert run.state["scheduler"]["state"] == "COMPLETED"
    assert not (home / "runs" / run.id / "logs" / "rank-0.log").is_symlink()
    again = api.submit(TRAIN, namespace={"steps": 4}, target="apart", procs=2, name="again")
    again.wait(timeout=120)
    assert again.state["launcher"]["staging"]["sent"] is False  # the snapshot was there
    assert leftover(run.id) == [] and leftover(again.id) == []


def test_login_node_runs_every_slurm_command_over_ssh(login, home, tmp_path):
    run = api.submit(TRAIN, namespace={"steps": 3}, target="hpc", procs=2, name="slurm-login")
    run.wait(timeout=120)
    assert run.state["launcher"]["login"] == "n1"
    assert run.state["scheduler"]["state"] == "COMPLETED"
    assert "rank 1 sum 3.0" in run.logs(1)
    assert (run.outputs / "weights.txt").read_text() == "3.0"
    assert leftover(run.id) == []


def test_cancel_through_the_login_node(login, home):
    run = api.submit(SLEEPER, target="hpc", procs=2, name="slurm-login-cancel")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in (0, 1)),
        timeout=60,
        what="both ranks to log, mirrored from the cluster folder",
    )
    job = run.state["launcher"]["job_id"]
    run.cancel(timeout=60)
    assert run.status == "canceled" and leftover(run.id) == []
    assert login.run("squeue", "-h", "-s", "-j", job, check=False).stdout.strip() == ""
    assert run.state["scheduler"]["state"] == "CANCELLED"


def test_environment_is_built_on_the_cluster_through_the_login_node(login, home, ip, tmp_path):
    env = "%%environment hpcenv\ninherit: true\npip:\n  - six==1.16.0\n"
    assert ip.run_cell(env, store_history=True).success
    code = (
        "import six, sys\nfrom jupyter_trainer import runtime as jt\n"
        "print('six', six.__version__, 'python', sys.executable)\n"
    )
    run = api.submit(code, target="hpc", launcher="python", env="hpcenv", name="slurm-env")
    run.wait(timeout=300)
    venvs = tmp_path / "shared" / "envs" / "venvs"
    assert "six 1.16.0 python " + str(venvs) in run.logs(0)
    assert run.state["environment"]["built"] is True
    assert run.state["environment"]["on"] == "n1"
    again = api.submit(code, target="hpc", launcher="python", env="hpcenv", name="slurm-env2")
    again.wait(timeout=120)
    assert again.state["environment"]["built"] is False


def test_unreachable_login_node_fails_naming_it_and_submits_nothing(login, home, tmp_path):
    target(home, "gone", login="nobody@127.0.0.9", workdir=str(tmp_path / "w"), connect_timeout=2)
    run = api.submit("print(1)", target="gone", launcher="python", name="slurm-gone")
    with pytest.raises(RunFailed) as failed:
        run.wait(timeout=60)
    assert "node nobody@127.0.0.9" in str(failed.value)
    assert "job_id" not in run.state.get("launcher", {}) and login.queue() == []


def test_login_env_without_login_is_refused(home):
    target(home, "bad", login_env={"SLURM_CONF": "/x"})
    with pytest.raises(TargetError, match="login_env is for the Slurm commands"):
        api.submit("print(1)", target="bad", launcher="python")
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_sbatch_refusal_fails_the_run_and_stops_following_the_folder(cluster, home, tmp_path):
    target(home, "wrongpart", workdir=str(tmp_path / "shared"))
    text = (
        (home / "targets.toml")
        .read_text()
        .replace('partition = "debug"', 'partition = "no-such-partition"')
    )
    (home / "targets.toml").write_text(text)
    run = api.submit("print(1)", target="wrongpart", launcher="python", name="slurm-refused")
    with pytest.raises(RunFailed, match="sbatch refused the job"):
        run.wait(timeout=60)

    def mentioning_the_run() -> list[str]:
        found = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if run.id.encode() in fh.read():
                        found.append(pid)
            except OSError:
                pass
        return found

    assert wait_for(lambda: mentioning_the_run() == [], timeout=10, what="no follower left")


READ_DATA = """
import hashlib
from jupyter_trainer import runtime as jt
path = jt.data["train"] / "part.bin"
print("data", jt.rank, path, hashlib.sha256(path.read_bytes()).hexdigest(), flush=True)
"""


def test_data_is_staged_once_into_the_cluster_workdir_through_the_login_node(login, home, tmp_path):
    data = tmp_path / "dataset"
    data.mkdir()
    payload = os.urandom(1 << 20)
    (data / "part.bin").write_bytes(payload)
    digest = __import__("hashlib").sha256(payload).hexdigest()
    runs = [
        api.submit(
            READ_DATA, target="hpc", procs=2, name=f"slurm-data-{k}", data={"train": str(data)}
        ).wait(timeout=120)
        for k in range(2)
    ]
    cached = tmp_path / "shared" / "data" / runs[0].spec.data[0].hash / "dataset" / "part.bin"
    for run in runs:
        for rank in (0, 1):
            assert f"data {rank} {cached} {digest}" in run.logs(rank)
    first, second = (r.state["launcher"]["staging"]["data"]["train"]["n1"] for r in runs)
    assert (first["state"], first["tool"], first["transferred"]) == ("sent", "rsync", 1 << 20)
    assert second["state"] == "cached"
