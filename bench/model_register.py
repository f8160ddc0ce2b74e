"""What registering a large model costs, against ``cp`` of the same file.

    .venv/bin/python bench/model_register.py [--size-mb 500] [--repeats 7] [--json PATH]

A real run (launcher ``python``) is started in a fresh run store; a file of ``--size-mb``
random bytes is then written into its ``outputs/`` and synced to disk. Each repeat times,
in alternating order, ``cp SRC DEST`` (a process, as a user would run it) and
``run.register_model("bench", "model.bin")`` (the API call: lineage, copy, sha256 of the
copy, index row), both writing into the same filesystem. Before each sample, untimed:
``sync`` (so the writeback of the previous copy does not land in the next one) and the
source's page-cache state is set:

- **hot**: the source is read once first, so it is in the page cache, as a model is just
  after the run wrote it;
- **cold**: the source's pages are dropped (``posix_fadvise(DONTNEED)``, this file only),
  as a model written long ago is read back from disk.

The table gives median, min, max and stdev of each side and the ratio of medians (target
<= 1.10; exit status 1 when it is missed). The floor of registering is its sha256: the bench
also times ``hashlib.sha256`` over the hot file and ``copy_file_range`` alone, which say how
fast each half can be here.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET = 1.10
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def stats(samples: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(samples),
        "min": min(samples),
        "max": max(samples),
        "stdev": statistics.stdev(samples) if len(samples) > 1 else 0.0,
    }


def write_random(path: Path, size: int) -> None:
    with open(path, "wb") as fh:
        left = size
        while left:
            chunk = os.urandom(min(left, 64 << 20))
            fh.write(chunk)
            left -= len(chunk)
        fh.flush()
        os.fsync(fh.fileno())


def set_cache(path: Path, hot: bool) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if hot:
            while os.read(fd, 16 << 20):
                pass
        else:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def remove(path: Path) -> None:
    if path.is_dir():
        for root, dirs, _files in os.walk(path):
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o700)
        os.chmod(path, 0o700)
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def floor_ms(src: Path, work: Path) -> dict[str, float]:
    """sha256 of the hot file alone, and copy_file_range of it alone, in ms (median of 3)."""
    hashes, copies = [], []
    for _ in range(3):
        set_cache(src, hot=True)
        t0 = time.perf_counter()
        digest, view = hashlib.sha256(), memoryview(bytearray(4 << 20))
        with open(src, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                digest.update(view[:n])
        hashes.append(time.perf_counter() - t0)
        os.sync()
        dst = work / "floor.bin"
        t0 = time.perf_counter()
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            left = os.fstat(fin.fileno()).st_size
            while left:
                left -= os.copy_file_range(fin.fileno(), fout.fileno(), left)
        copies.append(time.perf_counter() - t0)
        dst.unlink()
    return {
        "sha256_ms": statistics.median(hashes) * 1e3,
        "copy_file_range_ms": statistics.median(copies) * 1e3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=500, help="size of the model (MB, 10^6)")
    parser.add_argument("--repeats", type=int, default=7, help="timed pairs per cache state")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="where the store and the copies go (default: a temp folder)",
    )
    opts = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="jt-bench-register-", dir=opts.dir))
    os.environ["JUPYTER_TRAINER_HOME"] = str(work / "home")
    from jupyter_trainer.api import runs as api

    print(
        f"load average {loadavg()} · {os.cpu_count()} CPUs · Python {sys.version.split()[0]}"
        f" · {work}",
        flush=True,
    )
    try:
        run = api.submit(
            "from jupyter_trainer import runtime as jt\njt.log(step=0, loss=0.5)\n",
            launcher="python",
            name="bench",
            wait=True,
        )
        src = run.outputs / "model.bin"
        size = opts.size_mb * 1000 * 1000
        write_random(src, size)
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        floor = floor_ms(src, work)
        results: dict[str, dict] = {}
        for state in ("hot", "cold"):
            times: dict[str, list[float]] = {"cp": [], "register": []}
            for i in range(opts.repeats + 1):  # the first pair warms up, untimed
                for side in ("cp", "register") if i % 2 else ("register", "cp"):
                    os.sync()
                    set_cache(src, hot=state == "hot")
                    if side == "cp":
                        dst = work / "cp.bin"
                        t0 = time.perf_counter()
                        subprocess.run(["cp", str(src), str(dst)], check=True)
                        took = time.perf_counter() - t0
                        remove(dst)
                    else:
                        t0 = time.perf_counter()
                        model = run.register_model("bench", "model.bin")
                        took = time.perf_counter() - t0
                        if model.files[0].sha256 != digest:
                            raise SystemExit(f"version {model.version}: wrong sha256")
                        remove(model.folder)
                    if i:
                        times[side].append(took)
            results[state] = {side: stats(v) for side, v in times.items()}
            results[state]["ratio"] = (
                results[state]["register"]["median"] / results[state]["cp"]["median"]
            )
            results[state]["samples"] = times
    finally:
        os.sync()
        remove(work)

    print(
        f"\nRegistering a {opts.size_mb} MB file against cp, {opts.repeats} interleaved "
        f"pairs per cache state (seconds)"
    )
    print(f"{'':>14} {'median':>8} {'min':>8} {'max':>8} {'stdev':>8}")
    for state in ("hot", "cold"):
        for side in ("cp", "register"):
            s = results[state][side]
            print(
                f"{state + ' ' + side:>14} {s['median']:8.3f} {s['min']:8.3f} {s['max']:8.3f} "
                f"{s['stdev']:8.3f}"
            )
        ratio = results[state]["ratio"]
        verdict = "OK" if ratio <= TARGET else "over"
        print(
            f"{state:>5} ratio of medians register/cp = {ratio:.3f}  "
            f"(target <= {TARGET:.2f}: {verdict})"
        )
    rate = lambda ms: size / (ms / 1e3) / 1e9
    print(
        f"\nalone, hot: sha256 {floor['sha256_ms']:.0f} ms ({rate(floor['sha256_ms']):.2f} GB/s),"
        f" copy_file_range {floor['copy_file_range_ms']:.0f} ms "
        f"({rate(floor['copy_file_range_ms']):.2f} GB/s)"
    )
    sha = results["hot"]["register"]["median"] * 1e3 / floor["sha256_ms"]
    print(f"hot register / sha256 alone = {sha:.2f}: registering costs its hash")
    print(f"load average {loadavg()}")
    if opts.json:
        opts.json.write_text(
            json.dumps({"size_mb": opts.size_mb, "floor": floor, **results}, indent=1)
        )
    return 0 if all(results[state]["ratio"] <= TARGET for state in ("hot", "cold")) else 1


if __name__ == "__main__":
    sys.exit(main())
