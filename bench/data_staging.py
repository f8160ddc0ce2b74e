"""Staging a data input to two ssh nodes, against ``rsync -a`` of the same folder.

    .venv/bin/python bench/data_staging.py [--gib 1] [--repeats 3] [--json PATH]

Two real sshd on 127.0.0.2 and 127.0.0.3 (tests/support/ssh_hosts.py), reached through an ssh
config with aliases in a temporary HOME, each node with its own workdir. The folder is
``--gib`` GiB of random data in 16 files. Each round, interleaved:

  cold jt:    the nodes' caches emptied, then what the supervisor does while the run is
              ``preparing``: ``stage_inputs`` to both nodes at once (one probe per node,
              rsync over the node's ssh ControlMaster into a private folder, renamed into
              place with its manifest).
  cold rsync: ``rsync -a FOLDER nK:DEST/`` to both nodes at once, by hand, into an
              empty folder (ssh's own connection each, as typed by hand); which of the
              two cold sides goes first alternates between rounds, each after a ``sync``.
  warm jt:    a second run's whole cost for the unchanged input: ``resolve_inputs`` at
              submit (every file stat'ed, hashes from the stat cache), then ``stage_inputs``
              (the probe finds it; nothing sent).

The first hashing of the folder (at the first submit, before any staging) is timed on its
own. Targets: warm <= 1 s; cold jt median <= 1.1 x cold rsync median.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

WARM_TARGET_S = 1.0
COLD_RATIO = 1.1
FILES = 16


def make_folder(path: Path, gib: float) -> None:
    path.mkdir(parents=True)
    size = int(gib * (1 << 30)) // FILES
    for k in range(FILES):
        with open(path / f"shard-{k:02d}.bin", "wb") as f:
            left = size
            while left:
                chunk = min(left, 8 << 20)
                f.write(os.urandom(chunk))
                left -= chunk


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    from support.ssh_hosts import start_hosts

    root = Path(tempfile.mkdtemp(prefix="jt-bench-data-"))
    hosts = start_hosts(root / "hosts")
    try:
        config = hosts.write_home(root / "home")
        os.environ["HOME"] = str(root / "home")
        home = root / "jt"
        os.environ["JUPYTER_TRAINER_HOME"] = str(home)
        from jupyter_trainer.inputs.inputs import resolve_inputs
        from jupyter_trainer.nodes.ssh import SshClient, control_dir
        from jupyter_trainer.nodes.stage_inputs import NodeCache, rsync_shell, stage_inputs

        data = root / "dataset"
        make_folder(data, args.gib)
        subprocess.run(["sync"], check=True)
        workdirs = [root / "w1", root / "w2"]
        control = str(control_dir(home))
        clients = [SshClient(alias, control, config_file=str(config)) for alias in ("n1", "n2")]

        started = time.perf_counter()
        [item] = resolve_inputs({"train": str(data)}, home=home)
        first_hash = time.perf_counter() - started

        def caches() -> list[NodeCache]:
            return [
                NodeCache(c, str(w / "data"), sys.executable, rsync_shell(c))
                for c, w in zip(clients, workdirs)
            ]

        def jt_stage() -> tuple[float, dict]:
            started = time.perf_counter()
            done = stage_inputs(caches(), [item], home, lambda record: None, lambda text: None)
            return time.perf_counter() - started, done

        def by_hand() -> float:
            dests = [w / "by-hand" for w in workdirs]
            started = time.perf_counter()
            with ThreadPoolExecutor(2) as pool:
                codes = list(
                    pool.map(
                        lambda pair: (
                            subprocess.run(
                                [
                                    "rsync",
                                    "-a",
                                    "-e",
                                    f"ssh -F {config}",
                                    f"{data}/",
                                    f"{pair[0]}:{pair[1]}/",
                                ],
                                capture_output=True,
                            ).returncode
                        ),
                        zip(("n1", "n2"), dests),
                    )
                )
            took = time.perf_counter() - started
            assert codes == [0, 0], codes
            for dest in dests:
                shutil.rmtree(dest)
            return took

        jt_stage()  # the ControlMasters up, as after a run's pre-flight
        samples: dict[str, list[float]] = {"cold_jt": [], "cold_rsync": [], "warm_jt": []}
        sent = []
        for round_ in range(args.repeats):
            for w in workdirs:
                shutil.rmtree(w / "data", ignore_errors=True)
            subprocess.run(["sync"], check=True)
            if round_ % 2:  # alternate which side goes first
                samples["cold_rsync"].append(by_hand())
                subprocess.run(["sync"], check=True)
            took, done = jt_stage()
            samples["cold_jt"].append(took)
            sent.append({n: r["transferred"] for n, r in done["data"]["train"].items()})
            if not round_ % 2:
                subprocess.run(["sync"], check=True)
                samples["cold_rsync"].append(by_hand())
            started = time.perf_counter()
            [again] = resolve_inputs({"train": str(data)}, home=home)
            took, done = jt_stage()
            samples["warm_jt"].append(time.perf_counter() - started)
            assert again.hash == item.hash
            assert {r["state"] for r in done["data"]["train"].values()} == {"cached"}
        med = {k: statistics.median(v) for k, v in samples.items()}
        result = {
            "gib": args.gib,
            "files": FILES,
            "repeats": args.repeats,
            "first_hash_s": round(first_hash, 3),
            "samples_s": {k: [round(x, 3) for x in v] for k, v in samples.items()},
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "cold_ratio": round(med["cold_jt"] / med["cold_rsync"], 3),
            "warm_target_met": med["warm_jt"] <= WARM_TARGET_S,
            "cold_target_met": med["cold_jt"] <= COLD_RATIO * med["cold_rsync"],
            "bytes_sent_per_node_cold": sent[-1],
        }
        print(json.dumps(result, indent=2))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return 0
    finally:
        from jupyter_trainer.nodes.ssh import close_masters, control_dir

        close_masters(control_dir(Path(os.environ["JUPYTER_TRAINER_HOME"])))
        hosts.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
