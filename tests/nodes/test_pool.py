"""--hot: ranks forked by a warm pool, checked against torchrun with real processes.

Every run here is a real 2-rank Gloo job; the pool is a real detached process. The ``home``
fixture checks that no rank of any run is left (ranks forked by a pool included, through
``pool.leftover_pids``) and ends the store's pools.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import stat
import sys
from pathlib import Path

import pytest
from conftest import leftover, wait_for
from support import jt_cli
from support.workloads import LONG_CELL, PER_RUN

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import SpecError
from jupyter_trainer.core.spec import CodeSpec, LaunchSpec, RunSpec
from jupyter_trainer.rankside import hotstart as pool
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.rankside.hotstart import client

ALL_REDUCE = """
import json, os
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo", init_method="env://")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print(f"rank {jt.rank} sum {t.item()}", flush=True)
jt.log(step=0, total=t.item())
with open(os.path.join(jt.outputs_dir, f"env-{jt.rank}.json"), "w") as f:
    json.dump(dict(os.environ), f)
with open(os.path.join(jt.outputs_dir, f"threads-{jt.rank}.txt"), "w") as f:
    f.write(str(torch.get_num_threads()))
dist.destroy_process_group()
"""


# Differ from run to run (or, for the agent's store, by design: there is no agent).
TORCHRUN_VARS = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
}


def rank_envs(run: api.Run) -> dict[int, dict[str, str]]:
    return {r: json.loads(Path(run.outputs, f"env-{r}.json").read_text()) for r in (0, 1)}


def wait_until_all_ranks_log(run: api.Run, ranks: int = 2) -> None:
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(ranks)),
        timeout=90,
        what=f"events from {ranks} ranks of {run.id}",
    )


def hot_record(run: api.Run) -> dict:
    return run.state["launcher"].get("hot") or {}


@pytest.mark.parametrize("hot", [False, True], ids=["torchrun", "hot"])
def test_all_reduce_logs_metrics_and_torchrun_variables(home, hot):
    run = api.submit(ALL_REDUCE, procs=2, hot=hot, name="reduce").wait(timeout=180)
    assert run.status == "completed"
    for r in (0, 1):
        assert f"rank {r} sum 3.0" in run.logs(r)
        assert run.metrics(r)["total"][-1][1] == 3.0
    envs = rank_envs(run)
    for r, env in envs.items():
        assert set(env) >= TORCHRUN_VARS
        assert (
            env["RANK"],
            env["LOCAL_RANK"],
            env["WORLD_SIZE"],
            env["LOCAL_WORLD_SIZE"],
            env["GROUP_RANK"],
            env["ROLE_RANK"],
            env["ROLE_WORLD_SIZE"],
        ) == (str(r), str(r), "2", "2", "0", str(r), "2")
        assert env["TORCHELASTIC_RESTART_COUNT"] == env["TORCHELASTIC_MAX_RESTARTS"] == "0"
        assert env["JT_RUN_ID"] == run.id and env["JT_LAUNCHER"] == "torchrun"
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert envs[0]["TORCHELASTIC_RUN_ID"] == envs[1]["TORCHELASTIC_RUN_ID"]
    if hot:
        assert hot_record(run)["used"] is True
        assert (Path(run.store.home, "runs", run.id, pool.records.RUN_RECORD)).exists()
    else:
        assert "hot" not in run.state["launcher"]
    assert leftover(run.id) == []


def test_a_hot_run_holds_its_rendezvous_port_until_rank_0_hosts_the_store(home):
    """The pool listens on the port before it forks and rank 0 hosts the store on that very
    socket. A port picked by probing and releasing it stayed free for seconds (rank 0's
    imports), so a process that bound it meanwhile, such as another run's rank asking the
    kernel for any free port, made rank 0 fail or the ranks rendezvous with a stranger."""
    code = """
