"""Preemption on this machine: ``Run.preempt`` (``jupyter-trainer preempt``) tells every rank
(SIGUSR1, ``jt.preempted()``), the ranks checkpoint and return, the attempt ends as
``preempted`` and the next one resumes from the newest complete checkpoint
(``supervisor/preemption.py``, ``rankside/rank/preemption.py``), with real torchrun ranks on
Gloo. A run preempted once ends with the same weights as one never preempted; a checkpoint
being written when a rank was killed is never the one resumed from."""

from __future__ import annotations

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


def test_a_preempted_run_resumes_and_ends_as_one_never_preempted(home):
    plain = submit("plain")
    ended(plain)
    run = submit("preempted", pause=0.2)
    wait_for(lambda: any(s >= 4 for s in saved_steps(run)), 60, what="a checkpoint at step 4")
    done = cli("preempt", run.id, "--grace", "30")
    assert done.returncode == 0, done.stderr
    state = ended(run)
    [entry] = state["preemptions"]
    step = entry["step"]
    assert isinstance(step, int) and 4 <= step < 30 and not entry["killed"], entry
    assert entry["announced_ranks"] == [0, 1] and entry["resumed_attempt"] == 1, entry
    said = f"attempt 1 preempted at step {step}, resumed at step {step} on attempt 2"
    assert done.stdout.strip() == f"run {run.id}: {said}"
    assert f"attempt 1 starts after step {step}" in run.logs(0)
    assert said in cli("show", run.id).stdout
    assert same_weights(final_weights(run), final_weights(plain))
    assert same_weights(final_weights(plain), uninterrupted())  # what the Slurm test uses
    assert leftover(run.id) == [] and leftover(plain.id) == []


def test_a_checkpoint_half_written_when_a_rank_died_is_never_resumed_from(home):
    run = submit("died", pause=0.2, die=True)
    wait_for(lambda: any(s >= 4 for s in saved_steps(run)), 60, what="a checkpoint at step 4")
    entry = run.preempt(grace=10)
    assert entry is not None
    state = ended(run)
    [entry] = state["preemptions"]
    folder = run.path / "checkpoints" / "dcp" / "step-1000"
    assert folder.is_dir() and not (folder / "done.1").exists()  # rank 1 died first
    assert entry["step"] < 30 and entry["resumed_step"] == entry["step"], entry
    assert f"attempt 1 starts after step {entry['step']}" in run.logs(0)
    assert leftover(run.id) == []
