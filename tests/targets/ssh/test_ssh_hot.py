"""Hot runs on an ssh target: each node's ranks forked by a warm pool on that node, checked
against torchrun on the same two real sshd "hosts" (127.0.0.2 and 127.0.0.3, this machine's
process table, so the leftover checks see both nodes' processes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import launched_by, leftover, wait_for
from support.ssh_hosts import ALIASES, add_pair_target
from support.workloads import LONG_CELL, PER_RUN

from jupyter_trainer import rankside
from jupyter_trainer.api import runs as api
from jupyter_trainer.nodes.frames import FrameReader
from jupyter_trainer.nodes.hotstart.bundle import node_bundle
from jupyter_trainer.rankside import hotstart as pool
from jupyter_trainer.targets.registry import add_target

ENV_DUMP = """
import json, os
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {jt.rank} sum {t.item()}", flush=True)
with open(os.path.join(jt.outputs_dir, f"env-{jt.rank}.json"), "w") as f:
    json.dump(dict(os.environ), f)
dist.destroy_process_group()
"""


def rank_envs(run: api.Run, world: int = 4) -> dict[int, dict[str, str]]:
    return {r: json.loads(Path(run.outputs, f"env-{r}.json").read_text()) for r in range(world)}


def hot(run: api.Run) -> dict:
    return run.state["launcher"].get("hot") or {}


def apart(home: Path, tmp_path: Path) -> list[Path]:
    """A target 'apart' whose two hosts have their own workdirs (so their own pools)."""
    dirs = [tmp_path / "w1", tmp_path / "w2"]
    add_target(
        "apart",
        "ssh",
        home=home,
        connect_timeout=5,
        env={"GLOO_SOCKET_IFNAME": "lo"},
        hosts=[{"host": a, "workdir": str(d)} for a, d in zip(ALIASES, dirs)],
    )
    return dirs


def test_hot_ranks_on_two_nodes_get_what_torchrun_gives_them(pair, home):
    cold = api.submit(ENV_DUMP, target="pair", nodes=2, procs=2, hot=False, name="torchrun").wait(
        timeout=180
    )
    assert launched_by(cold) == "torchrun" and "hot" not in cold.state["launcher"]
    first = api.submit(ENV_DUMP, target="pair", nodes=2, procs=2, name="hot-1").wait(timeout=180)
    assert launched_by(first) == "hot" and hot(first)["warm"] is False
    second = api.submit(ENV_DUMP, target="pair", nodes=2, procs=2, name="hot-2").wait(timeout=120)
    assert launched_by(second) == "hot" and hot(second)["warm"] is True
    assert hot(second)["pools"] == hot(first)["pools"]
    for run in (cold, first, second):
        assert [f"rank {r} sum 10.0" in run.logs(r) for r in range(4)] == [True] * 4
    for r in range(4):
        a, b = rank_envs(cold)[r], rank_envs(second)[r]
        assert set(a) == set(b), set(a) ^ set(b)
        differ = {k for k in a if a[k] != b[k]}
        assert differ <= PER_RUN, {k: (a[k], b[k]) for k in differ - PER_RUN}
        assert (
            b["RANK"],
            b["LOCAL_RANK"],
            b["GROUP_RANK"],
            b["WORLD_SIZE"],
            b["LOCAL_WORLD_SIZE"],
            b["ROLE_RANK"],
            b["ROLE_WORLD_SIZE"],
        ) == (str(r), str(r % 2), str(r // 2), "4", "2", str(r), "4")
    assert len({rank_envs(second)[r]["MASTER_PORT"] for r in range(4)}) == 1
    log = (second.store.existing(second.id).logs / "launcher.log").read_text()
    assert "[jt] rank pools on 2 node(s) ready" in log and "forked by the rank pool" in log
    assert leftover(second.id) == []


def test_two_hot_runs_at_once_share_the_nodes_pools_and_stay_independent(pair, home):
    runs = [
        api.submit(
            ENV_DUMP.replace("dist.get_rank() + 1", f"dist.get_rank() + {k}"),
            target="pair",
            nodes=2,
            procs=2,
            name=f"together-{k}",
        )
        for k in (1, 10)
    ]
    for run, total in zip(runs, (10.0, 46.0)):
        run.wait(timeout=180)
        assert launched_by(run) == "hot"
        assert [f"rank {r} sum {total}" in run.logs(r) for r in range(4)] == [True] * 4
        assert {rank_envs(run)[r]["JT_RUN_ID"] for r in range(4)} == {run.id}
    assert hot(runs[0])["pools"] == hot(runs[1])["pools"]  # started once, by either run
    assert all(leftover(run.id) == [] for run in runs)


def test_cancel_of_a_hot_run_leaves_no_rank_and_the_agent_sees_them(pair, home, tmp_path):
    run = api.submit(LONG_CELL, target="pair", nodes=2, procs=2, name="hot-cancel")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(4)),
        timeout=120,
        what="all four ranks to log",
    )
    assert launched_by(run) == "hot"
    remote = tmp_path / "remote"
    seen = agent_leftovers(remote, run.id)
    assert len(seen) >= 4, seen  # the forked ranks, which carry no JT_RUN_ID of their own
    run.cancel(timeout=60)
    assert run.state["status"] == "canceled"
    assert run.state["teardown"]["leftovers"] == [] and leftover(run.id) == []
    assert agent_leftovers(remote, run.id) == []
    assert pool.records.live_pools(remote)  # the pool stays warm for the next run


def test_killing_a_nodes_pool_mid_run_leaves_no_rank_and_says_why(pair, home, tmp_path):
    apart(home, tmp_path)
    run = api.submit(LONG_CELL, target="apart", nodes=2, procs=2, name="hot-pool-killed")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(4)),
        timeout=120,
        what="all four ranks to log",
    )
    pools = hot(run)["pools"]
    assert len(set(pools.values())) == 2  # one pool per node
    os.kill(pools[ALIASES[1]], signal.SIGKILL)
    wait_for(lambda: run.status in ("failed", "lost"), timeout=90, what="the run to end")
    state = run.state
    assert "SIGKILL" in (state.get("error") or ""), state.get("error")
    # The pool's own death, or (first seen under load) its ranks', killed with it
    assert (
        f"{ALIASES[1]} pid {pools[ALIASES[1]]}" in state["error"]
        or "killed by SIGKILL" in state["error"]
    ), state["error"]
    log = (run.store.existing(run.id).logs / "launcher.log").read_text()
    assert f"[{ALIASES[1]}] [jt pool] the rank pool (pid {pools[ALIASES[1]]}) ended" in log
    wait_for(lambda: leftover(run.id) == [], timeout=30, what="no rank left")


def test_killing_a_nodes_launcher_mid_run_leaves_no_rank(pair, home):
    """The pool watches the launcher that handed it the ranks, as torchrun's workers die with
    their agent."""
    run = api.submit(LONG_CELL, target="pair", nodes=2, procs=2, name="hot-launcher-killed")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(4)),
        timeout=120,
        what="all four ranks to log",
    )
    assert launched_by(run) == "hot"
    os.kill(run.state["launcher"]["nodes"][1]["pid"], signal.SIGKILL)
    wait_for(lambda: run.status in ("failed", "lost"), timeout=90, what="the run to end")
    assert run.state["error"].startswith("the rank pool's launcher on a node (pools: "), run.state[
        "error"
    ]
    assert "was killed by SIGKILL before any rank failed" in run.state["error"]
    wait_for(lambda: leftover(run.id) == [], timeout=30, what="no rank left")
    assert pool.records.live_pools(pair_workdir(run))  # the pools live on


def pair_workdir(run: api.Run) -> Path:
    return Path(run.state["launcher"]["nodes"][0]["run_dir"]).parent.parent


def test_a_module_initialising_cuda_makes_every_node_use_torchrun(pair, home, tmp_path):
    """No GPU here: the module fakes an initialised CUDA where the pool looks for it."""
    fake = tmp_path / "fakecuda"
    fake.mkdir()
    (fake / "cudaish.py").write_text("import torch\ntorch.cuda.is_initialized = lambda: True\n")
    python = tmp_path / "python"  # the nodes' interpreter, with the module on its path
    python.write_text(
        f"#!/bin/sh\nPYTHONPATH={fake}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        f'export PYTHONPATH\nexec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    add_pair_target("pair", home, tmp_path, replace=True, python=str(python))
    run = api.submit(
        "import cudaish\n" + ENV_DUMP, target="pair", nodes=2, procs=2, name="cuda-at-import"
    ).wait(timeout=180)
    assert launched_by(run) == "torchrun"
    why = hot(run)["why"]
    assert hot(run)["used"] is False and "initialised CUDA" in why and "cudaish" in why
    assert f"node {ALIASES[0]}" in why and f"node {ALIASES[1]}" in why
    assert [f"rank {r} sum 10.0" in run.logs(r) for r in range(4)] == [True] * 4


def test_the_pool_files_a_node_gets_import_nothing_else_of_jupyter_trainer(tmp_path):
    digest, files = node_bundle()
    assert len(digest) == 16 and len(files) == len(rankside.POOL) + 3  # launch, pool, keeper
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    code = (
        "import sys\n"
        "import _jt_node_pool.hotstart.node_launch, _jt_node_pool.hotstart.warm, "
        "_jt_node_pool.hotstart.child, _jt_node_pool.hotstart.records, "
        "_jt_node_pool.hotstart.keeper\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'jupyter_trainer'))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # -S: no site-packages, so an import of anything not shipped (jupyter_trainer) fails
    done = subprocess.run(
        [sys.executable, "-S", "-c", code],
        cwd=tmp_path / "pool",
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def agent_leftovers(workdir: Path, run_id: str) -> list[str]:
    """What the node agent's ``leftovers`` sees of a run on a node with ``workdir``."""
    agent = next((workdir / "bin").glob("jt-node-*.pyz"))
    args = {"run_id": run_id, "run_dir": str(workdir / "runs" / run_id)}
    done = subprocess.run(
        [sys.executable, str(agent), "--workdir", str(workdir), "leftovers", json.dumps(args)],
        capture_output=True,
        check=True,
    )
    header, _ = next(iter(FrameReader().feed(done.stdout)))
    return header["leftovers"]
