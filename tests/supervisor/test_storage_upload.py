"""Checkpoints and outputs uploaded to object storage as a run goes
(``supervisor/storage_upload.py``), against moto's S3 on loopback behind a proxy that is slow,
full, refuses the key or holds an upload in the middle (``support/s3_server.py``).

A 2-rank torchrun run saves sharded checkpoints through a slow server: training does not
wait for the uploads, its checkpoints and outputs end up in the bucket and in the run's
record, and with the local copies deleted, ``files`` and ``rerun --resume`` read them from
the bucket. An uploader killed in the middle of a file, a full bucket and a refused key
each leave no checkpoint that a resume would take.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import wait_for
from support.s3_server import s3, s3_server  # noqa: F401  (fixtures)

from jupyter_trainer.api import runs as api
from jupyter_trainer.store.object_storage import Storage
from jupyter_trainer.supervisor.storage_upload import read_record

pytestmark = pytest.mark.timeout(240)

CELL = """
import time
import torch, torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
msd, _ = get_state_dict(model, [])
state = {"model": msd, "step": 0}
start = jt.checkpoint.load(state)
print(f"loaded {start} step {state['step']}", flush=True)
for step in range((start or 0) + 1, 3):
    with torch.no_grad():
        model.module.weight.add_(1.0)
    t = time.monotonic()
    jt.checkpoint.save({"model": get_state_dict(model, [])[0], "step": step}, step)
    jt.log(step=step, stall=time.monotonic() - t)
jt.checkpoint.wait()
if jt.rank == 0:
    (jt.outputs_dir / "result.txt").write_text(str(float(model.module.weight.sum())))
