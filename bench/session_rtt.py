"""What a live session costs per request, against ipyparallel, a batch run and Session.run.

    .venv/bin/python bench/session_rtt.py [--ranks 2,16] [--repeats 30] [--ddp-rounds 4]
        [--ddp-steps 200] [--json PATH]

Needs ipyparallel (``pip install ipyparallel``) and psutil. For each rank count N, one
session (``start_session(procs=N)``) and one ipyparallel cluster (``ipp.Cluster(n=N)``, its
engines on this machine) are started, warmed up untimed, and timed interleaved, in a fresh
order each round:

- **empty cell**: ``Session.run("pass", stream=False)`` against ``view.execute("pass",
  block=True)`` on all N engines; target median(session) / median(ipp) <= 1.5;
- **run + pull**: ``Session.run("pass", stream=False)`` then ``Session.pull("x", rank=0)``
  against ``view.execute("pass", block=True)`` then ``view.pull("x", targets=0,
  block=True)``; same target;
- **magic**: ``shell.run_cell("%%train --session NAME\\npass")`` in an in-process IPython
  ``InteractiveShell`` with ``%load_ext jupyter_trainer``, against ``Session.run("pass")``
  streaming to stdout as the magic does; target median added <= 10 ms.

Then, at the first rank count, with the cluster stopped:

- **DDP step**: a ``Linear(256, 256)`` DDP model with SGD, one forward/backward/step (one
  gradient ``all_reduce``) per step, on random data. Each round runs a batch run
  (``jt.submit(script=..., launcher="torchrun")``) whose script warms up, times
  ``--ddp-steps`` steps itself and logs each step's seconds with ``jt.log``, and a session
  cell that times the same steps on the session's ranks (the model built by an earlier
  cell), pulled from rank 0; target median per step, session / batch <= 1.02;
- **memory**: the RSS (and USS) of the session's ranks once idle (pids from
  ``runs/<id>/ranks/rank-<r>.json``) against the ranks of a batch run that imported torch,
  joined the group and sleeps; plus the processes the session keeps alive besides its ranks
  (its supervisor and the launcher).

Last, where a ``Session.run("pass")`` spends its time: the phases of ``Session.run``
(capture, request files, ``_request``'s post and ``_wait``) timed by wrapping them.

Every session and cluster is stopped in ``finally``; the bench exits non-zero when a target
is missed or a process it started is left. On a small shared machine (16 ranks on 2 cores)
the figures are noisy: the load average at start and end is printed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
HOME = ""  # the bench's own run store, made by main()

import psutil  # noqa: E402

import jupyter_trainer as jt  # noqa: E402
from jupyter_trainer.api import sessions as session_api  # noqa: E402
from jupyter_trainer.store.sessions import SessionFiles  # noqa: E402

RTT_TARGET = 1.5  # median(session) / median(ipyparallel)
MAGIC_TARGET_MS = 10.0  # median(%%train --session) - median(Session.run)
DDP_TARGET = 1.02  # median step time, session / batch

MODEL = """\
import torch, torch.distributed as dist
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(32, 256)
def step():
    opt.zero_grad()
    model(data).square().mean().backward()
    opt.step()
"""
STEPS = """\
import time
for _ in range({warmup}):
    step()
times = []
for _ in range({steps}):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
"""
BATCH = (
    "from jupyter_trainer import runtime as jt\nimport torch.distributed as dist\n"
    "dist.init_process_group('gloo')\n"
    + MODEL
    + STEPS
    + "for i, s in enumerate(times):\n    jt.log(step=i, step_s=s)\n"
)
SLEEPER = """\
import os, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
dist.barrier()
print("joined", flush=True)
while not os.path.exists(os.path.join(os.environ["JT_RUN_DIR"], "outputs", "release")):
    time.sleep(0.1)
