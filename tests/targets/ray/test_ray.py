"""The ray target against a real two-node Ray cluster on this machine (tests/support/ray_cluster.py):
a placement group per run, a node-shell actor on each bundle's node running the node agent
(shared by the runs that follow, or the run's own), torchrun across both Ray nodes. Both nodes share this machine's process table, so ``leftover(run.id)``
(the conftest check) sees the ranks and the Ray workers of both.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest
from conftest import HOSTILE, leftover, live_state, wait_for
from support.hf_trainer import check_trainer_resumed, hf_code
from support.jt_cli import cli
from support.ray_cluster import CONNECT_TIMEOUT
from support.sessions import check_a_session_on
from support.workloads import DDP_LINEAR, SLEEPER

from jupyter_trainer.api import runs as api
from jupyter_trainer.core.errors import TargetError
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.targets.registry import add_target


def test_two_node_ddp_from_the_cli_streams_live_and_brings_outputs_back(rc, home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import time\nsteps, pause = 20, 0.2\n" + DDP_LINEAR)
    done = cli(
        "submit", str(script), "--target", "rc", "--nodes", "2", "--procs", "2", "--name", "ray-ddp"
    )
    assert done.returncode == 0, done.stderr
    run = api.get_run(done.stdout.strip().splitlines()[0])
    live = live_state(run, 4, timeout=240)
    assert live["status"] == "running"
    run.wait(timeout=240)
    state = run.state
    assert state["status"] == "completed", state.get("error")
    nodes = state["launcher"]["nodes"]
    assert len({n["host"] for n in nodes}) == 2 and all(n["launcher"] for n in nodes)
    ray_nodes = state["launcher"]["ray_nodes"]
    assert len(set(ray_nodes.values())) == 2  # STRICT_SPREAD: one bundle per Ray node
    placed = []  # c10d rendezvous orders the nodes by arrival, not by --node-rank
    for rank in range(4):
        words = run.logs(rank).split(f"rank {rank} of 4 node ", 1)[1].split(" var ")[0].split()
        assert words[1:5] == ["sum", "10.0", "learned", "True"] and words[5] == "dir", words
        placed.append((words[0], words[6]))
        assert f" var {HOSTILE}\n" in run.logs(rank)
        assert [s for s, _ in run.metrics(rank)["loss"]] == list(range(20))
    assert sorted(placed) == sorted([(n["host"], n["run_dir"]) for n in nodes] * 2)
    # Each Ray node works in its own folder, though both share this filesystem.
    assert {n["run_dir"] for n in nodes} == {
        str(tmp_path / "nodes" / ray_nodes[n["host"]] / "runs" / run.id) for n in nodes
    }
    assert {p.name for p in run.outputs.iterdir()} == {
        "model.pt",
        *(f"from-rank-{r}.txt" for r in range(4)),
    }
    teardown = state["teardown"]
    assert teardown["leftovers"] == [] and leftover(run.id) == []
    # Nothing written outside the run store and the nodes' folders; scratch gone on success.
    assert {p.name for p in tmp_path.iterdir()} == {"train.py", "nodes", "jt-home"}
    for node_id in ray_nodes.values():
        folder = tmp_path / "nodes" / node_id
        assert {p.name for p in folder.iterdir()} <= {"bin", "runs", "snapshots", "envs"}
        assert not (folder / "runs" / run.id / "work").exists()
    assert teardown["ray"]["placement_group_removed"] == state["launcher"]["placement_group"]
    shown = cli("show", run.id)
    assert shown.returncode == 0 and "completed" in shown.stdout


def test_a_notebook_cell_with_an_environment_runs_on_both_ray_nodes(rc, home, ip, tmp_path):
    assert ip.run_cell(
        "%%environment raynodes\ninherit: true\npip:\n  - tomli==2.0.1\n"
        'env:\n  ENV_MARK: "from the environment"\n',
        store_history=True,
    ).success
    ip.run_cell("steps = 3", store_history=True)
    result = ip.run_cell(
        "%%train --target rc --nodes 2 --procs 1 --env raynodes --name ray-cell\n"
        "import os, sys, tomli, torch, torch.distributed as dist\n"
        "from jupyter_trainer import runtime as jt\n"
        "dist.init_process_group()\n"
        "t = torch.ones(1)\n"
        "dist.all_reduce(t)\n"
        "for step in range(steps):\n"
        "    jt.log(step=step, world=t.item())\n"
        "print('tomli', tomli.__version__, 'mark', os.environ['ENV_MARK'], 'python',\n"
        "      sys.executable, flush=True)\n"
        "dist.destroy_process_group()\n",
        store_history=True,
    )
    assert result.success, result.error_in_exec
    run = result.result
    assert run.status == "completed", run.state.get("error")
    for rank in (0, 1):
        assert [v for _, v in run.metrics(rank)["world"]] == [2.0] * 3
        log = run.logs(rank)
        assert "tomli 2.0.1 mark from the environment" in log
        assert log.split("python ", 1)[1].split()[0].startswith(str(tmp_path / "nodes"))
    env = run.state["environment"]
    assert env["name"] == "raynodes" and len(env["nodes"]) == 2
    assert leftover(run.id) == []


def test_cancel_mid_run_leaves_no_rank_and_no_ray_worker(rc, home, tmp_path):
    add_target(
        "own",
        "ray",
        home=home,
        address=rc.address,
        connect_timeout=CONNECT_TIMEOUT,
        workdir=str(tmp_path / "own"),
        env={"GLOO_SOCKET_IFNAME": "lo"},
        shell_persist=0,
    )  # actors of the run's own
    run = api.submit(SLEEPER, target="own", nodes=2, procs=2, name="ray-cancel")
    wait_for(
        lambda: all(run.store.read_events(run.id, r)[0] for r in range(4)),
        timeout=240,
        what="all four ranks to log",
    )
    alive = leftover(run.id)
    assert run.status == "running" and len(alive) >= 6, alive  # 4 ranks, 2 torchruns
    actors = wait_for(
        lambda: run.state.get("launcher", {}).get("actor_pids"),
        timeout=30,
        what="the actors' pids in the run's state",
    )
    assert len(actors) == 2
    assert all("ray::NodeActor" in procs.describe(pid) for pid in actors.values()), actors
    run.cancel(timeout=90)
    state = run.state
    assert state["status"] == "canceled"
    assert state["teardown"]["leftovers"] == [] and leftover(run.id) == []
    assert not [pid for pid in actors.values() if "ray::NodeActor" in procs.describe(pid)]
    assert sorted(state["rank_exit_codes"]) == ["0", "1", "2", "3"]


def test_node_shells_are_shared_by_runs_and_end_when_idle(rc, home, tmp_path):
    add_target(
        "brief",
        "ray",
        home=home,
        address=rc.address,
        connect_timeout=CONNECT_TIMEOUT,
        workdir=str(tmp_path / "brief"),
        env={"GLOO_SOCKET_IFNAME": "lo"},
        shell_persist=20,  # the next run comes within it, on a loaded machine too
    )
    code = "from jupyter_trainer import runtime as jt\nprint('rank', jt.rank, flush=True)\n"
    first = api.submit(code, target="brief", nodes=2, procs=1).wait(timeout=240)
    shells = first.state["launcher"]["actor_pids"]
    assert len(set(shells.values())) == 2
    assert all("ray::NodeActor" in procs.describe(pid) for pid in shells.values())
    assert first.state["teardown"]["ray"]["shells_kept_s"] == 20 and leftover(first.id) == []
    second = api.submit(code, target="brief", nodes=2, procs=1).wait(timeout=240)
    assert second.state["launcher"]["actor_pids"] == shells  # the same processes, reused
    assert [second.logs(r) for r in (0, 1)] == ["rank 0\n", "rank 1\n"]
    wait_for(
        lambda: not [p for p in shells.values() if "ray::NodeActor" in procs.describe(p)],
        timeout=20 + 60,
        what="the idle node shells to end themselves",
    )
    third = api.submit(code, target="brief", nodes=2, procs=1).wait(timeout=240)
    assert set(third.state["launcher"]["actor_pids"].values()).isdisjoint(shells.values())
    assert third.logs(1) == "rank 1\n"


def test_more_nodes_than_the_cluster_has_stays_queued_with_rays_reason(rc, home):
    add_target(
        "grows",
        "ray",
        home=home,
        address=rc.address,
        autoscaling=True,
        connect_timeout=CONNECT_TIMEOUT,
    )
    run = api.submit("print('never')", target="grows", nodes=3, procs=2, name="ray-queued")
    state = wait_for(
        lambda: (s := run.state).get("queue", {}).get("reason") and s,
        timeout=120,
        what="the queue reason",
    )
    assert state["status"] == "queued"
    reason = state["queue"]["reason"]
    assert "3 node(s) x 2 CPU (STRICT_SPREAD)" in reason and "2 alive node(s)" in reason, reason
    assert reason.endswith("; missing: 1 more node(s) with 2 CPU (the largest node has 2 CPU)")
    missing = state["queue"]["missing"]
    assert (missing["nodes"], missing["bundle"]) == (1, {"CPU": 2.0}), missing
    assert state["queue"]["state"] == "PENDING" and state["queue"]["scheduling_state"]
    shown = cli("show", run.id)
    assert "queued" in shown.stdout
    on_disk = json.loads((run.store.existing(run.id).root / "state.json").read_text())
    assert on_disk["queue"]["reason"] == reason
    run.cancel(timeout=60)
    state = run.state
    assert state["status"] == "canceled" and state["teardown"]["leftovers"] == []
    assert state["teardown"]["ray"] == {
        "actors_killed": 0,
        "placement_group_removed": state["queue"]["placement_group"],
    }
    assert leftover(run.id) == []


def test_a_run_waiting_for_busy_nodes_says_that_other_work_holds_them(rc, home):
    add_target(
        "busy",
        "ray",
        home=home,
        address=rc.address,
        autoscaling=True,
        connect_timeout=CONNECT_TIMEOUT,
    )
    holder = api.submit("import time; time.sleep(120)", target="busy", nodes=2, procs=2)
    waiter = None
    try:
        wait_for(lambda: holder.status == "running", timeout=120, what="the first run to start")
        waiter = api.submit("print('later')", target="busy", nodes=1, procs=2)
        state = wait_for(
            lambda: (s := waiter.state).get("queue", {}).get("missing") and s,
            timeout=120,
            what="the queue reason",
        )
        assert state["status"] == "queued"
        assert state["queue"]["missing"]["nodes"] == 0
        assert state["queue"]["missing"]["busy"] == {"CPU": 0.0}
        assert state["queue"]["reason"].endswith(
            "; its nodes are large enough, but other work holds their resources (free now, "
            "across the cluster: 0 CPU)"
        ), state["queue"]["reason"]
    finally:
        for run in (waiter, holder):
            if run is not None and run.status not in ("completed", "failed", "canceled"):
                run.cancel(timeout=60)


def test_errors_before_launch(rc, home):
    add_target("nowhere", "ray", home=home, address=f"127.0.0.1:{procs.free_port()}")
    with pytest.raises(TargetError, match=r"unreachable .*start it \(ray start --head\)"):
        api.submit("print(1)", target="nowhere", nodes=1, procs=1)
    with pytest.raises(
        TargetError,
        match=r"too small: the run needs 3 node\(s\) with 2 CPU\(s\), "
        r"it has 2 alive node\(s\)",
    ):
        api.submit("print(1)", target="rc", nodes=3, procs=2)
    with pytest.raises(TargetError, match="too small: the run needs 1 node"):
        api.submit("print(1)", target="rc", nodes=1, procs=3)
    with pytest.raises(TargetError, match="use --launcher torchrun"):
        api.submit("print(1)", target="rc", nodes=2, procs=1, launcher="mpirun")
    with pytest.raises(TargetError, match="address must be auto, ray://HOST:PORT or HOST:PORT"):
        add_target("bad", "ray", home=home, address="http://127.0.0.1:8265")
    with pytest.raises(TargetError, match=r"unknown key\(s\) \['hosts'\]; a ray target takes"):
        add_target("bad", "ray", home=home, address="auto", hosts=["a"])
    with pytest.raises(TargetError, match="autoscaling must be true or false"):
        add_target("bad", "ray", home=home, address="auto", autoscaling="yes")
    with pytest.raises(TargetError, match=r"shell_persist must be a number of seconds"):
        add_target("bad", "ray", home=home, address="auto", shell_persist=-1)
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    done = cli(
        "target",
        "add",
        "viacli",
        "--kind",
        "ray",
        f"address={rc.address}",
        "runtime_env={env_vars={NCCL_DEBUG=INFO}}",
    )
    assert done.returncode == 0, done.stderr
    assert 'address = "127.0.0.1:' in (home / "targets.toml").read_text()


def test_data_reaches_both_ray_nodes_through_their_shells(rc, home, tmp_path):
    """Ray gives no ssh for rsync: each node's copy is made from a tar through its node
    shell, once; the next run finds it in the node's cache."""
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "labels.txt").write_text("cat\ndog\n")
    code = (
        "from jupyter_trainer import runtime as jt\n"
        "print('labels', jt.rank, (jt.data['d'] / 'labels.txt').read_text().split(),"
        " jt.data['d'], flush=True)\n"
    )
    runs = [
        api.submit(code, target="rc", nodes=2, procs=1, data={"d": str(data)}).wait(timeout=240)
        for _ in range(2)
    ]
    digest = runs[0].spec.data[0].hash
    for run in runs:
        for rank in (0, 1):
            line = next(x for x in run.logs(rank).splitlines() if x.startswith("labels"))
            assert line.startswith(f"labels {rank} ['cat', 'dog'] {tmp_path / 'nodes'}")
            assert line.endswith(f"/data/{digest}/dataset")
    first = runs[0].state["launcher"]["staging"]["data"]["d"]
    assert len(first) == 2 and {r["tool"] for r in first.values()} == {"tar"}
    second = runs[1].state["launcher"]["staging"]["data"]["d"]
    assert {r["state"] for r in second.values()} == {"cached"}


