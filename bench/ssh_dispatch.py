"""Dispatch overhead of a 2-node run on the ssh target, against the same torchrun commands
started over plain ssh by hand.

    .venv/bin/python bench/ssh_dispatch.py [--repeats N] [--json PATH]

Two real sshd on 127.0.0.2 and 127.0.0.3 (tests/support/ssh_hosts.py), reached through an ssh
config with aliases in a temporary HOME; both sides run the same 2 x 2-rank Gloo
all_reduce, interleaved (jt, hand, jt, hand, ...) after one untimed warm-up of each:

  jt:    ``jt.submit(code, target="pair", nodes=2, procs=2)`` then ``run.wait()``: capture,
         run store, supervisor, pre-flight on both nodes, snapshot check (already there
         after the warm-up, as for any re-run of a cell), one torchrun per node, live
         mirroring of logs and events, verified teardown on both nodes, collection.
  hand:  ``ssh n1 'cd CODE && env ... torchrun --nnodes 2 ... _jt/cell.py'`` and the
         same for n2, started together with plain ssh (a new connection each, as typed
         by hand), waiting for both; the code (a copy of jt's snapshot, made once) is
         already on the nodes.

Both sides pay torch's import and the rendezvous; what differs is what jt adds around
them. Target: jt median <= 1.05 x hand median.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

TARGET_RATIO = 1.05
CODE = """
import os, time
began = time.time()
import torch, torch.distributed as dist
dist.init_process_group()
t = torch.ones(1)
dist.all_reduce(t)
line = f"rank {dist.get_rank()} sum {t.item()} began {began} ended {time.time()}\\n"
os.write(1, line.encode())  # one write: the ranks of a hand run share one stdout
dist.destroy_process_group()
"""


def rank_times(text: str) -> tuple[float, float]:
    """(first cell start, last cell end) from the ranks' output (lines may interleave)."""
    began = [float(v) for v in re.findall(r"began (\d+\.\d+)", text)]
    ended = [float(v) for v in re.findall(r"ended (\d+\.\d+)", text)]
    return min(began), max(ended)


def jt_run(jt, index: int) -> float:
    wall = time.time()
    start = time.perf_counter()
    run = jt.submit(CODE, target="pair", nodes=2, procs=2, name=f"bench-{index}")
    run.wait(timeout=300)
    elapsed = time.perf_counter() - start
    state = run.state
    if state.get("teardown", {}).get("leftovers"):
        raise SystemExit(f"leftovers after {run.id}: {state['teardown']}")
    stages = state["stages"]
    records = run.store.rank_records(run.id).values()
    first = min(r["started"] for r in records)
    last = max(r["ended"] for r in records)
    began, ended = rank_times("".join(run.logs(r) for r in range(4)))
    remote = Path(state["launcher"]["run_dir_remote"])
    exited = max(json.loads(p.read_text())["ended"] for p in remote.glob("node-*.exit"))
    print(
        f"  jt:   first cell start {began - wall:.2f}, last cell end {ended - wall:.2f}, "
        f"done {elapsed:.2f}"
    )
    print(
        f"  jt phases: submit->preparing {stages['preparing']['start'] - state['created']:.2f}"
        f"  preparing {stages['preparing']['end'] - stages['preparing']['start']:.2f}"
        f"  running->first rank {first - stages['running']['start']:.2f}"
        f"  ranks {last - first:.2f}  last rank->launchers exit {exited - last:.2f}"
        f"  ->finalizing {stages['finalizing']['start'] - exited:.2f}"
        f"  finalizing {state['ended'] - stages['finalizing']['start']:.2f}"
        f"  ->wait returns {wall + elapsed - state['ended']:.2f}",
        flush=True,
    )
    return elapsed


def hand_run(config: Path, snapshot: str, python: str, index: int) -> float:
    from jupyter_trainer.rankside.host import procs

    port = procs.free_port("127.0.0.2")
    cmds = []
    for node in range(2):
        torchrun = [
            python,
            "-m",
            "torch.distributed.run",
            "--nnodes=2",
            "--rdzv-backend=c10d",
            f"--rdzv-id=hand-{index}",
            f"--rdzv-endpoint=127.0.0.2:{port}",
            f"--rdzv-conf=is_host={int(node == 0)}",
            "--nproc-per-node=2",
            "--max-restarts=0",
            "--monitor-interval=0.1",
            "_jt/cell.py",
        ]
        remote = f"cd {snapshot} && env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo " + " ".join(
            torchrun
        )
        cmds.append(["ssh", "-F", str(config), "-T", f"n{node + 1}", remote])
    wall = time.time()
    start = time.perf_counter()
    children = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for c in cmds]
    outs = [c.communicate()[0].decode() for c in children]
    elapsed = time.perf_counter() - start
    if any(c.returncode for c in children) or outs[0].count("sum 4.0") != 2:
        raise SystemExit(f"the hand run failed:\n{outs}")
    began, ended = rank_times("".join(outs))
    print(
        f"  hand: first cell start {began - wall:.2f}, last cell end {ended - wall:.2f}, "
        f"done {elapsed:.2f}"
    )
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    from support.ssh_hosts import start_hosts

    root = Path(tempfile.mkdtemp(prefix="jt-bench-ssh-"))
    hosts = start_hosts(root / "hosts")
    try:
        config = hosts.write_home(root / "home")
        os.environ["HOME"] = str(root / "home")
        os.environ["JUPYTER_TRAINER_HOME"] = str(root / "jt")
        (root / "jt").mkdir()
        workdir = root / "remote"
        (root / "jt" / "targets.toml").write_text(
            f'[targets.pair]\nkind = "ssh"\nhosts = ["n1", "n2"]\nworkdir = "{workdir}"\n'
            'env = { GLOO_SOCKET_IFNAME = "lo" }\n'
        )
        import jupyter_trainer as jt

        samples: dict[str, list[float]] = {"jt": [], "hand": []}
        snapshot = python = ""
        for i in range(args.repeats + 1):  # round 0 is the warm-up
            took = jt_run(jt, i)
            if i == 0:
                run = jt.runs(limit=1)[0]
                # The hand side's own copy of the code: run in jt's snapshot, it would write
                # there (__pycache__), and jt's pre-flight would set the changed copy aside
                # and send it again before every jt run.
                snapshot = str(workdir / "hand-code")
                shutil.copytree(
                    workdir / "snapshots" / run.spec.code.hash.replace(":", "-"), snapshot
                )
                python = run.state["python"]
            hand = hand_run(config, snapshot, python, i)
            if i:
                samples["jt"].append(took)
                samples["hand"].append(hand)
            print(
                f"round {i}{' (warm-up)' if not i else ''}: jt {took:.2f} s, hand {hand:.2f} s",
                flush=True,
            )
        ratio = statistics.median(samples["jt"]) / statistics.median(samples["hand"])
        for side, values in samples.items():
            print(
                f"{side:>5}: median {statistics.median(values):.2f} s  min {min(values):.2f}  "
                f"max {max(values):.2f}  stdev {statistics.stdev(values):.2f}"
            )
        print(
            f"ratio jt/hand {ratio:.3f}: {'meets' if ratio <= TARGET_RATIO else 'MISSES'} "
            f"the target of {TARGET_RATIO}"
        )
        if args.json:
            Path(args.json).write_text(json.dumps({"samples": samples, "ratio": ratio}, indent=1))
    finally:
        from jupyter_trainer.nodes.ssh import close_masters, control_dir

        close_masters(control_dir(root / "jt"))
        hosts.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