"""


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def summary(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def start_cluster(n: int) -> tuple[Any, Any]:
    import ipyparallel as ipp

    cluster = ipp.Cluster(n=n, log_level=40)
    try:
        client = cluster.start_and_connect_sync()
        client.wait_for_engines(n, timeout=600)
    except BaseException:
        cluster.stop_cluster_sync()
        raise
    return cluster, client


def shell_with_magic() -> Any:
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # nothing left in IPYTHONDIR
    shell = InteractiveShell.instance(config=config)
    if "jupyter_trainer" not in shell.extension_manager.loaded:
        shell.run_cell("%load_ext jupyter_trainer")
    return shell


def rtt(n: int, repeats: int, results: dict[str, Any]) -> None:
    """The interleaved request round trips at ``n`` ranks, the magic's included."""
    t0 = time.perf_counter()
    sess = session_api.start_session(f"rtt{n}", procs=n, idle=3600, timeout=900)
    results[f"start_session_{n}_s"] = time.perf_counter() - t0
    cluster = None
    try:
        t0 = time.perf_counter()
        cluster, client = start_cluster(n)
        results[f"start_cluster_{n}_s"] = time.perf_counter() - t0
        view = client[:]
        shell = shell_with_magic()
        cell = f"%%train --session {sess.name}\npass"

        def magic() -> None:
            done = shell.run_cell(cell)
            if not done.success:
                raise RuntimeError(f"%%train --session failed: {done.error_in_exec}")

        sides: dict[str, Callable[[], Any]] = {
            "session run": lambda: sess.run("pass", stream=False),
            "ipp execute": lambda: view.execute("pass", block=True),
            "session run+pull": lambda: (sess.run("pass", stream=False), sess.pull("x", 0)),
            "ipp execute+pull": lambda: (
                view.execute("pass", block=True),
                view.pull("x", targets=0, block=True),
            ),
            "Session.run (stdout)": lambda: sess.run("pass"),
            "%%train --session": magic,
        }
        sess.run("x = 1", stream=False)
        view.execute("x = 1", block=True)
        for fn in sides.values():  # warm-up, untimed
            for _ in range(3):
                fn()
        samples: dict[str, list[float]] = {k: [] for k in sides}
        order = list(sides)
        for _ in range(repeats):
            random.shuffle(order)
            for key in order:
                samples[key].append(timed(sides[key]))
        results[f"rtt_{n}"] = {k: summary(v) for k, v in samples.items()}
        results[f"phases_{n}"] = phases(sess, repeats)
        results[f"magic_phases_{n}"] = magic_phases(shell, magic, repeats)
    finally:
        if cluster is not None:
            cluster.stop_cluster_sync()
        print(f"session {sess.name}: {sess.stop()}", flush=True)


def wrap(owner: Any, name: str, into: dict[str, list[float]], key: str) -> Callable[[], None]:
    """Time every call of ``owner.name`` into ``into[key]``; returns the undo."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def timed_call(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into.setdefault(key, []).append(time.perf_counter() - t0)

    setattr(owner, name, timed_call)
    return lambda: setattr(owner, name, original)


def phases(sess: session_api.Session, repeats: int) -> dict[str, dict[str, float]]:
    """Where ``Session.run("pass", stream=False)`` spends its time, by wrapping its parts."""
    import jupyter_trainer.capture as capture
    import jupyter_trainer.capture.cellscript as cellscript

    got: dict[str, list[float]] = {}
    undo = [
        wrap(SessionFiles, "names", got, "files.names (names.json)"),
        wrap(capture, "resolve_cell", got, "capture.resolve_cell"),
        wrap(SessionFiles, "new_request", got, "files.new_request (scan + mkdir)"),
        wrap(cellscript, "render_cell_script", got, "render_cell_script"),
        wrap(cellscript, "cell_parts", got, "cell_parts"),
        wrap(session_api.Session, "_check_alive", got, "_check_alive (state.json)"),
        wrap(session_api, "client_socket", got, "client_socket"),
        wrap(SessionFiles, "post", got, "files.post (request json + wake)"),
        wrap(session_api.Session, "_wait", got, "_wait (ranks run it, results read)"),
        wrap(SessionFiles, "add_names", got, "files.add_names"),
        wrap(session_api.Session, "run", got, "Session.run total"),
    ]
    try:
        for _ in range(repeats):
            sess.run("pass", stream=False)
    finally:
        for u in undo:
            u()
    return {k: summary(v) for k, v in got.items()}


def magic_phases(shell: Any, magic: Callable[[], None], repeats: int) -> dict[str, Any]:
    """The magic's parts: the session lookup and ``Session.run``, inside ``run_cell``."""
    import jupyter_trainer.frontends.magics.session as magic_session
    import jupyter_trainer.frontends.magics.train as magic_train

    got: dict[str, list[float]] = {}
    undo = [
        wrap(magic_train, "cell_parser", got, "cell_parser() (twice a cell)"),
        wrap(magic_session, "cell_parser", got, "cell_parser() (twice a cell)"),
        wrap(session_api, "session", got, "session lookup (jt.session(name))"),
        wrap(session_api.Session, "run", got, "Session.run (stdout)"),
    ]
    try:
        for _ in range(repeats):
            got.setdefault("%%train --session total", []).append(timed(magic))
            got.setdefault("run_cell('pass') (IPython alone)", []).append(
                timed(lambda: shell.run_cell("pass"))
            )
    finally:
        for u in undo:
            u()
    return {k: summary(v) for k, v in got.items()}