# Cancel request -> run canceled, from the middle of its preparation: the step under way (a
# pre-flight per node), then the end-of-run check per node; 0.2-0.9 s measured on 2 busy cores.
PREPARED_CANCEL_S = 10.0


@contextlib.contextmanager
def every_core_busy():
    """A busy loop per core (``stress --cpu N``), started and ended here."""
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def test_a_cancel_while_a_run_is_prepared_under_load_starts_no_rank(rc, home):
    """Preparing a Ray run (node shells, each node's pre-flight, staging, the launchers'
    start) takes seconds, more on a loaded machine. A cancel that comes meanwhile ends the run
    there: no launcher or rank of it ever starts (they used to be launched all the same and
    stopped only once watched, seconds after the cancel). The cores are loaded once the
    submit has returned: its check of the cluster (a Ray driver in a child process) is not what
    this test is about, and with a second suite on the machine it could take over its 60 s."""
    run = api.submit(SLEEPER, target="rc", nodes=2, procs=1, name="ray-prepared")
    with every_core_busy():
        log = home / "runs" / run.id / "logs" / "launcher.log"
        wait_for(
            lambda: log.exists() and "Ray node shell(s) up" in log.read_text(),
            timeout=240,
            interval=0.01,
            what="the node shells, before each node's pre-flight",
        )
        asked = time.monotonic()
        run.cancel(wait=False)
        started: set[str] = set()
        while (
            run.status not in ("canceled", "failed", "completed", "lost")
            and time.monotonic() - asked < 240
        ):
            started.update(procs.describe(p) for p in procs.pids_with_env("JT_RUN_ID", run.id))
            time.sleep(0.02)
        took = time.monotonic() - asked
    assert run.status == "canceled", run.state.get("error")
    assert not started, started
    assert took < PREPARED_CANCEL_S, took
    assert "nodes" not in run.state["launcher"]  # no launcher was started on any node
    assert run.state["teardown"]["leftovers"] == [] and leftover(run.id) == []


def test_resume_on_ray_starts_a_trainer_from_its_checkpoint(rc, home):
    """A transformers Trainer's checkpoint folder, written on a Ray node, comes back with the
    run and is sent to node 0 of the resumed run, where the Trainer resumes from it."""

    params = {"max_steps": 4, "export": False}
    old = api.submit(hf_code(), target="rc", nodes=1, procs=1, params=params, name="ray-hf")
    old.wait(timeout=300)
    assert (old.path / "checkpoints" / "out" / "checkpoint-4" / "trainer_state.json").is_file()
    new = api.resume(old.id, params={"max_steps": 8}).wait(timeout=300)
    check_trainer_resumed(old, new)


def test_a_live_session_on_both_ray_nodes(rc, home, capsys):
    """A session's ranks on the two Ray nodes, its requests sent through their shells."""
    check_a_session_on("rc", nodes=2, procs=1, capsys=capsys)
