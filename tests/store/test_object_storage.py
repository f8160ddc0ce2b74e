"""The storage layer (``store/object_storage.py``) against a real S3 server (moto on
loopback, ``support/s3_server.py``): what submit refuses before anything launches, what an
upload writes (files checked, the manifest last) and what reads back take as complete."""

from __future__ import annotations

import json
import socket

import pytest
from support.s3_server import s3, s3_server  # noqa: F401  (fixtures)

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError, StoreError
from jupyter_trainer.store.object_storage import Storage, check_url

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("bucket/runs", "is not a URL"),
        ("s3://", "names no bucket"),
        ("gs://bucket/runs", "pip install gcsfs"),
        ("az://container/runs", "pip install adlfs"),
        ("nosuch://bucket/runs", "fsspec does not know nosuch://"),
    ],
)
def test_a_bad_url_starts_nothing(home, url, words):
    with pytest.raises(SpecError, match=words):
        api.submit("print(1)", storage=url, hot=False)
    assert not list((home / "runs").glob("*")) if (home / "runs").exists() else True


def test_a_missing_bucket_refused_key_full_bucket_or_no_server_starts_nothing(
    home, s3, monkeypatch
):
    with pytest.raises(SpecError, match="the bucket does not exist"):
        api.submit("print(1)", storage="s3://jt-no-such-bucket/runs", hot=False)
    s3.faults.deny_key = "jt-test-key"
    with pytest.raises(SpecError, match="refused the credentials.*Access Key Id does not exist"):
        api.submit("print(1)", storage=s3.url, hot=False)
    s3.faults.deny_key, s3.faults.full = None, True
    with pytest.raises(SpecError, match="full or over its quota.*InsufficientStorage"):
        api.submit("print(1)", storage=s3.url, hot=False)
    s3.faults.full = False
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    with pytest.raises(SpecError, match="cannot be reached.*AWS_ENDPOINT_URL"):
        api.submit("print(1)", storage=s3.url, hot=False)
    assert api.runs() == []
    assert s3.objects() == []


def test_credentials_in_the_url_never_reach_the_record():
    url = "s3://user:hunter2@bucket/runs?X-Amz-Signature=abc123"
    assert check_url(url) == url
    from jupyter_trainer.core.spec import CodeSpec, RunSpec

    spec = RunSpec(name="n", code=CodeSpec(entry="main.py", hash="0" * 64), storage=url)
    text = json.dumps(spec.to_dict())
    assert "hunter2" not in text and "abc123" not in text and "bucket/runs" in text


def _step(folder, step, world=2, size=1000):
    d = folder / "checkpoints" / "dcp" / f"step-{step}"
    d.mkdir(parents=True)
    for r in range(world):
        (d / f"__{r}_0.distcp").write_bytes(bytes([step]) * size)
    (d / ".metadata").write_bytes(b"meta")
    for r in range(world):
        (d / f"done.{r}").write_text(json.dumps({"step": step, "rank": r, "world_size": world}))
    return d


def test_an_upload_is_whole_only_with_its_manifest_and_is_checked_on_the_way_back(tmp_path, s3):
    run = tmp_path / "run"
    _step(run, 1)
    _step(run, 2)
    storage = Storage.open(s3.url)
    manifest = storage.upload("r1", run, "checkpoints/dcp/step-1", {"kind": "dcp", "step": 1})
    assert set(manifest["files"]) == {
        f"checkpoints/dcp/step-1/{n}" for n in ("__0_0.distcp", "__1_0.distcp", ".metadata")
    } | {"checkpoints/dcp/step-1/done.0", "checkpoints/dcp/step-1/done.1"}
    # step 2's files without its manifest: what an upload killed half-way leaves
    for name in ("__0_0.distcp", ".metadata"):
        storage.fs.put_file(
            str(run / "checkpoints/dcp/step-2" / name),
            storage.path("r1", f"checkpoints/dcp/step-2/{name}"),
        )
    assert [m["step"] for m in storage.checkpoints("r1")] == [1]
    assert s3.objects()[-1] == "runs/r1/checkpoints/dcp/step-2/__0_0.distcp"

    back = storage.download("r1", storage.checkpoints("r1")[-1], tmp_path / "new")
    assert back == tmp_path / "new/checkpoints/dcp/step-1"
    assert (back / "__1_0.distcp").read_bytes() == bytes([1]) * 1000

    # a file changed in storage after its upload is refused, and nothing is left half-made
    s3.client.put_object(
        Bucket=s3.bucket, Key="runs/r1/checkpoints/dcp/step-1/__1_0.distcp", Body=b"x" * 1000
    )
    with pytest.raises(StoreError, match="does not match its manifest"):
        storage.download("r1", storage.checkpoints("r1")[-1], tmp_path / "other")
    assert not (tmp_path / "other/checkpoints/dcp/step-1").exists()


