"""The Slurm target on a cluster with accounting (slurmdbd + MariaDB on loopback), so the
final state of a job really comes from ``sacct``, not from ``scontrol``.

Both runs share one test (and so one cluster per session): under ``pytest -n`` two tests
could land on two workers and each would start its own database.
"""

from __future__ import annotations

import pytest
from conftest import leftover
from support.slurm_cluster import as_target, start_cluster, worker_index

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed

TRAIN = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
jt.log(step=0, total=t.item())
print("rank", dist.get_rank(), "of", dist.get_world_size(), "sum", t.item())
dist.destroy_process_group()
"""
FAIL = "from jupyter_trainer import runtime as jt\njt.log(step=0, up=1)\nraise SystemExit(3)\n"


@pytest.fixture(scope="session")
def slurm_acct(tmp_path_factory, worker_id):
    cluster = start_cluster(
        tmp_path_factory.mktemp("slurm-acct"), worker_index(worker_id), accounting=True
    )
    yield cluster
    cluster.stop()


@pytest.fixture
def cluster(slurm_acct, home, monkeypatch):
    with as_target(slurm_acct, home, monkeypatch) as cluster:
        yield cluster


def test_final_state_and_exit_code_come_from_sacct(cluster, home):
    # The failing run takes one CPU, the 2-rank run both: they run one after the other.
    failing = api.submit(FAIL, target="cluster", launcher="python", name="acct-fail")
    good = api.submit(TRAIN, target="cluster", procs=2, name="acct-ddp")

    good.wait(timeout=120)
    state = good.state
    assert state["status"] == "completed"
    assert state["scheduler"]["source"] == "sacct", state["scheduler"]
    assert state["scheduler"]["state"] == "COMPLETED" and state["scheduler"]["exit_code"] == 0
    for rank in (0, 1):
        assert f"rank {rank} of 2 sum 3.0" in good.logs(rank)
    job = state["launcher"]["job_id"]
    assert cluster.sacct(job) == "COMPLETED|0:0"

    with pytest.raises(RunFailed):
        failing.wait(timeout=120)
    state = failing.state
    assert state["status"] == "failed"
    assert state["scheduler"]["source"] == "sacct", state["scheduler"]
    assert state["scheduler"]["state"] == "FAILED" and state["scheduler"]["exit_code"] == 3
    assert cluster.sacct(state["launcher"]["job_id"]) == "FAILED|3:0"
    assert leftover(good.id) == [] and leftover(failing.id) == []