dist.destroy_process_group()
"""


def test_a_run_uploads_as_it_goes_and_resumes_from_the_bucket(home, s3):
    s3.faults.delay = 0.15  # every request: a checkpoint takes seconds to reach the bucket
    run = api.submit(CELL, procs=2, name="to-s3", storage=s3.url, hot=False)
    run.wait(timeout=180, raise_on_failure=False)
    assert run.status == "completed", run.logs(0)[-3000:]
    record = run.state["storage"]
    assert record["state"] == "complete" and record["url"] == s3.url, record
    assert [c["step"] for c in record["checkpoints"]] == [1, 2]
    assert record["outputs"]["files"] == 1
    keys = s3.objects()
    prefix = f"runs/{run.id}/"
    assert f"{prefix}checkpoints/dcp/step-2/.metadata" in keys
    assert f"{prefix}.jt/manifests/checkpoints/dcp/step-2.json" in keys
    assert f"{prefix}outputs/result.txt" in keys
    # the uploads lagged behind (a slow server), the training did not wait for them
    stalls = [value for _, value in run.metrics().get("stall", [])]
    assert len(stalls) == 2 and max(stalls) < 2.0, stalls
    assert record["checkpoints"][-1]["lag_s"] > 0.5, record
    ranks_ended = max(r["ended"] for r in run.store.rank_records(run.id).values())
    assert ranks_ended < record["checkpoints"][-1]["uploaded_at"], (ranks_ended, record)

    # another machine's view of the store: the run's record, none of its files
    shutil.rmtree(run.path / "checkpoints")
    shutil.rmtree(run.path / "outputs")
    assert [(f.path, f.size > 0) for f in run.files()] == [("result.txt", True)]
    got = run.download("*.txt", home.parent / "got")
    assert got == [home.parent / "got" / "result.txt"] and float(got[0].read_text())

    s3.faults.delay = 0.0
    again = api.resume(run.id)
    again.wait(timeout=180, raise_on_failure=False)
    assert again.status == "completed", again.logs(0)[-3000:]
    assert "loaded 2 step 2" in again.logs(0), again.logs(0)[-2000:]
    assert again.spec.lineage["storage"] == s3.url


def _run_folder(tmp_path, size=1 << 20):
    root = tmp_path / "run"
    step = root / "checkpoints" / "dcp" / "step-1"
    step.mkdir(parents=True)
    for r in range(2):
        (step / f"__{r}_0.distcp").write_bytes(os.urandom(size))
    (step / ".metadata").write_bytes(b"meta")
    for r in range(2):
        (step / f"done.{r}").write_text(json.dumps({"step": 1, "rank": r, "world_size": 2}))
    return root


def _uploader(root, run_id, url):
    argv = [sys.executable, "-m", "jupyter_trainer.supervisor.storage_upload"]
    return subprocess.Popen([*argv, str(root), run_id, url], stdin=subprocess.PIPE)


def test_an_uploader_killed_in_the_middle_of_a_file_leaves_no_checkpoint(home, tmp_path, s3):
    root = _run_folder(tmp_path)
    s3.faults.hold = "step-1/__1_0.distcp"
    proc = _uploader(root, "r-killed", s3.url)
    try:
        assert s3.faults.held.wait(60), "the upload of the second shard never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        s3.faults.release.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    storage = Storage.open(s3.url)
    assert "runs/r-killed/checkpoints/dcp/step-1/__0_0.distcp" in s3.objects()
    assert storage.checkpoints("r-killed") == []
    assert read_record(root)["state"] == "uploading"

    s3.faults.hold = None  # started again, it uploads the step whole
    proc = _uploader(root, "r-killed", s3.url)
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert [m["step"] for m in storage.checkpoints("r-killed")] == [1]
    assert read_record(root)["checkpoints"][0]["files"] == 5


@pytest.mark.parametrize(
    ("fault", "words"),
    [("full", "full or over its quota"), ("deny_key", "refused the credentials")],
)
def test_a_full_bucket_or_a_refused_key_fails_the_upload_clearly(home, tmp_path, s3, fault, words):
    root = _run_folder(tmp_path, size=1000)
    setattr(s3.faults, fault, True if fault == "full" else "jt-test-key")
    proc = _uploader(root, "r-fault", s3.url)
    proc.communicate(timeout=120)
    record = read_record(root)
    assert proc.returncode == 1 and record["state"] == "failed", record
    assert words in record["error"] and record["failed"] == ["checkpoints/dcp/step-1"]
    setattr(s3.faults, fault, None if fault == "deny_key" else False)
    assert Storage.open(s3.url).checkpoints("r-fault") == []
    wait_for(lambda: proc.poll() is not None, what="the uploader's end")


def test_single_file_checkpoints_and_outputs_are_uploaded_and_files_being_written_are_not(
    home, tmp_path, s3
):
    root = tmp_path / "run"
    (root / "checkpoints").mkdir(parents=True)
    (root / "checkpoints" / "step-4.pt").write_bytes(b"four" * 100)
    (root / "checkpoints" / ".step-5.pt.tmp").write_bytes(b"half")  # being written
    (root / "outputs" / "a").mkdir(parents=True)
    (root / "outputs" / "a" / "b.txt").write_text("b")
    proc = _uploader(root, "r-files", s3.url)
    proc.communicate(timeout=120)
    assert proc.returncode == 0, read_record(root)
    storage = Storage.open(s3.url)
    assert [(m["kind"], m["step"], m["path"]) for m in storage.checkpoints("r-files")] == [
        ("file", 4, "checkpoints/step-4.pt")
    ]
    assert storage.outputs("r-files") == {"a/b.txt": 1}
    assert not [k for k in s3.objects() if "step-5" in k]


def test_framework_checkpoints_are_uploaded_whole_and_resumed_from(home, tmp_path, s3):
    import torch

    root = tmp_path / "run"
    hf = root / "checkpoints" / "hf"
    for step, whole in ((3, True), (4, False)):  # checkpoint-4: trainer_state.json not yet
        (hf / f"checkpoint-{step}").mkdir(parents=True)
        (hf / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"w" * 100)
        if whole:
            (hf / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    pl = root / "checkpoints" / "lightning"
    pl.mkdir(parents=True)
    torch.save({"w": torch.ones(3)}, pl / "epoch=0-step=8.ckpt")
    (pl / "epoch=0-step=9.ckpt").write_bytes((pl / "epoch=0-step=8.ckpt").read_bytes()[:50])
    acc = root / "checkpoints" / "acc"
    (acc / "checkpoint_1").mkdir(parents=True)
    (acc / "checkpoint_1" / "model.bin").write_bytes(b"a" * 10)
    (acc / ".accelerate-state").write_text("checkpoint_1")
    later = time.time_ns() + 10**10
    os.utime(pl / "epoch=0-step=8.ckpt", ns=(later, later))  # saved last of all
    proc = _uploader(root, "r-fw", s3.url)
    proc.communicate(timeout=120)
    assert proc.returncode == 0, read_record(root)
    storage = Storage.open(s3.url)
    found = storage.checkpoints("r-fw")
    assert sorted((m["kind"], m["step"], m["path"]) for m in found) == [
        ("framework", 1, "checkpoints/acc/checkpoint_1"),
        ("framework", 3, "checkpoints/hf/checkpoint-3"),
        ("framework", 8, "checkpoints/lightning/epoch=0-step=8.ckpt"),
    ]
    assert found[-1]["path"] == "checkpoints/lightning/epoch=0-step=8.ckpt"  # the newest
    assert sorted(c["path"] for c in read_record(root)["checkpoints"]) == [
        m["path"] for m in sorted(found, key=lambda m: m["path"])
    ]
    manifest, path = storage.newest_whole("r-fw", tmp_path / "new") or ({}, None)
    assert path == tmp_path / "new/lightning/epoch=0-step=8.ckpt"
    assert torch.equal(torch.load(path)["w"], torch.ones(3))