def test_a_full_bucket_fails_the_upload_with_its_reason_and_writes_no_manifest(tmp_path, s3):
    run = tmp_path / "run"
    _step(run, 3)
    storage = Storage.open(s3.url)
    s3.faults.full = True
    with pytest.raises(StoreError, match="full or over its quota"):
        storage.upload("r2", run, "checkpoints/dcp/step-3", {"kind": "dcp", "step": 3})
    s3.faults.full = False
    assert storage.checkpoints("r2") == []

    # saved again (a restart repeats a step) and uploaded again into a full bucket: the old
    # manifest is gone first, so old and new files are never taken for one checkpoint
    storage.upload("r2", run, "checkpoints/dcp/step-3", {"kind": "dcp", "step": 3})
    assert [m["step"] for m in storage.checkpoints("r2")] == [3]
    (run / "checkpoints/dcp/step-3/__1_0.distcp").write_bytes(b"new" * 100)
    s3.faults.full = True
    with pytest.raises(StoreError, match="full or over its quota"):
        storage.upload("r2", run, "checkpoints/dcp/step-3", {"kind": "dcp", "step": 3}, True)
    assert storage.checkpoints("r2") == []


def test_the_runs_url_wins_then_the_targets_then_the_workspaces(home):
    from jupyter_trainer.store.object_storage import resolve
    from jupyter_trainer.targets import get_target

    home.mkdir(parents=True, exist_ok=True)
    (home / "targets.toml").write_text(
        '[targets.far]\nkind = "local"\nstorage = "s3://target-bucket/runs"\n'
    )
    assert resolve(None, get_target("local", home), home) is None
    (home / "config.toml").write_text('storage = "s3://workspace-bucket/runs"\n')
    assert resolve(None, get_target("local", home), home) == "s3://workspace-bucket/runs"
    assert resolve(None, get_target("far", home), home) == "s3://target-bucket/runs"
    assert resolve("gs://own/runs", get_target("far", home), home) == "gs://own/runs"
    (home / "config.toml").write_text('storage = "workspace-bucket"\n')
    with pytest.raises(SpecError, match=r"storage in .*config.toml 'workspace-bucket' is not"):
        resolve(None, get_target("local", home), home)


def test_a_resume_passes_over_a_damaged_checkpoint_to_the_one_before_it(tmp_path, s3):
    run = tmp_path / "run"
    storage = Storage.open(s3.url)
    for step in (1, 2):
        _step(run, step)
        storage.upload("r3", run, f"checkpoints/dcp/step-{step}", {"kind": "dcp", "step": step})
    s3.client.put_object(
        Bucket=s3.bucket, Key="runs/r3/checkpoints/dcp/step-2/__0_0.distcp", Body=b"x" * 1000
    )
    with pytest.warns(UserWarning, match=r"checkpoints/dcp/step-2 of run r3 .* is damaged"):
        manifest, path = storage.newest_whole("r3", tmp_path / "new") or ({}, None)
    assert manifest["step"] == 1 and path == tmp_path / "new/dcp/step-1"
    assert not (tmp_path / "new/dcp/step-2").exists()

    # a file gone from the bucket: damaged too, and with nothing whole left, nothing
    s3.client.delete_object(Bucket=s3.bucket, Key="runs/r3/checkpoints/dcp/step-1/.metadata")
    with pytest.warns(UserWarning) as caught:
        assert storage.newest_whole("r3", tmp_path / "other") is None
    assert ["step-1/.metadata is missing" in str(w.message) for w in caught] == [False, True]