def numbering(counts: tuple[int, ...] = (0, 100, 1000, 5000)) -> dict[str, float]:
    """What ``SessionFiles.new_request`` costs once a session has answered ``count``
    requests (it lists the whole requests folder); a folder of empty requests, no ranks."""
    folder = Path(tempfile.mkdtemp(prefix="jt-bench-requests-"))
    try:
        files = SessionFiles(folder / "session", "bench")
        files.create()
        made, found = 0, {}
        for count in counts:
            while made < count:
                made += 1
                (files.requests / str(made)).mkdir()
                (files.requests / f"{made}.json").write_text("{}")
            xs = []
            for _ in range(30):
                t0 = time.perf_counter()
                _, here = files.new_request()
                xs.append(time.perf_counter() - t0)
                here.rmdir()
            found[str(count)] = statistics.median(xs)
        return found
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rank_pids(run: Any, n: int) -> list[int]:
    records = run.store.rank_records(run.id)
    return [int(records[r]["pid"]) for r in range(n)]


def memory_of(pids: list[int]) -> dict[str, float]:
    rss, uss = [], []
    for pid in pids:
        info = psutil.Process(pid).memory_full_info()
        rss.append(info.rss / 2**20)
        uss.append(info.uss / 2**20)
    return {"rss_mib": statistics.mean(rss), "uss_mib": statistics.mean(uss)}


def others(run: Any, pids: list[int]) -> dict[str, float]:
    """The processes besides the ranks that keep the run going: supervisor and launcher."""
    found: dict[str, float] = {}
    sup = run.path / "supervisor.pid"
    if sup.exists():
        pid = int(json.loads(sup.read_text())["pid"])
        found["supervisor_rss_mib"] = psutil.Process(pid).memory_info().rss / 2**20
    parents = {psutil.Process(p).ppid() for p in pids}
    found["launcher_rss_mib"] = sum(psutil.Process(p).memory_info().rss for p in parents) / 2**20
    found["launcher"] = " | ".join(
        " ".join(psutil.Process(p).cmdline()[1:4])[:60] for p in sorted(parents)
    )
    found["hot"] = (run.state.get("launcher") or {}).get("hot")
    return found


