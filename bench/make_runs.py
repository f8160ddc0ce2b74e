"""Make a store of N finished runs, as finished runs leave their folders, and index them.

```
.venv/bin/python bench/make_runs.py HOME [--runs N] [--procs 2] [--running N]
```

Each run folder holds what a run that ended leaves: ``spec.json`` (read-only) and
``state.json`` written from the store's own records (``spec_record``, ``new_state``), a
one-file ``code/`` snapshot, and ``events/rank-0.jsonl`` (a few metric points),
and ``logs/rank-0.log`` (no ``ranks/`` or ``outputs/``: a run made before them, which the
store reads the same, and four files fewer to write). Names cycle through a
few prefixes (``resnet-``, ``bert-``, ``gpt-``, ...) so a ``--name`` filter matches a
fifth of them; one run in a thousand is recorded ``running`` (its supervisor gone: the
store finds it lost as it lists it, the worst case), one in a hundred ``lost`` (as ``doctor
--fix`` records a run whose supervisor went), every 7th is ``failed``. The folders are written directly, in
``--procs`` processes; then the store indexes them through its own rebuild (``runs.db``),
the path ``doctor --fix`` and a missing index take.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

from jupyter_trainer.core.spec import CodeSpec, RunSpec
from jupyter_trainer.store import Store
from jupyter_trainer.store.owners import Identity
from jupyter_trainer.store.records import new_state, spec_record

PREFIXES = ("resnet", "bert", "gpt", "vit", "unet")
START = 1_700_000_000.0


def run_id(i: int) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(START + i * 60))
    return f"{PREFIXES[i % len(PREFIXES)]}-{i}-{stamp}-{i % 0xFFFFFF:06x}"


def status_of(i: int) -> str:
    if i % 1000 == 42:
        return "running"
    if i % 100 == 42:
        return "lost"
    return "failed" if i % 7 == 3 else "completed"


def write_runs(args: tuple[str, int, int]) -> int:
    """Write the run folders ``lo`` to ``hi - 1`` under ``runs_dir``."""
    runs_dir, lo, hi = args
    owner = Identity.current().record()
    template = spec_record(RunSpec(name="t", code=CodeSpec(entry="train.py", hash="sha256:0")))
    for i in range(lo, hi):
        rid = run_id(i)
        root = os.path.join(runs_dir, rid)
        for sub in ("", "code", "events", "logs"):
            os.mkdir(os.path.join(root, sub))
        name = f"{PREFIXES[i % len(PREFIXES)]}-{i}"
        spec = {**template, "name": name, "code": {**template["code"], "hash": f"sha256:{i:064x}"}}
        created = START + i * 60
        state = dict(new_state(rid, created, owner))
        status = status_of(i)
        state["status"] = status
        state["stages"] = {"running": {"start": created + 2}}
        if status != "running":
            state["ended"] = created + 50
        if status == "failed":
            state["failed_rank"] = 0
        _write(os.path.join(root, "code", "train.py"), "print('train')\n")
        _write(os.path.join(root, "spec.json"), json.dumps(spec))
        os.chmod(os.path.join(root, "spec.json"), 0o444)
        _write(os.path.join(root, "state.json"), json.dumps(state))
        points = "".join(
            json.dumps(
                {
                    "kind": "metric",
                    "t": created + s,
                    "step": s,
                    "name": "loss",
                    "value": 1 / (s + 1),
                }
            )
            + "\n"
            for s in range(5)
        )
        _write(os.path.join(root, "events", "rank-0.jsonl"), points)
        _write(os.path.join(root, "logs", "rank-0.log"), "step 0\nstep 4\n")
    return hi - lo


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def make_store(home: Path, runs: int, procs: int = 2, offset: int = 0) -> dict[str, float]:
    """Write ``runs`` run folders into the store at ``home`` and index them; seconds each."""
    runs_dir = home / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    step = max(1, min(2000, runs // (procs * 4) or 1))
    chunks = [
        (str(runs_dir), lo, min(lo + step, offset + runs))
        for lo in range(offset, offset + runs, step)
    ]
    if procs > 1:
        with multiprocessing.get_context("fork").Pool(procs) as pool:
            sum(pool.imap_unordered(write_runs, chunks))
    else:
        for chunk in chunks:
            write_runs(chunk)
    t1 = time.perf_counter()
    _, count = Store(home).index.rebuild("is rebuilt by bench/make_runs.py")
    t2 = time.perf_counter()
    if count != runs + offset and offset == 0:
        raise SystemExit(f"the rebuild indexed {count} runs, not {runs}")
    return {"write_s": t1 - t0, "index_s": t2 - t1, "indexed": count}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("home", type=Path)
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--procs", type=int, default=2)
    a = p.parse_args()
    found = make_store(a.home, a.runs, a.procs)
    print(
        f"{a.runs} run folders written in {found['write_s']:.1f} s, "
        f"indexed ({found['indexed']:.0f} rows) in {found['index_s']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
