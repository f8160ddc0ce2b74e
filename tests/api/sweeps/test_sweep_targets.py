"""Sweeps on the other targets: every trial is its own run there (on Slurm its own job), and
hostile values of a swept param cross ssh unchanged."""

from __future__ import annotations

import os

from conftest import leftover

import jupyter_trainer as jt

TRAIN = """
import os, torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group()
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
for step in range(3):
    jt.log(step=step, score=x * (step + 1) + t.item(), word=word)
print("rank", dist.get_rank(), "word", word, "node", os.environ.get("SLURM_JOB_ID", "ssh"))
dist.destroy_process_group()
"""
HOSTILE = 'x\'; $(touch /tmp/jt-sweep-pwned) `id` "y"'


def test_on_slurm_each_trial_is_its_own_job(cluster, home):
    sweep = jt.sweep(
        TRAIN,
        space={"x": "choice(1, 2, 3)", "word": "plain"},
        metric="score",
        trials=3,
        parallel=2,
        sampler="grid",
        target="cluster",
        procs=2,
        namespace={"x": 0, "word": ""},
    )
    sweep.wait(timeout=300)
    state = sweep.state
    assert state["status"] == "completed", state
    runs = sweep.trials()
    jobs = [run.state["launcher"]["job_id"] for run in runs]
    assert len(set(jobs)) == 3 and all(job.isdigit() for job in jobs)
    for run in runs:
        assert run.status == "completed" and run.state["scheduler"]["state"] == "COMPLETED"
        assert run.spec.target.name == "cluster" and run.spec.sweep == sweep.id
        assert f"word plain node {run.state['launcher']['job_id']}" in run.logs(1)
        assert leftover(run.id) == []
    assert state["best"]["objective"] == 3 * 3 + 3.0  # x=3 at step 2, plus the all-reduce


def test_over_ssh_hostile_values_reach_both_nodes_unchanged(pair, home):
    sweep = jt.sweep(
        TRAIN,
        space={"x": 2, "word": f"choice({HOSTILE!r}, 'ok')"},
        metric="score",
        trials=2,
        parallel=1,
        sampler="grid",
        target="pair",
        nodes=2,
        procs=1,
        namespace={"x": 0, "word": ""},
    )
    sweep.wait(timeout=300)
    assert sweep.status == "completed", sweep.state
    words = set()
    for run in sweep.trials():
        assert run.status == "completed"
        word = run.spec.params["word"]
        words.add(word)
        for rank in (0, 1):
            assert f"word {word} node ssh" in run.logs(rank)
    assert words == {HOSTILE, "ok"}
    assert not os.path.exists("/tmp/jt-sweep-pwned")