def ddp_and_memory(rounds: int, steps: int, results: dict[str, Any], folder: Path) -> None:
    warmup = 50
    script = folder / "ddp_steps.py"
    script.write_text(BATCH.format(warmup=warmup, steps=steps))
    sleeper = folder / "sleeper.py"
    sleeper.write_text(SLEEPER)
    sess = session_api.start_session("ddp", procs=2, idle=3600, timeout=900)
    try:
        time.sleep(2.0)  # let the ranks settle after start before reading memory
        pids = rank_pids(sess.record, 2)
        results["memory_session"] = {**memory_of(pids), **others(sess.record, pids)}
        batch = jt.submit(script=str(sleeper), procs=2, launcher="torchrun", name="sleeper")
        try:
            deadline = time.monotonic() + 600
            while not all("joined" in _log(batch, r) for r in (0, 1)):
                if batch.done or time.monotonic() > deadline:
                    raise RuntimeError(f"sleeper run ended or hung: {batch.status}")
                time.sleep(0.2)
            time.sleep(2.0)
            bpids = rank_pids(batch, 2)
            results["memory_batch"] = {**memory_of(bpids), **others(batch, bpids)}
        finally:
            (batch.path / "outputs").mkdir(exist_ok=True)
            (batch.path / "outputs" / "release").write_text("")
            batch.wait(600, raise_on_failure=False)
        sess.run(MODEL, stream=False)
        cell = STEPS.format(warmup=warmup, steps=steps)
        per: dict[str, list[float]] = {"session": [], "batch": []}
        for i in range(rounds):
            for side in ("session", "batch") if i % 2 == 0 else ("batch", "session"):
                if side == "session":
                    sess.run(cell, stream=False)
                    per[side].append(statistics.median(sess.pull("times", 0)))
                else:
                    run = jt.submit(script=str(script), procs=2, launcher="torchrun", name="ddp")
                    run.wait(900)
                    pts = run.metrics(0)["step_s"]
                    if len(pts) != steps:
                        raise RuntimeError(f"batch run logged {len(pts)} of {steps} steps")
                    per[side].append(statistics.median(v for _, v in pts))
        results["ddp_step"] = {k: summary(v) for k, v in per.items()}
        results["ddp_step_rounds"] = per
    finally:
        print(f"session {sess.name}: {sess.stop()}", flush=True)


def _log(run: Any, rank: int) -> str:
    try:
        return run.logs(rank)
    except Exception:
        return ""


def leftovers() -> list[str]:
    """Processes still running that the bench's store or IPython folder started."""
    marks = (HOME, os.environ["IPYTHONDIR"])  # set by main() before anything starts
    left = []
    for proc in psutil.process_iter(["pid", "cmdline", "environ"]):
        if proc.pid == os.getpid():
            continue
        text = " ".join(proc.info.get("cmdline") or []) + " ".join(
            f"{k}={v}" for k, v in (proc.info.get("environ") or {}).items()
        )
        if any(m in text for m in marks):
            left.append(f"{proc.pid} {' '.join(proc.info.get('cmdline') or [])[:120]}")
    return left