import os, time
import torch.distributed as dist
print("port", os.environ["MASTER_PORT"], flush=True)
time.sleep(3)  # rank 0's imports on a busy machine
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
"""
    run = api.submit(code, procs=2, hot=True, name="held-port")
    port = int(
        wait_for(lambda: re.search(r"port (\d+)", run.logs(0)), 90, what="rank 0's MASTER_PORT")[1]
    )
    stranger = None
    try:
        with pytest.raises(OSError) as refused:
            stranger = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
        assert refused.value.errno == errno.EADDRINUSE
        run.wait(timeout=120)
    finally:
        if stranger is not None:
            stranger.close()
    assert run.status == "completed" and hot_record(run)["used"] is True
    assert json.loads(Path(run.path, pool.records.RUN_RECORD).read_text())["master_port"] == port
    assert leftover(run.id) == []


def test_a_hot_rank_sees_the_environment_a_torchrun_rank_sees(home):
    cold = api.submit(ALL_REDUCE, procs=2, hot=False, name="cold").wait(timeout=180)
    assert "hot" not in cold.state["launcher"]
    hot = api.submit(ALL_REDUCE, procs=2, hot=True, name="hot").wait(timeout=180)
    assert hot_record(hot)["used"] is True
    for r in (0, 1):
        a, b = rank_envs(cold)[r], rank_envs(hot)[r]
        assert set(a) == set(b), set(a) ^ set(b)
        differ = {k for k in a if a[k] != b[k]}
        assert differ <= PER_RUN, {k: (a[k], b[k]) for k in differ - PER_RUN}
    assert rank_envs(hot)[0]["TORCHELASTIC_USE_AGENT_STORE"] == "False"
    threads = [
        [(run.outputs / f"threads-{r}.txt").read_text() for r in (0, 1)] for run in (cold, hot)
    ]
    assert threads[0] == threads[1] == ["1", "1"]  # OMP_NUM_THREADS=1, as torchrun's ranks


def test_a_failing_hot_rank_fails_the_run_naming_it(home):
    code = """
import time
import torch.distributed as dist
dist.init_process_group()
if dist.get_rank() == 1:
    raise ValueError("rank one broke")
