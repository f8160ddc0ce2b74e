"""What a shared workspace's PostgreSQL index costs, against the personal SQLite index.

    .venv/bin/python bench/workspace_index.py [--runs 200] [--rounds 3] [--writers 8] [--json PATH]

Needs root, PostgreSQL (``apt-get install postgresql``) and psycopg, as the tests do. It
starts a real PostgreSQL server on loopback (``tests/support/pg_server.py``) with its default
durability (fsync on, commits wait for the disk), and in each round, in a fresh random
order of the two back ends, a fresh store for each:

- **create**: ``--runs`` runs made one after another through ``Store.create`` (a snapshot of
  one small file, the index row and the folder renamed into place in one transaction; in the
  shared workspace also its modes): the median time of one;
- **list**: ``list_runs(limit=50)`` of that store, 30 times: the median (the CLI's ``runs``,
  the panel's list, the REST list all read it);
- **list mine**: the same, filtered to this user's runs (``runs --mine``);
- **writers**: ``--writers`` processes, each making ``--runs / --writers`` runs at once:
  the wall time, as runs per second.

It prints each back end's medians over the rounds and the ratio PostgreSQL / SQLite of each
(a ratio above 1: the shared index is slower). Both stores are on the same local disk.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.pg_server import PgServer, available  # noqa: E402

from jupyter_trainer.core.spec import CodeSpec, RunSpec  # noqa: E402
from jupyter_trainer.store import Store  # noqa: E402
from jupyter_trainer.store.owners import Identity  # noqa: E402
from jupyter_trainer.store.workspace import INDEX_ENV  # noqa: E402

WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from jupyter_trainer.core.spec import CodeSpec, RunSpec
from jupyter_trainer.store import Store
store = Store(Path(sys.argv[2]))
for i in range(int(sys.argv[3])):
    snapshot = store.staging_dir()
    snapshot.mkdir()
    (snapshot / "train.py").write_text("print(1)")
    store.create(RunSpec(name=f"w{i}", code=CodeSpec(entry="train.py", hash="sha256:0")), snapshot)
"""


def make_run(store: Store, i: int) -> None:
    snapshot = store.staging_dir()
    snapshot.mkdir()
    (snapshot / "train.py").write_text("print(1)")
    store.create(RunSpec(name=f"r{i}", code=CodeSpec(entry="train.py", hash="sha256:0")), snapshot)


def median_s(call, times: int) -> float:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def one_round(backend: str, url: str | None, runs: int, writers: int) -> dict[str, float]:
    home = Path(tempfile.mkdtemp(prefix=f"jt-bench-{backend}-"))
    env = dict(os.environ)
    if url:
        os.environ[INDEX_ENV] = url
        env[INDEX_ENV] = url
    else:
        os.environ.pop(INDEX_ENV, None)
        env.pop(INDEX_ENV, None)
    try:
        store = Store(home)
        make_run(store, -1)  # the index made, outside the timing
        creates = []
        for i in range(runs):
            start = time.perf_counter()
            make_run(store, i)
            creates.append(time.perf_counter() - start)
        me = Identity.current()
        listed = median_s(lambda: store.list_runs(limit=50), 30)
        mine = median_s(lambda: store.list_runs(limit=50, owner=me), 30)
        each = max(1, runs // writers)
        start = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", WRITER, str(REPO), str(home), str(each)], env=env
            )
            for _ in range(writers)
        ]
        if any(p.wait() != 0 for p in procs):
            raise SystemExit(f"a writer failed on {backend}")
        wall = time.perf_counter() - start
        total = len(store.list_runs(limit=100000))
        if total != runs + 1 + each * writers:
            raise SystemExit(f"{backend}: {total} runs listed, not {runs + 1 + each * writers}")
        return {
            "create_ms": statistics.median(creates) * 1000,
            "list_ms": listed * 1000,
            "list_mine_ms": mine * 1000,
            "writers_runs_per_s": each * writers / wall,
        }
    finally:
        os.environ.pop(INDEX_ENV, None)
        subprocess.run(["rm", "-rf", str(home)], check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    why = available()
    if why or os.geteuid() != 0:
        raise SystemExit(f"cannot start PostgreSQL here: {why or 'run as root'}")
    server = PgServer(worker=149, durable=True)
    results: dict[str, list[dict[str, float]]] = {"sqlite": [], "postgresql": []}
    try:
        for _ in range(args.rounds):
            for backend in random.sample(list(results), 2):
                url = server.new_database() if backend == "postgresql" else None
                results[backend].append(one_round(backend, url, args.runs, args.writers))
    finally:
        server.stop()
    keys = ["create_ms", "list_ms", "list_mine_ms", "writers_runs_per_s"]
    summary = {
        b: {k: statistics.median(r[k] for r in rows) for k in keys} for b, rows in results.items()
    }
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"{'':22}{'SQLite':>10}{'PostgreSQL':>12}{'ratio':>8}")
    for key in keys:
        sq, pg = summary["sqlite"][key], summary["postgresql"][key]
        ratio = sq / pg if key.endswith("per_s") else pg / sq  # above 1: PostgreSQL slower
        print(f"{key:22}{sq:10.2f}{pg:12.2f}{ratio:8.2f}")
    if args.json:
        args.json.write_text(json.dumps({"rounds": results, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