def wait_no_leftovers(timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := leftovers()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def ms(x: float) -> str:
    return f"{x * 1000:8.1f}"


def report(results: dict[str, Any], ranks: list[int]) -> bool:
    ok = True
    print()
    print(f"load average at start {results['load_start']}, at end {results['load_end']}")
    print(f"on {os.cpu_count()} CPUs; with 16 ranks on 2 cores every figure is noisy")
    for n in ranks:
        r = results.get(f"rtt_{n}")
        if not r:
            continue
        print(f"\n== {n} ranks/engines (ms; {r['session run']['n']} interleaved samples each) ==")
        print(
            f"session start {results[f'start_session_{n}_s']:.1f} s, "
            f"cluster start {results[f'start_cluster_{n}_s']:.1f} s"
        )
        print(f"{'side':34} {'median':>8} {'min':>8} {'max':>8}")
        for key, s in r.items():
            print(f"{key:34} {ms(s['median'])} {ms(s['min'])} {ms(s['max'])}")
        for mine, theirs in (
            ("session run", "ipp execute"),
            ("session run+pull", "ipp execute+pull"),
        ):
            ratio = r[mine]["median"] / r[theirs]["median"]
            held = ratio <= RTT_TARGET
            ok &= held
            print(f"{mine} / {theirs}: {ratio:.2f}x (target <= {RTT_TARGET}: {_yes(held)})")
        added = (r["%%train --session"]["median"] - r["Session.run (stdout)"]["median"]) * 1000
        held = added <= MAGIC_TARGET_MS
        ok &= held
        print(
            f"%%train --session adds {added:.1f} ms (target <= {MAGIC_TARGET_MS:g}: {_yes(held)})"
        )
        for title, key in (
            ("Session.run('pass', stream=False), by phase", f"phases_{n}"),
            ("%%train --session, by part", f"magic_phases_{n}"),
        ):
            print(f"  {title} (ms)")
            for name, s in results[key].items():
                print(f"    {name:38} {ms(s['median'])} {ms(s['min'])} {ms(s['max'])}")
        m = results[f"magic_phases_{n}"]
        parts = ("cell_parser() (twice a cell)", "session lookup (jt.session(name))")
        rest = m["%%train --session total"]["median"] - sum(
            m[k]["median"] * (2 if k.startswith("cell_parser") else 1)
            for k in (*parts, "Session.run (stdout)")
        )
        print(f"    {'rest (IPython, the line, the origin)':38} {ms(rest)}")
    print("\n== files.new_request after N earlier requests (median of 30, ms) ==")
    print("  ".join(f"N={k}: {v * 1000:.2f}" for k, v in results["new_request_by_history"].items()))
    if "ddp_step" in results:
        d = results["ddp_step"]
        print("\n== one DDP step, Linear(256,256), 2 ranks (median per step of each round, ms) ==")
        for key in ("session", "batch"):
            s = d[key]
            print(f"{key:34} {ms(s['median'])} {ms(s['min'])} {ms(s['max'])}")
        ratio = d["session"]["median"] / d["batch"]["median"]
        held = ratio <= DDP_TARGET
        ok &= held
        print(f"session / batch: {ratio:.3f}x (target <= {DDP_TARGET}: {_yes(held)})")
    if "memory_session" in results:
        s, b = results["memory_session"], results["memory_batch"]
        print("\n== memory, 2 ranks, mean per rank (MiB) ==")
        print(f"{'':34} {'RSS':>8} {'USS':>8}")
        print(f"{'session rank (idle)':34} {s['rss_mib']:8.1f} {s['uss_mib']:8.1f}")
        print(f"{'batch rank (joined, sleeping)':34} {b['rss_mib']:8.1f} {b['uss_mib']:8.1f}")
        print(
            f"{'difference':34} {s['rss_mib'] - b['rss_mib']:8.1f} "
            f"{s['uss_mib'] - b['uss_mib']:8.1f}"
        )
        print(
            f"kept alive besides the ranks: supervisor {s.get('supervisor_rss_mib', 0):.1f} MiB "
            f"RSS; the ranks' parent ({s['launcher']}) {s['launcher_rss_mib']:.1f} MiB RSS"
        )
        print(f"hot start: session {s['hot']}, batch {b['hot']}")
    return ok


def _yes(held: bool) -> str:
    return "holds" if held else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", default="2,16", help="rank/engine counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--ddp-rounds", type=int, default=4)
    parser.add_argument("--ddp-steps", type=int, default=200)
    parser.add_argument("--no-ddp", action="store_true", help="leave out DDP step and memory")
    parser.add_argument("--json", default=None)
    opts = parser.parse_args()
    ranks = [int(x) for x in opts.ranks.split(",")]
    global HOME
    HOME = tempfile.mkdtemp(prefix="jt-bench-home-")
    os.environ["JUPYTER_TRAINER_HOME"] = HOME  # the magic finds the session in this store
    os.environ["IPYTHONDIR"] = tempfile.mkdtemp(prefix="jt-bench-ipython-")  # ipp's profile
    results: dict[str, Any] = {"load_start": loadavg(), "ranks": ranks, "home": HOME}
    print(f"store {HOME}; load average {results['load_start']}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="jt-bench-session-"))
    try:
        results["new_request_by_history"] = numbering()
        for n in ranks:
            rtt(n, opts.repeats, results)
        if not opts.no_ddp:
            ddp_and_memory(opts.ddp_rounds, opts.ddp_steps, results, folder)
    finally:
        from jupyter_trainer.rankside import hotstart
        from jupyter_trainer.supervisor import starter

        starter.release_spare()  # the supervisor kept waiting for a next run
        hotstart.stop_pools(HOME)  # the warm rank pool the runs were forked from
        left = wait_no_leftovers()
        results["leftovers"] = left
        results["load_end"] = loadavg()
        if not left:
            for path in (HOME, os.environ["IPYTHONDIR"], str(folder)):
                shutil.rmtree(path, ignore_errors=True)
    ok = report(results, ranks)
    if left:
        ok = False
        print("\nprocesses left behind:\n  " + "\n  ".join(left))
    if opts.json:
        Path(opts.json).write_text(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
