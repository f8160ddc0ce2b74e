"""Hot runs on Slurm: an allocation held between runs (``hold``), against a real single-host
Slurm. The second run of a shape forks its ranks from the pool the first one warmed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import leftover, wait_for
from support import jt_cli
from support.workloads import DIST_STEPS, SLEEPER

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import RunFailed, SpecError, TargetError
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.rankside.hotstart.records import read_json
from jupyter_trainer.targets.slurm.script import SlurmConfig

HOLD = "hold = 600\n"


@pytest.fixture
def held(cluster, home):
    """The cluster target with ``hold`` set; the held job is cancelled afterwards (the
    ``cluster`` fixture empties the queue) and its keeper's pools must be gone then."""
    path = home / "targets.toml"
    path.write_text(path.read_text() + HOLD)
    yield cluster
    cluster.run("scancel", "--user", os.environ.get("USER", "root"), check=False)
    wait_for(lambda: not _pools_alive(home), timeout=30, what="the held allocation's pools to end")


def _pools_alive(home: Path) -> list[int]:
    found = []
    for record in (home / "pools").glob("*.json"):
        pid = read_json(record).get("pid")
        if isinstance(pid, int) and procs.is_alive(pid):
            found.append(pid)
    return found


def _wait(run: api.Run, cluster, timeout: float = 180) -> None:
    """``run.wait``; a run still waiting says what Slurm says of the queue and the node, a
    failed one what its launcher printed."""
    try:
        run.wait(timeout=timeout)
    except RunFailed as exc:  # what the launcher said, which the error only sums up
        log = run.store.existing(run.id).logs / "launcher.log"
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else "(no launcher.log)"
        raise AssertionError(f"{exc}\n--- launcher.log\n{tail}") from None
    except TimeoutError as exc:
        queue = cluster.run("squeue", "-a", "-o", "%i %T %r %j", check=False).stdout
        node = cluster.run("scontrol", "show", "node", check=False).stdout
        raise AssertionError(f"{exc}\nrun state: {run.state.get('queue')}\n{queue}\n{node}")


def _until_training(run: api.Run, cluster) -> None:
    try:
        wait_for(lambda: run.store.read_events(run.id, 1)[0], timeout=180, what="rank 1's event")
    except AssertionError as exc:
        queue = cluster.run("squeue", "-a", "-o", "%i %T %r %j", check=False).stdout
        raise AssertionError(f"{exc}\nrun state: {run.status} {run.state.get('queue')}\n{queue}")


def _hold_job(home: Path) -> str:
    (record,) = (home / "pools" / "holds").glob("*.json")
    return read_json(record)["job_id"]


def test_second_run_forks_from_the_pool_the_first_warmed(held, home):
    first = api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 3}, name="hot1")
    _wait(first, held, 180)
    hot = first.state["launcher"]["hot"]
    assert hot["used"] and not hot["warm"], hot
    job = _hold_job(home)
    assert hot["allocation"] == job
    assert "rank 0 of 2 sum 3.0" in first.logs(0) and "rank 1 of 2 sum 3.0" in first.logs(1)
    assert [e["step"] for e in first.store.read_events(first.id, 1)[0] if "step" in e] == [0, 1, 2]
    assert held.queue() and job in " ".join(held.queue())  # the allocation outlives the run

    second = api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 2}, name="hot2")
    _wait(second, held, 120)
    again = second.state["launcher"]["hot"]
    assert again["used"] and again["warm"] and again["allocation"] == job, again
    assert again["pool"] == hot["pool"]  # the same warm pool, kept by the allocation
    assert "rank 1 of 2 sum 3.0" in second.logs(1)
    assert leftover(first.id) == [] and leftover(second.id) == []


def test_a_pool_that_cannot_serve_makes_torchrun_start_the_ranks_in_the_allocation(
    held, home, tmp_path, monkeypatch
):
    """No GPU here: the module fakes an initialised CUDA where the pool looks for it."""
    fake = tmp_path / "fakecuda"
    fake.mkdir()
    (fake / "cudaish.py").write_text("import torch\ntorch.cuda.is_initialized = lambda: True\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    run = api.submit(
        "import cudaish\n" + DIST_STEPS,
        procs=2,
        target="cluster",
        params={"steps": 1},
        name="hot-cuda",
    )
    _wait(run, held)
    hot, launcher = run.state["launcher"]["hot"], run.state["launcher"]
    assert not hot["used"] and "initialised CUDA" in hot["why"] and "cudaish" in hot["why"], hot
    assert launcher["hold_job"] == _hold_job(home) and "job_id" not in launcher
    assert "torchrun" in Path(run.store.paths(run.id).root, "hot-run.sh").read_text()
    assert "rank 1 of 2 sum 3.0" in run.logs(1) and leftover(run.id) == []


def test_cancel_ends_the_ranks_but_keeps_the_allocation(held, home):
    run = api.submit(SLEEPER, procs=2, target="cluster", name="hot-cancel")
    _until_training(run, held)
    pids = {rec["pid"] for rec in run.store.rank_records(run.id).values()}
    assert run.state["launcher"]["hot"]["used"]
    run.cancel(wait=True, timeout=30)
    assert run.status == "canceled"
    assert all(not Path(f"/proc/{pid}").exists() for pid in pids)
    assert leftover(run.id) == [] and run.state["teardown"]["leftovers"] == []
    assert _hold_job(home) in " ".join(held.queue())


