"""How long a checkpoint takes from complete on disk to durable in object storage.

    .venv/bin/python bench/storage_upload.py [--mb 256] [--repeats 3] [--json PATH]

moto's S3 server runs on loopback (``ThreadedMotoServer``, in this process); the run's
uploader (``python -m jupyter_trainer.supervisor.storage_upload``, the process the supervisor
starts) follows a run folder of its own. Each round writes a sharded checkpoint as
``jt.checkpoint.save`` leaves it (``checkpoints/dcp/step-N/``: two shards of ``--mb``/2 MiB
of random bytes, DCP's ``.metadata``, then one ``done.<rank>`` per rank, the last of which
makes it complete) and times, from the moment the last ``done`` file is renamed into place,
until its manifest is in the bucket (``head_object`` every 5 ms): every file hashed,
uploaded and its size checked, the manifest written last. The uploader looks for new
checkpoints every ``SCAN_S`` (0.5 s), so up to that much of the time is waiting for its
next look. The uploader's own figure (``lag_s`` in ``storage.json``: from the newest file's
time to the manifest) is reported beside it. Everything is removed at the end.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHUNK = 16 << 20


def write_checkpoint(root: Path, step: int, mb: int) -> float:
    """A complete step folder; returns when its last done file was renamed into place."""
    folder = root / "checkpoints" / "dcp" / f"step-{step}"
    folder.mkdir(parents=True)
    block = os.urandom(CHUNK)
    for rank in range(2):
        with open(folder / f"__{rank}_0.distcp", "wb") as fh:
            left = (mb << 20) // 2
            while left > 0:
                fh.write(block[: min(left, CHUNK)])
                left -= CHUNK
            fh.flush()
            os.fsync(fh.fileno())
    (folder / ".metadata").write_bytes(b"metadata")
    for rank in range(2):
        tmp = folder / f"done.{rank}.tmp"
        tmp.write_text(json.dumps({"step": step, "rank": rank, "world_size": 2}))
        os.replace(tmp, folder / f"done.{rank}")
    return time.time()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=256, help="MiB per checkpoint")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import boto3
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    tmp = Path(tempfile.mkdtemp(prefix="jt-storage-bench-"))
    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "JUPYTER_TRAINER_HOME": str(tmp / "home"),
    }
    s3 = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    )
    s3.create_bucket(Bucket="bench")
    root = tmp / "run"
    (root / "checkpoints").mkdir(parents=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "jupyter_trainer.supervisor.storage_upload",
            str(root),
            "bench-run",
            "s3://bench/runs",
        ],
        stdin=subprocess.PIPE,
        env=env,
    )
    durable, lags = [], []
    try:
        for step in range(1, args.repeats + 1):
            complete = write_checkpoint(root, step, args.mb)
            key = f"runs/bench-run/.jt/manifests/checkpoints/dcp/step-{step}.json"
            while True:
                try:
                    s3.head_object(Bucket="bench", Key=key)
                    break
                except s3.exceptions.ClientError:
                    time.sleep(0.005)
                if proc.poll() is not None or time.time() - complete > 600:
                    raise SystemExit("the uploader stopped or took over 600 s")
            durable.append(time.time() - complete)
            deadline = time.time() + 10
            record: dict = {}
            while time.time() < deadline:
                record = json.loads((root / "storage.json").read_text())
                if any(c["step"] == step for c in record.get("checkpoints", [])):
                    break
                time.sleep(0.05)
            lags.extend(c["lag_s"] for c in record["checkpoints"] if c["step"] == step)
            print(f"step {step}: durable {durable[-1]:.2f} s after complete", flush=True)
            shutil.rmtree(root / "checkpoints" / "dcp" / f"step-{step}")
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(60)
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result = {
        "mb": args.mb,
        "repeats": args.repeats,
        "durable_s": [round(d, 3) for d in durable],
        "durable_median_s": round(statistics.median(durable), 3),
        "uploader_lag_median_s": round(statistics.median(lags), 3) if lags else None,
        "mb_per_s": round(args.mb / statistics.median(durable), 1),
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
    }
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
