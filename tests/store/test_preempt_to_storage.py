"""A preempted run whose checkpoints go to object storage (moto's S3 on loopback,
``support/s3_server.py``): a 2-rank torchrun run saves with ``jt.checkpoint.save``, is
preempted (``Run.preempt``, as ``jupyter-trainer preempt``), resumes on its next attempt and
ends with the same weights as a run never preempted; its checkpoints and outputs are in the
bucket, and a resume from another machine's view of the store (the record, none of the run's
files) starts from the bucket's newest whole checkpoint, never from a damaged one."""

from __future__ import annotations

import shutil

import pytest
from conftest import leftover, wait_for
from support.preemption_workload import (
    TRAIN,
    ended,
    final_weights,
    same_weights,
    saved_steps,
    uninterrupted,
)
from support.s3_server import s3, s3_server  # noqa: F401  (fixtures)

from jupyter_trainer.api import runs as api
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.store.object_storage import Storage

pytestmark = pytest.mark.timeout(300)

# a resume of a run that ended at its last step trains no step and still saves its weights
RESUMABLE = TRAIN.replace("for step in range(", "stop = 0\nfor step in range(", 1)


def test_a_preempted_run_resumes_from_storage_and_ends_as_one_never_preempted(home, s3):
    expected = uninterrupted()
    run = api.submit(
        RESUMABLE, procs=2, name="to-s3", params={"pause": 0.2}, storage=s3.url, hot=False
    )
    wait_for(lambda: any(s >= 4 for s in saved_steps(run)), 60, what="a checkpoint at step 4")
    entry = run.preempt(grace=30)
    assert entry is not None
    state = ended(run)
    [entry] = state["preemptions"]
    step = entry["step"]
    assert entry["resumed_attempt"] == 1 and entry["resumed_step"] == step, entry
    assert f"attempt 1 starts after step {step}" in run.logs(0)
    assert same_weights(final_weights(run), expected)

    # the preempted step, the last one and the weights are in the bucket, each whole
    record = state["storage"]
    assert record["state"] == "complete", record
    steps = [c["step"] for c in record["checkpoints"]]
    assert step in steps and steps[-1] == 30, steps
    storage = Storage.open(s3.url)
    assert [m["step"] for m in storage.checkpoints(run.id)] == steps
    assert "final.pt" in storage.outputs(run.id)
    assert f"runs/{run.id}/outputs/final.pt" in s3.objects()

    # another machine's view of the store: the run's record, none of its files
    shutil.rmtree(run.path / "checkpoints")
    shutil.rmtree(run.path / "outputs")
    listing = RunFeed(run).outputs_listing()  # the view's files: those in the bucket
    assert listing["files"] == [{"path": "final.pt", "bytes": storage.outputs(run.id)["final.pt"]}]
    model = run.register_model("tiny", "final.pt")
    assert [(f.path, f.size > 0) for f in model.files] == [("final.pt", True)]
    # and the newest checkpoint damaged in the bucket: the one before it is taken, said so
    s3.client.put_object(
        Bucket=s3.bucket, Key=f"runs/{run.id}/checkpoints/dcp/step-30/.metadata", Body=b"x"
    )
    with pytest.warns(UserWarning, match=r"checkpoints/dcp/step-30 of run .* is damaged"):
        again = api.resume(run.id)
    ended(again)
    assert "attempt 0 starts after step 28" in again.logs(0), again.logs(0)[-2000:]
    assert again.spec.lineage["checkpoint"] == "dcp/step-28", again.spec.lineage
    assert same_weights(final_weights(again), expected)
    assert leftover(run.id) == [] and leftover(again.id) == []