time.sleep(600)
"""
    run = api.submit(code, procs=2, hot=True, name="hot-fail")
    with pytest.raises(api.RunFailed) as info:
        run.wait(timeout=120)
    assert info.value.failed_rank == 1
    assert "rank one broke" in run.state["error"]
    assert run.state["rank_exit_codes"]["1"] == 1
    assert hot_record(run)["used"] is True
    assert leftover(run.id) == []


def test_cancel_leaves_no_hot_rank(home):
    run = api.submit(LONG_CELL, procs=2, hot=True, name="hot-cancel")
    wait_until_all_ranks_log(run)
    pids = {rec["pid"] for rec in run.store.rank_records(run.id).values()}
    assert len(pids) == 2 and leftover(run.id)
    run.cancel(wait=True, timeout=30)
    assert run.status == "canceled"
    assert leftover(run.id) == []
    assert all(not procs.is_alive(pid) for pid in pids)
    assert run.state["teardown"]["leftovers"] == []


def test_killing_the_pool_mid_run_leaves_no_rank_and_says_why(home):
    run = api.submit(LONG_CELL, procs=2, hot=True, name="hot-pool-killed")
    wait_until_all_ranks_log(run)
    pool_pid = hot_record(run)["pool"]
    os.kill(pool_pid, signal.SIGKILL)
    wait_for(lambda: run.status in ("failed", "lost"), timeout=60, what="the run to end")
    assert leftover(run.id) == []
    state = run.state
    assert "SIGKILL" in (state.get("error") or ""), state.get("error")
    assert "rank pool" in run.store.paths(run.id).logs.joinpath("launcher.log").read_text()


def test_killing_the_supervisor_leaves_no_hot_rank(home):
    run = api.submit(LONG_CELL, procs=2, hot=True, name="hot-orphan")
    wait_until_all_ranks_log(run)
    os.kill(run.state["supervisor"]["pid"], signal.SIGKILL)
    wait_for(lambda: run.status == "lost", timeout=20, what="status lost")
    wait_for(lambda: leftover(run.id) == [], timeout=20, what="ranks to end with their supervisor")
    assert pool.records.live_pools(home)  # the pool itself lives on for the next run


def test_a_second_run_reuses_the_warm_pool_and_two_runs_are_independent(home):
    first = api.submit(ALL_REDUCE, procs=2, hot=True, name="first").wait(timeout=180)
    assert hot_record(first) | {"warm": False} == hot_record(first)  # it started the pool
    second = api.submit(ALL_REDUCE, procs=2, hot=True, name="second").wait(timeout=60)
    assert hot_record(second)["warm"] is True
    assert hot_record(second)["pool"] == hot_record(first)["pool"]
    both = [
        api.submit(
            ALL_REDUCE.replace("dist.get_rank() + 1", f"dist.get_rank() + {k}"),
            procs=2,
            hot=True,
            name=f"together-{k}",
        )
        for k in (1, 10)
    ]
    for run, total in zip(both, (3.0, 21.0)):
        run.wait(timeout=120)
        assert run.metrics(0)["total"][-1][1] == total
        assert hot_record(run)["warm"] is True
    assert both[0].state["launcher"]["pgid"] != both[1].state["launcher"]["pgid"]


def test_a_module_that_initialises_cuda_makes_the_run_use_torchrun(home, tmp_path, monkeypatch):
    """No GPU here: the module fakes an initialised CUDA where the pool looks for it."""
    fake = tmp_path / "fakecuda"
    fake.mkdir()
    # what a module that initialises CUDA at import does; without a GPU, CUDA then looks
    # initialised where the pool asks
    (fake / "cudaish.py").write_text(
        "import torch\n"
        "def setup():\n"
        "    try:\n"
        "        torch.zeros(1, device='cuda')\n"
        "    except (AssertionError, RuntimeError):  # this torch has no CUDA\n"
        "        torch.cuda.is_initialized = lambda: True\n"
        "setup()\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(fake))
    run = api.submit(
        "import cudaish\n" + ALL_REDUCE, procs=2, hot=True, name="cuda-at-import"
    ).wait(timeout=180)
    assert run.status == "completed" and run.metrics(0)["total"][-1][1] == 3.0
    record = hot_record(run)
    assert record["used"] is False and record["why"].startswith(
        "importing cudaish initialised CUDA (at cudaish.py:4 in setup: "
        "torch.zeros(1, device='cuda')), and a process that did cannot fork ranks that use it"
    ), record["why"]
    assert "torch.distributed.run" in run.state["launcher"]["argv"]


def test_an_idle_pool_exits_and_removes_its_socket(home):
    key = client.pool_key(sys.executable, "idle-test", ["torch"])
    env = {k: v for k, v in os.environ.items() if not k.startswith("JT_")}
    sock, warm = client.connect_or_start(sys.executable, key, ["torch"], env, home, idle=2.0)
    sock.close()
    assert warm is False
    folder = Path(home, pool.records.POOLS_DIR)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / f"{key}.sock").stat().st_mode) == 0o600
    record = json.loads((folder / f"{key}.json").read_text())
    assert procs.is_alive(record["pid"], record["start_ticks"])
    wait_for(
        lambda: not procs.is_alive(record["pid"], record["start_ticks"]),
        timeout=30,
        what="the idle pool to exit",
    )
    assert not (folder / f"{key}.sock").exists() and not (folder / f"{key}.json").exists()


def test_hot_is_checked_where_it_is_asked_for(home):
    with pytest.raises(SpecError, match="--launcher torchrun only"):
        api.submit("pass", hot=True, launcher="python")
    with pytest.raises(SpecError, match="--max-restarts"):
        api.submit("pass", hot=True, procs=2, max_restarts=1)
    spec = RunSpec(
        name="x", code=CodeSpec(entry="a.py", hash="h"), launch=LaunchSpec(procs=2, hot=True)
    )
    assert RunSpec.from_dict(spec.to_dict()) == spec
    assert "hot" not in RunSpec(name="x", code=CodeSpec(entry="a.py", hash="h")).to_dict()["launch"]


def test_two_notebooks_share_one_pool_and_get_independent_runs(home, tmp_path):
    """Two kernels (here two Python processes, each submitting as a notebook does) run cells
    at the same time: one warm pool forks both runs' ranks, each run in its own process
    group with its own rendezvous and results."""
    import subprocess

    warm = api.submit(ALL_REDUCE, procs=2, name="warm-up").wait(timeout=180)
    assert hot_record(warm)["used"] is True
    script = tmp_path / "notebook.py"
    script.write_text(
        "import sys, jupyter_trainer as jt\n"
        "code = open(sys.argv[1]).read().replace('dist.get_rank() + 1', "
        "'dist.get_rank() + ' + sys.argv[2]) + 'import time\\ntime.sleep(3)\\n'\n"
        "run = jt.submit(code, procs=2, name='nb-' + sys.argv[2]).wait(timeout=120)\n"
        "print(run.id, flush=True)\n"
    )
    cell = tmp_path / "cell.py"
    cell.write_text(ALL_REDUCE)
    kernels = [
        subprocess.Popen(
            [sys.executable, str(script), str(cell), k], stdout=subprocess.PIPE, text=True
        )
        for k in ("1", "10")
    ]
    ids = [k.communicate(timeout=180)[0].strip() for k in kernels]
    assert [k.returncode for k in kernels] == [0, 0], ids
    runs = [api.get_run(run_id) for run_id in ids]
    for run, total in zip(runs, (3.0, 21.0)):
        assert run.status == "completed" and run.metrics(0)["total"][-1][1] == total
        assert hot_record(run)["pool"] == hot_record(warm)["pool"]
        assert leftover(run.id) == []
    assert runs[0].state["launcher"]["pgid"] != runs[1].state["launcher"]["pgid"]
    assert rank_envs(runs[0])[0]["MASTER_PORT"] != rank_envs(runs[1])[0]["MASTER_PORT"]
    first, second = (run.store.rank_records(run.id)[0] for run in runs)
    assert first["started"] < second["exited"] and second["started"] < first["exited"]  # at once


def test_the_pool_preloads_installed_modules_only(tmp_path):
    """What names a pool: torch and the installed modules the entry imports; the snapshot's
    own modules (they change between runs) and the standard library (cheap) are left out, so
    adding ``import time`` to a cell keeps its pool."""
    (tmp_path / "helper.py").write_text("")
    (tmp_path / "cell.py").write_text(
        "import time, os.path\nimport numpy as np\n"
        "from collections import deque\nimport torch.nn\n"
        "import helper\nfrom . import sibling\n"
    )
    assert client.entry_modules(str(tmp_path), "cell.py") == [
        "numpy",
        "torch",
        "torch.distributed",
        "torch.nn",
    ]


def test_the_pools_command_lists_and_stops_pools_but_not_under_a_running_run(home):
    import subprocess

    def cli(*args: str) -> subprocess.CompletedProcess:
        return jt_cli.cli("pools", *args, timeout=60)

    assert cli().stdout.strip() == "no warm rank pool is running"
    run = api.submit(LONG_CELL, procs=2, name="pool-busy")
    wait_until_all_ranks_log(run)
    pool_pid = hot_record(run)["pool"]
    rows = json.loads(cli("--json").stdout)
    assert [r["pid"] for r in rows] == [pool_pid]
    assert "torch" in rows[0]["modules"] and rows[0]["rss"] > 50 << 20
    assert str(pool_pid) in cli().stdout
    refused = cli("--stop")
    assert refused.returncode == 2 and run.id in refused.stderr and "--force" in refused.stderr
    assert run.status == "running" and procs.is_alive(pool_pid)
    run.cancel(wait=True, timeout=30)
    stopped = cli("--stop")
    assert stopped.returncode == 0 and stopped.stdout.strip() == "stopped 1 pool"
    assert not procs.is_alive(pool_pid) and pool.records.live_pools(home) == []