def test_a_one_node_run_trains_though_its_rendezvous_port_is_taken(held, home):
    """The run's port comes from its id; on a shared node another process may hold it. A
    one-node run in a held allocation does not need that port (no other node is told it):
    the pool takes any free one. Before, the pool failed the run ("the rendezvous port P of
    this node cannot be listened on: Address already in use")."""
    import socket

    from jupyter_trainer.targets.slurm.target import rendezvous_port

    code = DIST_STEPS.replace(
        'print("rank"', 'print("port", os.environ["MASTER_PORT"]); print("rank"'
    )
    run = api.submit(
        "import os\n" + code, procs=2, target="cluster", params={"steps": 1}, name="hot-port-taken"
    )
    # taken at once: the allocation, its keeper and a warm pool take seconds to start
    port = rendezvous_port(run.id)
    with socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True):
        _wait(run, held)
    assert run.state["launcher"]["hot"]["used"], run.state["launcher"]
    used = {
        int(line.split()[1])
        for r in (0, 1)
        for line in run.logs(r).splitlines()
        if line.startswith("port ")
    }
    assert len(used) == 1 and port not in used, used
    assert "rank 1 of 2 sum 3.0" in run.logs(1) and leftover(run.id) == []


def test_failing_rank_is_named(held, home):
    code = (
        "import torch.distributed as dist\nfrom jupyter_trainer import runtime as jt\n"
        "dist.init_process_group()\njt.log(step=0, x=1)\n"
        "if jt.rank == 1:\n    raise ValueError('bad batch')\nimport time; time.sleep(600)\n"
    )
    run = api.submit(code, procs=2, target="cluster", name="hot-fail")
    with pytest.raises(RunFailed) as info:
        run.wait(timeout=180)
    assert info.value.failed_rank == 1 and "ValueError: bad batch" in str(info.value)
    assert run.state["launcher"]["hot"]["used"]
    assert leftover(run.id) == []


def test_killed_keeper_ends_its_pools_and_the_allocation(held, home):
    run = api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 1}, name="hot-k")
    _wait(run, held, 180)
    pool = run.state["launcher"]["hot"]["pool"]
    job = _hold_job(home)
    held.run("scancel", job)
    wait_for(lambda: not procs.is_alive(pool), timeout=30, what="the pool's end")
    wait_for(lambda: held.queue() == [], timeout=30, what="the held job's end")
    later = api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 1}, name="hot-new")
    _wait(later, held)  # a new allocation, cold again
    hot = later.state["launcher"]["hot"]
    assert hot["used"] and not hot["warm"] and hot["allocation"] != job


def test_the_pools_command_lists_and_releases_the_allocation(held, home):
    def cli(*args: str) -> subprocess.CompletedProcess:
        return jt_cli.cli("pools", *args, timeout=60)

    run = api.submit(SLEEPER, procs=2, target="cluster", name="hot-busy")
    _until_training(run, held)
    job, pool = _hold_job(home), run.state["launcher"]["hot"]["pool"]
    listed = cli().stdout
    assert f"held Slurm allocation: job {job} (cluster-1x2) RUNNING" in listed, listed
    assert str(pool) in listed
    refused = cli("--stop")
    assert refused.returncode == 2 and run.id in refused.stderr, refused.stderr
    assert job in " ".join(held.queue())
    run.cancel(wait=True, timeout=30)
    stopped = cli("--stop")
    assert stopped.stdout.strip() == (
        f"stopped 1 pool and released 1 held Slurm allocation ({job})"
    ), stopped
    wait_for(lambda: held.queue() == [], timeout=30, what="the held job's end")
    assert not procs.is_alive(pool)


def test_without_hold_slurm_runs_are_jobs_and_hot_says_how_to_hold(cluster, home):
    with pytest.raises(SpecError, match="hold = SECONDS"):
        api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 1}, hot=True)
    assert cluster.queue() == []
    run = api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 1})
    _wait(run, cluster, 180)
    assert run.state["launcher"]["job_id"] and not run.state["launcher"].get("hot")


def test_dry_run_shows_the_steps_and_holds_nothing(held, home):
    shown = api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 1}, dry_run=True)
    assert shown.argv[:3] == ("srun", "--jobid=<held job>", "--overlap")
    assert shown.argv[-1] == f"{shown.run_dir}/hot-run.sh"
    assert "none is held yet, so the run first submits it" in shown.text
    assert "jt-hold-cluster-1x2" in shown.text and "keeper.py" in shown.text
    assert '"warm"' not in shown.script and "launch.py run" in shown.script
    assert any("hot: the ranks fork" in n for n in shown.notes)
    assert held.queue() == [] and not (home / "pools").exists() and api.runs(home=home) == []

    _wait(api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 1}), held)
    job = _hold_job(home)
    again = api.submit(DIST_STEPS, procs=2, target="cluster", params={"steps": 1}, dry_run=True)
    assert again.argv[1] == f"--jobid={job}" and f"job {job}" in again.text
    assert "keeper.py" not in again.text and len(api.runs(home=home)) == 1


def test_hold_is_checked():
    with pytest.raises(TargetError, match="hold must be a whole number of seconds"):
        SlurmConfig.from_config("c", {"hold": "20m"})
    with pytest.raises(TargetError, match="does not work with login or workdir"):
        SlurmConfig.from_config("c", {"hold": 600, "workdir": "/scratch/jt"})
    assert SlurmConfig.from_config("c", {"hold": 600}).hold == 600
