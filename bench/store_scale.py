"""A workspace of many runs: how long the run list, doctor, a rebuild and diff take, and
MLflow's ``search_runs`` over as many runs on the same database (SQLite).

```
.venv/bin/python bench/store_scale.py --runs 100000 [--store DIR] [--mlflow-runs 10000] [--keep]
```

It makes the store with ``make_runs.py`` (real run folders, indexed by the store's own
rebuild) unless ``--store`` names one it made before, then times, each the median of
``--repeats``:

- ``jupyter-trainer runs`` (first page), ``--status running``, ``--mine``, ``--name PREFIX``:
  the whole command (a fresh process, as a user types it), and the list alone in-process
  (``store.listing.list_runs``, what the command calls);
- the REST list: ``Store.list_runs(limit=51)``, what the server's ``RunsHandler`` calls for
  a page of 50 (in-process; no server);
- ``jupyter-trainer diff A B`` of two runs among them, against the same in a store of 10;
- ``doctor --no-hash`` and an index rebuild (``RunIndex.rebuild``), once each;
- MLflow: ``--mlflow-runs`` runs made through ``MlflowClient.create_run`` in a SQLite
  backend, then ``search_runs`` for the newest 20, for a status, and for a name prefix.

The store is made under /tmp and removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from make_runs import make_store, run_id

from jupyter_trainer.store import Store
from jupyter_trainer.store.listing import list_runs
from jupyter_trainer.store.owners import Identity

CLI = [str(Path(sys.executable).parent / "jupyter-trainer")]
LISTS = {
    "runs": ([], {}),
    "runs --status running": (["--status", "running"], {"status": "running"}),
    "runs --mine": (["--mine"], {"owner": "mine"}),
    "runs --name bert-9": (["--name", "bert-9"], {"name": "bert-9"}),
}


def timed(work, repeats: int) -> float:
    found = []
    for _ in range(repeats):
        t = time.perf_counter()
        work()
        found.append(time.perf_counter() - t)
    return statistics.median(found)


def cli(home: Path, args: list[str]) -> None:
    env = {**os.environ, "JUPYTER_TRAINER_HOME": str(home)}
    subprocess.run(CLI + args, env=env, check=True, capture_output=True)


def store_figures(home: Path, repeats: int) -> dict[str, float]:
    store = Store(home)
    out: dict[str, float] = {}
    for label, (args, kw) in LISTS.items():
        kw = {k: Identity.current() if v == "mine" else v for k, v in kw.items()}
        out[f"{label} (command)"] = timed(lambda args=args: cli(home, ["runs", *args]), repeats)
        out[f"{label} (list in-process)"] = timed(lambda kw=kw: list_runs(store, **kw), repeats)
    out["REST list: Store.list_runs(limit=51)"] = timed(lambda: store.list_runs(limit=51), 1)
    return out


def diff_figure(home: Path, a: str, b: str, repeats: int) -> float:
    return timed(lambda: cli(home, ["diff", a, b]), repeats)


def mlflow_figures(folder: Path, runs: int, repeats: int) -> dict[str, float]:
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("scale")
    t = time.perf_counter()
    for i in range(runs):
        run = client.create_run(
            exp, run_name=f"{('resnet', 'bert', 'gpt', 'vit', 'unet')[i % 5]}-{i}"
        )
        if i % 7 == 3:  # the rest stay RUNNING: half the cost of making them
            client.set_terminated(run.info.run_id, "FAILED")
    made = time.perf_counter() - t
    del mlflow
    search = client.search_runs
    return {
        f"MLflow: make {runs} runs (create_run)": made,
        "MLflow search_runs newest 20": timed(
            lambda: search([exp], max_results=20, order_by=["attributes.start_time DESC"]), repeats
        ),
        "MLflow search_runs status FAILED, 20": timed(
            lambda: search([exp], "attributes.status = 'FAILED'", max_results=20), repeats
        ),
        "MLflow search_runs name LIKE 'bert-9%', 20": timed(
            lambda: search([exp], "attributes.run_name LIKE 'bert-9%'", max_results=20), repeats
        ),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=100_000)
    p.add_argument("--store", type=Path, help="a store make_runs.py made before (kept)")
    p.add_argument("--mlflow-runs", type=int, default=10_000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip", default="", help="comma-separated: lists,doctor,rebuild,mlflow")
    p.add_argument("--keep", action="store_true")
    a = p.parse_args()
    skip = set(a.skip.split(","))
    tmp = Path(tempfile.mkdtemp(prefix="jt-store-scale-", dir="/tmp"))
    os.environ["JUPYTER_TRAINER_HOME"] = str(tmp / "home")
    figures: dict[str, float] = {}
    try:
        home = a.store or tmp / "big"
        if a.store is None:
            made = make_store(home, a.runs)
            figures[f"make {a.runs} runs: write folders"] = made["write_s"]
            figures[f"make {a.runs} runs: index (rebuild)"] = made["index_s"]
        if "lists" not in skip:
            figures.update(store_figures(home, a.repeats))
            small = tmp / "small"
            make_store(small, 10, procs=1)
            figures["diff (store of 10)"] = diff_figure(small, run_id(3), run_id(5), a.repeats)
            figures[f"diff (store of {a.runs})"] = diff_figure(
                home, run_id(3), run_id(5), a.repeats
            )
        if "doctor" not in skip:
            t = time.perf_counter()
            env = {**os.environ, "JUPYTER_TRAINER_HOME": str(home)}
            subprocess.run(CLI + ["doctor", "--no-hash"], env=env, capture_output=True)
            figures["doctor --no-hash (command)"] = time.perf_counter() - t
        if "rebuild" not in skip:
            t = time.perf_counter()
            Store(home).index.rebuild("is rebuilt by bench/store_scale.py")
            figures["index rebuild"] = time.perf_counter() - t
        if "mlflow" not in skip:
            figures.update(mlflow_figures(tmp, a.mlflow_runs, a.repeats))
    finally:
        for label, value in figures.items():
            print(f"{label:55s} {value:9.3f} s")
        if not a.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
