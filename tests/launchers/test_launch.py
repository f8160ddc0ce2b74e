"""Generated launcher commands, compared line by line with committed golden files.

Paths and values are deliberately hostile (quotes, spaces, newlines, shell syntax): argv
lists must carry them unchanged. Regenerate with JT_UPDATE_GOLDEN=1 after a deliberate change.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from support import GOLDEN

from jupyter_trainer.core.errors import LaunchError, SpecError
from jupyter_trainer.core.spec import LAUNCHERS as SPEC_LAUNCHERS
from jupyter_trainer.core.spec import LaunchSpec
from jupyter_trainer.launchers.table import (
    LAUNCHERS,
    LaunchPlan,
    Topology,
    build_command,
    launcher,
    render,
    shell_text,
)

HOSTILE_DIR = "/tmp/we ird/'quote\"s'/$(touch pwned)/new\nline"

PLAN = LaunchPlan(
    run_id="digits-20261122-101500-abc123",
    run_dir=f"{HOSTILE_DIR}/runs/digits-20261122-101500-abc123",
    python=f"{HOSTILE_DIR}/venv/bin/python",
    boot=f"{HOSTILE_DIR}/runs/digits-20261122-101500-abc123/code/_jt/boot.py",
    entry="_jt/cell.py",
    args=("--lr", "'; rm -rf ~'", "$HOME", "a b"),
    backend="gloo",
    master_addr="127.0.0.1",
    master_port=29555,
    run_as_root=True,
    oversubscribe=True,
    extra_env={"NCCL_SOCKET_IFNAME": "eth0", "WEIRD": 'x\'; echo $PATH "y"'},
)

CASES = {
    "torchrun_2procs": (LaunchSpec("torchrun", procs=2), PLAN),
    "torchrun_forced_nccl": (
        LaunchSpec("torchrun", procs=4, backend="nccl"),
        LaunchPlan(**{**PLAN.__dict__, "backend": "nccl", "backend_forced": True}),
    ),
    "mpirun_2procs": (LaunchSpec("mpirun", procs=2), PLAN),
    "horovod_gloo": (LaunchSpec("horovod", procs=2), PLAN),
    "horovod_mpi": (
        LaunchSpec("horovod", procs=2, backend="mpi"),
        LaunchPlan(**{**PLAN.__dict__, "backend": "mpi", "backend_forced": True}),
    ),
    "python_single": (LaunchSpec("python"), PLAN),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_command_matches_golden(case):
    launch, plan = CASES[case]
    text = render(build_command(launch, plan))
    golden = GOLDEN / f"{case}.txt"
    if os.environ.get("JT_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text.splitlines() == golden.read_text().splitlines()


@pytest.mark.parametrize("case", sorted(CASES))
def test_hostile_values_arrive_unchanged(case):
    launch, plan = CASES[case]
    cmd = build_command(launch, plan)
    assert plan.python in cmd.argv and plan.boot in cmd.argv
    tail = list(cmd.argv[-len(plan.args) - 1 :])
    assert tail == [plan.entry, *plan.args]
    assert cmd.env["WEIRD"] == 'x\'; echo $PATH "y"'
    assert cmd.env["JT_RUN_DIR"] == plan.run_dir


def test_mpirun_exports_every_rank_variable():
    cmd = build_command(LaunchSpec("mpirun", procs=2), PLAN)
    exported = {cmd.argv[i + 1] for i, a in enumerate(cmd.argv) if a == "-x"}
    assert exported == set(cmd.env) | set(cmd.env_defaults)
    assert {"MASTER_ADDR", "MASTER_PORT", "JT_RUN_ID"} <= exported


def test_environment_defaults_do_not_override_the_users():
    cmd = build_command(LaunchSpec("torchrun", procs=2), PLAN)
    assert cmd.environ({"PATH": "/bin"})["OMP_NUM_THREADS"] == "1"
    assert cmd.environ({"OMP_NUM_THREADS": "4"})["OMP_NUM_THREADS"] == "4"
    base = {"JT_RUN_ID": "stale"}
    assert cmd.environ(base)["JT_RUN_ID"] == PLAN.run_id and base == {"JT_RUN_ID": "stale"}


def test_multi_node_needs_a_multi_node_target():
    with pytest.raises(LaunchError, match="multi-node target"):
        build_command(LaunchSpec("torchrun", nodes=2, procs=2), PLAN)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"launcher": "deepspeed"}, "unknown launcher 'deepspeed'; choose one of torchrun"),
        ({"procs": 0}, "--procs must be a whole number"),
        ({"nodes": "2"}, "--nodes must be a whole number"),
        ({"backend": "ucc"}, "unknown backend 'ucc'"),
        ({"launcher": "python", "procs": 2}, "--launcher python runs exactly one process"),
    ],
)
def test_bad_launch_specs_are_refused(kwargs, match):
    with pytest.raises(SpecError, match=match):
        LaunchSpec(**kwargs)


def test_every_launcher_a_spec_accepts_has_one_table_entry():
    assert set(LAUNCHERS) == set(SPEC_LAUNCHERS)
    assert {e.placement for e in LAUNCHERS.values()} <= {"every_node", "first_node", "one_rank"}
    with pytest.raises(LaunchError, match="unknown launcher 'srun'; choose one of torchrun"):
        launcher("srun")


def test_a_topology_with_several_hosts_reaches_them_from_one_launcher():
    launch = LaunchSpec("mpirun", nodes=2, procs=3)
    cmd = launcher("mpirun").command(launch, PLAN, Topology(hosts=("10.0.0.1", "fe80::1")), {})
    assert cmd.argv[cmd.argv.index("-H") + 1] == "10.0.0.1:3,[fe80::1]:3"
    one = launcher("mpirun").command(
        LaunchSpec("mpirun", procs=3), PLAN, Topology(hosts=("10.0.0.1",)), {}
    )
    assert "-H" not in one.argv  # one node: the ranks start where mpirun runs
    hvd = launcher("horovod").command(
        launch, PLAN, Topology(hostfile="/r/h f", launcher_cache=False), {}
    )
    assert hvd.argv[hvd.argv.index("--hostfile") + 1] == "/r/h f"
    assert "--disable-cache" in hvd.argv


@pytest.mark.parametrize("case", sorted(CASES))
def test_shell_text_gives_bash_the_exact_argv_and_environment(case, tmp_path):
    """What --dry-run prints: bash, running it, starts exactly this argv with these variables
    (the defaults only where unset); a golden file holds one case's text."""
    launch, plan = CASES[case]
    cmd = build_command(launch, plan)
    text = shell_text(cmd, cwd=str(tmp_path))
    assert text.startswith(f"cd {shlex.quote(str(tmp_path))}\n")
    assert text.endswith(shlex.join(cmd.argv) + "\n")  # values with newlines span lines
    printer = [
        sys.executable,
        "-c",
        "import json, os, sys; print(json.dumps([dict(os.environ), sys.argv[1:]]))",
    ]
    probe = text[: text.rindex(shlex.join(cmd.argv))] + shlex.join([*printer, *cmd.argv])
    env = {"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "7"}
    out = subprocess.run(
        ["bash", "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    got_env, got_argv = json.loads(out)
    assert got_argv == list(cmd.argv)
    assert {k: got_env.get(k) for k in cmd.env} == dict(cmd.env)
    assert all(got_env[k] == "7" for k in cmd.env_defaults)  # the user's value kept
    if case == "torchrun_2procs":
        golden = GOLDEN / "torchrun_2procs_shell.txt"
        text = text.replace(str(tmp_path), "/RUN/FOLDER")
        if os.environ.get("JT_UPDATE_GOLDEN"):
            golden.write_text(text)
        assert text.splitlines() == golden.read_text().splitlines()


@pytest.mark.slow
@pytest.mark.parametrize("hot", [True, False], ids=["warm-pool", "torchrun"])
def test_a_torchrun_run_leaves_no_folder_in_the_temp_dir(home, tmp_path, monkeypatch, hot):
    """torchrun keeps its per-attempt folders in the run's scratch, which goes with the run's
    working directories when it ends well: nothing is left in the temp dir per run."""
    from jupyter_trainer.api import runs as api

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))  # the run's processes inherit it
    run = api.submit(
        "print('hi')\n", launcher="torchrun", procs=2, name="tmpclean", hot=hot, wait=True
    )
    assert run.status == "completed"
    assert bool(run.state["launcher"].get("hot", {}).get("used")) == hot
    assert sorted(p.name for p in tmp.glob("torchelastic_*")) == []
    assert not (run.store.paths(run.id).root / "work").exists()


BARRIER_CELL = """
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
seen = []
original = c10d._store_based_barrier
def counted(*args, **kwargs):
    seen.append(1)
    return original(*args, **kwargs)
c10d._store_based_barrier = counted
dist.init_process_group("gloo")
if not seen:  # the run chose no barrier in init: its own collective keeps either rank from
    dist.barrier()  # ending before the other has made the group
dist.destroy_process_group()
print("barrier" if seen else "no-barrier")
"""


@pytest.mark.slow
@pytest.mark.parametrize("hot", [True, False], ids=["warm-pool", "torchrun"])
def test_init_process_group_returns_once_every_rank_has_joined(home, monkeypatch, hot):
    """A rank that inits and ends at once must not close its connections while a slower peer
    is still making the group (Gloo: "Connection closed by peer" on the peer): every rank's
    ``init_process_group`` waits at torch's store barrier, unless the run's environment says
    otherwise."""
    from jupyter_trainer.api import runs as api

    run = api.submit(BARRIER_CELL, launcher="torchrun", procs=2, name="joined", hot=hot, wait=True)
    assert run.status == "completed", run.state.get("error")
    assert [run.logs(r).split() for r in (0, 1)] == [["barrier"], ["barrier"]]

    monkeypatch.setenv("TORCH_DIST_INIT_BARRIER", "0")
    run = api.submit(BARRIER_CELL, launcher="torchrun", procs=2, name="own", hot=hot, wait=True)
    assert run.status == "completed", run.state.get("error")
    assert [run.logs(r).split() for r in (0, 1)] == [["no-barrier"], ["no-barrier"]]


LATE_STORE_CELL = """
import time
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
store = c10d._get_default_store()
dist.destroy_process_group()
if jt.rank == 1:
    time.sleep(1.5)  # rank 0's code has ended by now
    store.add("late", 1)  # as torch's own barrier does when this rank is descheduled
print("left", jt.rank)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("launcher", "hot"), [("mpirun", False), ("torchrun", True)], ids=["mpirun", "warm-pool"]
)
def test_rank_0_keeps_the_rendezvous_store_until_every_rank_has_left(home, launcher, hot):
    """Without torchrun's agent, rank 0's process hosts the rendezvous store: a rank 0 that
    ends first must not take it away from a peer that still has a store call to make
    ("Broken pipe" on the peer, 0.09 s after rank 0 ended, under load)."""
    from jupyter_trainer.api import runs as api

    run = api.submit(LATE_STORE_CELL, launcher=launcher, procs=2, hot=hot, wait=False)
    run.wait(timeout=120)
    assert run.status == "completed", run.state.get("error")
    assert [run.logs(r).split() for r in (0, 1)] == [["left", "0"], ["left", "1"]]


EXIT_CELL = """
import os
import torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
dist.barrier()
dist.destroy_process_group()
print("done", jt.rank, flush=True)
if jt.rank == 1:
    import posix
    posix._exit(0)  # past the os._exit that records a rank's end: it never says it left
"""


@pytest.mark.slow
def test_rank_0_does_not_keep_the_store_for_a_peer_whose_process_has_ended(home):
    from jupyter_trainer.api import runs as api
    from jupyter_trainer.rankside.rank.launcher_env import LEAVE_WITHIN

    run = api.submit(EXIT_CELL, launcher="mpirun", procs=2, wait=False)
    run.wait(timeout=120)
    assert run.status == "completed", run.state.get("error")  # mpirun saw both end with 0
    ranks = [json.loads((run.path / "ranks" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["exited"] - ranks[1]["exited"] < LEAVE_WITHIN / 3, ranks


EARLY_EXIT_CELL = """
import os, time
from jupyter_trainer import runtime as jt
if jt.rank == 1:
    print("leaving", flush=True)
    os._exit({code})  # as scripts do to skip a backend's slow teardown
time.sleep(4)  # well past the time a launcher gets to stop its ranks after one fails
print("still here", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("hot", [False, True], ids=["torchrun", "warm-pool"])
def test_a_rank_that_ends_with_os_exit_0_before_the_others_is_a_good_end(home, hot):
    from jupyter_trainer.api import runs as api

    run = api.submit(EARLY_EXIT_CELL.format(code=0), procs=2, hot=hot, wait=False)
    run.wait(timeout=120)
    assert run.status == "completed", run.state.get("error")
    assert [run.logs(r).split() for r in (0, 1)] == [["still", "here"], ["leaving"]]
    record = json.loads((run.path / "ranks" / "rank-1.json").read_text())
    assert record["exit_code"] == 0 and record["ended"] < record["exited"], record


@pytest.mark.slow
def test_a_rank_that_ends_with_os_exit_and_a_failing_code_is_named_with_it(home):
    from jupyter_trainer.api import runs as api

    run = api.submit(EARLY_EXIT_CELL.format(code=3), procs=2, wait=False)
    run.wait(timeout=120, raise_on_failure=False)
    assert run.status == "failed"
    assert (run.state["failed_rank"], run.state["error"]) == (1, "the code called os._exit(3)")


TERMINATED_AS_IT_ENDS_CELL = """
import atexit, os, signal
# as a launcher or the supervisor ending the run does while this rank is still exiting
atexit.register(lambda: os.kill(os.getpid(), signal.SIGTERM))
raise ValueError("loss diverged")
"""


def test_a_sigterm_while_a_failed_rank_exits_leaves_its_own_end_recorded(home):
    from jupyter_trainer.api import runs as api

    run = api.submit(TERMINATED_AS_IT_ENDS_CELL, procs=1, wait=False)
    run.wait(timeout=120, raise_on_failure=False)
    assert run.status == "failed"
    assert run.state["error"] == "ValueError: loss diverged", run.state
    record = json.loads((run.path / "ranks" / "rank-0.json").read_text())
    assert record["exit_code"] == 1 and "signal" not in record, record


def test_a_local_runs_port_is_one_no_outgoing_connection_can_take():
    """The port a local run's rank 0 binds later is drawn from below the kernel's ephemeral
    range, where no connection's local port is ever picked, and is free when drawn."""
    import socket

    from jupyter_trainer.rankside.host import procs

    low, high = procs.ephemeral_ports()
    ports = {procs.free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports), (ports, low)
    assert len(ports) > 1  # drawn, not fixed: two runs starting together do not collide
    for port in ports:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))
