"""Cold environment builds against raw uv, on the same requirements.

    .venv/bin/python bench/env_cold_build.py [--repeats N] [--pip REQ ...] [--json PATH]

Two comparisons, each sample in a fresh folder, interleaved (jt, raw, jt, raw, ...) after one
untimed warm-up round; standalone environments (``inherit: false``) so both sides install the
same packages:

  build (the cold build of a run whose environment is defined but not built yet):
    jt:   ``build.py``: the lock (written by ``%%environment``) to a ready venv:
          ``uv venv --relocatable`` + ``uv pip install --no-deps --require-hashes`` in a temp
          folder, renamed into place under a file lock.
    raw:  ``uv venv DIR && uv pip install --python DIR/bin/python -r requirements.lock``
          (the same exact pins and hashes).
  spec to interpreter (nothing cached but uv's package cache):
    jt:   ``environment.define(..., build=True)``: ``uv pip compile --generate-hashes`` to a
          lock, then the build above.
    raw:  ``uv venv DIR && uv pip install --python DIR/bin/python -r requirements.txt``
          (unpinned: one resolution, no lock, no hashes).

Both sides use uv's package cache (warm after the warm-up), so this measures what jt adds to
uv, not download speed. Default requirements: the issue's example, ``scikit-learn==1.7.*``
and ``rich`` (with numpy, scipy, joblib, threadpoolctl, markdown-it-py, mdurl, pygments).
Target: jt median <= 1.1 x raw median.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from jupyter_trainer import environment  # noqa: E402
from jupyter_trainer.environment import lock  # noqa: E402
from jupyter_trainer.rankside.programs import env_build as builder  # noqa: E402

TARGET_RATIO = 1.10
DEFAULT_PIP = ["scikit-learn==1.7.*", "rich"]


def uv_env() -> dict[str, str]:
    return {**os.environ, "NO_COLOR": "1"}


def jt_full(pip: list[str], work: Path) -> float:
    home = work / "home"
    start = time.perf_counter()
    info = environment.define(environment.from_line("cold", pip=pip), home=home, build=True)
    elapsed = time.perf_counter() - start
    if not info["build"]["built"]:
        raise SystemExit("jt did not build: the store was not fresh")
    check(info["build"]["python"], pip)
    return elapsed


def jt_build(lock_dir: Path, work: Path) -> float:
    start = time.perf_counter()
    info = builder.build(str(lock_dir), str(work / "venvs"))
    elapsed = time.perf_counter() - start
    if not info["built"]:
        raise SystemExit("jt did not build: the venvs folder was not fresh")
    check(info["python"], [])
    return elapsed


def raw(requirements: Path, work: Path, uv: str) -> float:
    venv = work / "raw"
    start = time.perf_counter()
    subprocess.run(
        [uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True, env=uv_env()
    )
    subprocess.run(
        [
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            "-r",
            str(requirements),
        ],
        check=True,
        env=uv_env(),
    )
    elapsed = time.perf_counter() - start
    check(str(venv / "bin" / "python"), [])
    return elapsed


def check(python: str, pip: list[str]) -> None:
    probe = "import sklearn, rich" if pip == DEFAULT_PIP else "pass"
    subprocess.run([python, "-c", probe], check=True)


def summary(name: str, jt: list[float], raw_: list[float]) -> float:
    ratio = statistics.median(jt) / statistics.median(raw_)
    print(f"{name}:")
    for side, values in (("jt", jt), ("raw", raw_)):
        print(
            f"  {side:>4}: median {statistics.median(values):.2f} s  min {min(values):.2f}  "
            f"max {max(values):.2f}"
            + (f"  stdev {statistics.stdev(values):.2f}" if len(values) > 1 else "")
        )
    print(
        f"  ratio jt/raw {ratio:.3f}: {'meets' if ratio <= TARGET_RATIO else 'MISSES'} "
        f"the target of {TARGET_RATIO}"
    )
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--pip", nargs="+", default=DEFAULT_PIP)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    uv = builder.find_uv()
    keep = Path(tempfile.mkdtemp(prefix="jt-bench-cold-"))
    try:
        (keep / "requirements.txt").write_text("".join(f"{r}\n" for r in args.pip))
        home = keep / "home"
        info = environment.define(environment.from_line("cold", pip=args.pip), home=home)
        lock_dir = lock.locks_dir(home) / info["lock"]
        samples: dict[str, list[float]] = {
            k: [] for k in ("build jt", "build raw", "full jt", "full raw")
        }
        for i in range(args.repeats + 1):  # round 0 is the warm-up
            for kind in samples:
                work = Path(tempfile.mkdtemp(prefix="sample-", dir=keep))
                try:
                    if kind == "build jt":
                        elapsed = jt_build(lock_dir, work)
                    elif kind == "build raw":
                        elapsed = raw(lock_dir / "requirements.lock", work, uv)
                    elif kind == "full jt":
                        elapsed = jt_full(args.pip, work)
                    else:
                        elapsed = raw(keep / "requirements.txt", work, uv)
                finally:
                    shutil.rmtree(work, ignore_errors=True)
                if i:
                    samples[kind].append(elapsed)
            if i:
                print(
                    f"  round {i}: " + "  ".join(f"{k} {v[-1]:.2f}s" for k, v in samples.items()),
                    flush=True,
                )
    finally:
        shutil.rmtree(keep, ignore_errors=True)
    version = subprocess.run([uv, "--version"], capture_output=True, text=True).stdout.split()[1]
    print(
        f"\n{' '.join(args.pip)}: {args.repeats} interleaved rounds, warm uv cache (uv {version}, "
        f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.2f})"
    )
    build_ratio = summary(
        "cold build (lock to ready venv)", samples["build jt"], samples["build raw"]
    )
    full_ratio = summary(
        "spec to ready interpreter (lock included)", samples["full jt"], samples["full raw"]
    )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "samples": samples,
                    "build_ratio": build_ratio,
                    "full_ratio": full_ratio,
                    "target": TARGET_RATIO,
                    "pip": args.pip,
                },
                indent=1,
            )
        )
    return 0 if build_ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
