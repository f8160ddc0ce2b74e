"""Preemption on the Slurm target, on the test's single-host Slurm: a target with
``preemption = SECONDS`` submits with ``--requeue --signal=B:USR1@SECONDS``; the signal
Slurm sends the batch shell reaches every rank (``jt.preempted()``), the ranks checkpoint and
return, the job requeues itself, and Slurm runs it again as attempt 2, which resumes from
the newest complete checkpoint and ends with the same weights as a run never preempted
(``uninterrupted``, which tests/rankside/test_preemption.py checks against a real run)."""

from __future__ import annotations

import re

from conftest import leftover, wait_for
from support.jt_cli import cli
from support.preemption_workload import (
    ended,
    final_weights,
    same_weights,
    saved_steps,
    submit,
    uninterrupted,
)
from support.slurm_cluster import target


def test_slurms_signal_checkpoints_requeues_and_resumes(cluster, home):
    target(home, "cluster", preemption=60)
    run = submit("slurm-preempted", target="cluster", pause=0.3)
    wait_for(lambda: any(s >= 4 for s in saved_steps(run)), 90, what="a checkpoint at step 4")
    job = run.state["launcher"]["job_id"]
    assert {"--requeue", "--signal=B:USR1@60"} <= set(run.state["launcher"]["argv"])
    cluster.run("scancel", "--signal=USR1", "--batch", job)  # the scheduler's notice
    wait_for(lambda: run.state.get("preemptions"), 60, what="the job requeued")

    def started_now() -> bool:
        """Slurm holds a requeued job about two minutes (Reason=BeginTime); the test's
        admin lets it start now, each time it is requeued."""
        if "BeginTime" in cluster.run("squeue", "-h", "-j", job, "-o", "%r", check=False).stdout:
            cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now", check=False)
        return run.status not in ("queued", "running")

    wait_for(started_now, 120, interval=1, what="the run's end")
    state = ended(run, timeout=30)
    [entry] = state["preemptions"]
    assert entry["reason"] == "preempted by the scheduler" and not entry["killed"], entry
    step = entry["step"]
    assert isinstance(step, int) and 4 <= step < 30 and entry["resumed_attempt"] == 1, entry
    assert state["launcher"]["job_id"] == job  # the same job, requeued by Slurm
    # Slurm counts each requeue: a job whose own requeue raced its end is requeued again
    assert re.search(rf"attempt [12] starts after step {step}\n", run.logs(0)), run.logs(0)
    said = f"attempt 1 preempted at step {step}, resumed at step {step} on attempt 2"
    assert said in cli("show", run.id).stdout
    assert same_weights(final_weights(run), uninterrupted())
    assert leftover(run.id) == []
