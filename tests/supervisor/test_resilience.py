"""When training goes wrong, with real runs: restarts from checkpoints (torchrun's own restart,
the supervisor's for mpirun; locally and on the ssh hosts), a stalled rank named with its
live stack, and ``--stop-on-nan``."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import leftover, wait_for
from support.hf_trainer import check_trainer_resumed, hf_code
from support.ssh_hosts import ALIASES, fail_with_logs
from support.workloads import RESUMABLE

from jupyter_trainer.api import runs as api
from jupyter_trainer.api.stacks import run_stacks
from jupyter_trainer.core.errors import RunFailed, SpecError
from jupyter_trainer.frontends.views.feed import RunFeed
from jupyter_trainer.frontends.views.feeder import ViewFeeder
from jupyter_trainer.rankside.rank import rank_files
from jupyter_trainer.targets.registry import add_target

# Every step adds the world size to w; a checkpoint every 5 steps; rank 1 fails at step 12 of
# the first attempt. Resumed from step 9, the run ends with w = 2 * 16 all the same.
RESTARTING = """
import torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")
ckpt = jt.load_checkpoint()
first = ckpt.step + 1 if ckpt else 0
w = ckpt.state["w"] if ckpt else torch.zeros(1)
for step in range(first, 16):
    t = torch.ones(1)
    dist.all_reduce(t)
    w += t
    jt.log(step=step, w=w.item(), attempt=jt.attempt, resumed_at=first)
    jt.progress(step + 1, 16)
    if step % 5 == 4:
        jt.save_checkpoint({"w": w}, step)
    if jt.attempt == 0 and step == 12 and jt.rank == 1:
        raise RuntimeError("boom on attempt 0")
"""


def check_restarted(run: api.Run, world: int) -> None:
    state = run.state
    assert state["status"] == "completed", state.get("error")
    first, second = state["attempts"]
    assert (first["attempt"], first["failed_rank"]) == (0, 1)
    assert "boom on attempt 0" in first["error"]
    assert first["start"] < first["end"] <= second["start"] < second["end"]
    assert (second["attempt"], second["failed_rank"], second["error"]) == (1, None, None)
    metrics = run.metrics(0)
    # Attempt 1 went back to step 10 (the checkpoint of step 9): from there on its values
    # supersede attempt 0's, so each step is there once, of the attempt that stands.
    assert [step for step, _ in metrics["w"]] == list(range(16))
    assert [a for _, a in metrics["attempt"]] == [0] * 10 + [1] * 6
    assert [v for _, v in metrics["resumed_at"]] == [0] * 10 + [10] * 6
    assert metrics["w"][-1] == (15, float(world * 16))
    assert [step for step, _ in run.metrics(None)["w"]] == list(range(16))
    every = run.metrics(0, all_attempts=True)
    assert all(attempt == value for _, value, attempt in every["attempt"])  # each its own
    assert {(10, 0), (11, 0), (10, 1), (15, 1)} <= {(s, a) for s, _, a in every["attempt"]}
    failed = run.metrics(1, all_attempts=True)["attempt"]  # rank 1's last step before it raised
    assert (12, 0, 0) in failed and (11, 0, 0) not in run.metrics(1)["attempt"]
    feed = RunFeed(run)
    feed.poll(None)
    for x, agg in (("step", "ranks"), ("time", "ranks"), ("step", "mean")):
        chart = feed.chart_payload({"x": x, "agg": agg, "selected": ["w"]})["charts"]["w"]
        for series in chart["series"]:
            xs = np.frombuffer(series["x"], dtype="<f8")
            assert series["attempts"] == [[0, 0], [10, 1]] and np.all(np.diff(xs) > 0), x
    # The rate is that of attempt 1's steps, not over the restart's gap from attempt 0's.
    progress = feed.progress_payload()
    assert (progress["done"], progress["attempt"], progress["eta"]) == (16, 1, None)
    first, last = run.store.iter_events(run.id, 0), state["attempts"][1]["end"]
    start = next(e["t"] for e in first if e.get("kind") == "progress")
    assert progress["rate"] > 3 * 16 / (last - start)
    assert sorted(p.name for p in run.store.existing(run.id).checkpoints.iterdir()) == [
        "step-14.pt",
        "step-4.pt",
        "step-9.pt",
    ]


@pytest.mark.parametrize("launcher", ["torchrun", "mpirun", "horovod"])
def test_a_crash_restarts_every_rank_from_the_last_checkpoint(home, launcher):
    run = api.submit(RESTARTING, procs=2, launcher=launcher, max_restarts=2, name="restart")
    run.wait(timeout=120, raise_on_failure=False)
    check_restarted(run, 2)
    assert leftover(run.id) == []


def test_restarts_used_up_fail_the_run_with_each_attempt_recorded(home):
    code = (
        "from jupyter_trainer import runtime as jt\n"
        "jt.log(step=jt.attempt, attempt=jt.attempt)\n"
        "raise SystemExit(f'attempt {jt.attempt} failed')\n"
    )
    run = api.submit(code, launcher="mpirun", max_restarts=1, name="exhausted")
    with pytest.raises(RunFailed):
        run.wait(timeout=60)
    attempts = run.state["attempts"]
    assert [a["attempt"] for a in attempts] == [0, 1]
    assert all(a["failed_rank"] == 0 and a["end"] for a in attempts)
    assert run.state["failed_rank"] == 0 and "attempt 1 failed" in run.logs(0)
    assert [v for _, v in run.metrics(0)["attempt"]] == [0, 1]


def test_restarts_on_the_ssh_hosts(pair, home):
    run = api.submit(
        RESTARTING, target="pair", nodes=2, procs=1, max_restarts=2, name="ssh-restart"
    )
    try:
        run.wait(timeout=180)
    except RunFailed:
        fail_with_logs(run, 2)
    check_restarted(run, 2)


def test_supervisor_restarts_mpirun_across_the_ssh_hosts(mpi_pair, home):
    run = api.submit(
        RESTARTING,
        target="pair",
        nodes=2,
        procs=1,
        launcher="mpirun",
        max_restarts=2,
        name="ssh-mpi-restart",
    )
    try:
        run.wait(timeout=180)
    except RunFailed:
        fail_with_logs(run, 2)
    check_restarted(run, 2)


# Rank 1 sleeps in a function of its own at step 40 while rank 0 waits for it in all_reduce.
STALLING = """
import time, torch, torch.distributed as dist
from jupyter_trainer import runtime as jt
dist.init_process_group("gloo")

def wait_for_a_lost_batch():
    time.sleep(600)

for step in range(10_000):
    if jt.rank == 1 and step == 40:
        wait_for_a_lost_batch()
    t = torch.ones(1)
    dist.all_reduce(t)
    jt.log(step=step, loss=1.0 / (step + 1))
    jt.progress(step + 1, 10_000)
    time.sleep(0.02)
"""


def test_a_stalled_rank_is_named_with_its_stack(home):
    run = api.submit(STALLING, procs=2, stall_timeout=10, name="stall")
    feed = RunFeed(run)  # as the widget follows it: the rate while it runs, then none
    updates: list[dict] = []
    feeder = ViewFeeder(run, updates.append)
    feeder.start()
    try:
        wait_for(
            lambda: run.status == "running" and run.metrics(1).get("loss"),
            timeout=60,
            what="rank 1's first steps",
        )
        began = time.time()
        rates = []
        while not run.state.get("stalled") and time.time() - began < 30:
            feed.poll()
            rates.append(feed.progress_payload().get("rate"))
            time.sleep(0.1)
        state = run.state
        assert state.get("stalled"), "no stalled rank in the state"
        [stalled] = state["stalled"]
        assert (stalled["rank"], stalled["last_step"], stalled["waiting"]) == (1, 40, False)
        assert 10 <= stalled["seconds"] < 10 + (time.time() - began) + 5
        assert "wait_for_a_lost_batch" in stalled["stack"]
        feed.poll()
        progress = feed.progress_payload()
        assert any(rates) and (progress["done"], progress["total"]) == (40, 10_000)
        assert progress["rate"] is None and progress["eta"] is None, progress
        assert progress["stalled"] >= 10
        time.sleep(1.5)  # the view's feeder looks at the figures again each second
        [*_, shown] = [u["progress"] for u in updates if u.get("progress")]
        assert shown["rate"] is None and shown["eta"] is None and shown["stalled"] >= 10
        shown = subprocess.run(
            [str(Path(sys.executable).with_name("jupyter-trainer")), "show", run.id, "--json"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        [listed] = json.loads(shown.stdout)["stalled"]
        assert (listed["rank"], listed["last_step"]) == (1, 40) and listed["seconds"] >= 10
        figures = json.loads(shown.stdout)["progress"]
        assert (figures["done"], figures["rate"], figures["eta"]) == (40, None, None)
        assert figures["stalled"] >= 10
        shown = subprocess.run(
            [str(Path(sys.executable).with_name("jupyter-trainer")), "show", run.id],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert re.search(r"^step 40/10000 \(0%\) stalled (\d+ s|\d+:\d\d)$", shown.stdout, re.M), (
            shown.stdout
        )
        stacks = run_stacks(run.store, run.id)
        assert sorted(stacks) == [0, 1]
        assert "all_reduce" in stacks[0] and "wait_for_a_lost_batch" in stacks[1]
        cli = Path(sys.executable).with_name("jupyter-trainer")
        printed = subprocess.run(
            [str(cli), "stack", run.id], capture_output=True, text=True, timeout=60
        )
        assert printed.returncode == 0, printed.stderr
        assert printed.stdout.index("rank 0 (") < printed.stdout.index("all_reduce")
        assert printed.stdout.index("rank 1 (") < printed.stdout.index("wait_for_a_lost_batch")
        with pytest.raises(SpecError, match="no rank 7"):
            run_stacks(run.store, run.id, rank=7)
    finally:
        feeder.stop()
        feeder.join(10)
        run.cancel()
    run.wait(timeout=60, raise_on_failure=False)
    assert "stalled" not in run.state


def test_on_stall_cancel_ends_the_run_with_its_stacks(home):
    run = api.submit(STALLING, procs=2, stall_timeout=3, on_stall="cancel", name="stall-cancel")
    with pytest.raises(RunFailed, match="rank 1 stalled"):
        run.wait(timeout=90)
    state = run.state
    assert state["failed_rank"] == 1 and "--on-stall cancel" in state["error"]
    assert "wait_for_a_lost_batch" in state["stacks"]["1"]
    assert "all_reduce" in state["stacks"]["0"]
    assert state["teardown"]["leftovers"] == [] and leftover(run.id) == []


def test_stop_on_nan_fails_the_run_at_the_first_nan(home):
    code = (
        "import time\nfrom jupyter_trainer import runtime as jt\n"
        "for step in range(2000):\n"
        "    jt.log(step=step, loss=float('nan') if step >= 15 else 1 / (step + 1), acc=0.5)\n"
        "    time.sleep(0.01)\n"
    )
    run = api.submit(code, launcher="python", stop_on_nan=["loss"], name="nan")
    with pytest.raises(RunFailed, match=r"loss became nan at step 15 on rank 0"):
        run.wait(timeout=60)
    state = run.state
    assert state["non_finite"]["loss"]["step"] == 15 and "acc" not in state["non_finite"]
    assert max(step for step, _ in run.metrics(0)["loss"]) < 1500


def test_nan_without_stop_on_nan_is_recorded_and_the_run_goes_on(home):
    code = (
        "from jupyter_trainer import runtime as jt\n"
        "for step in range(30):\n"
        "    jt.log(step=step, loss=float('inf') if step == 15 else 1.0)\n"
    )
    run = api.submit(code, launcher="python", name="inf").wait(timeout=60)
    assert run.state["non_finite"] == {
        "loss": {"rank": 0, "step": 15, "value": "inf", "t": run.state["non_finite"]["loss"]["t"]}
    }


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_restarts": -1}, "--max-restarts"),
        ({"stall_timeout": -5}, "--stall-timeout"),
        ({"on_stall": "retry"}, "--on-stall"),
        ({"stop_on_nan": [""]}, "--stop-on-nan"),
    ],
)
def test_bad_resilience_options_start_nothing(home, kwargs, message):
    with pytest.raises(SpecError, match=message):
        api.submit("print(1)", **kwargs)
    assert not (home / "runs").exists() or not any(
        p for p in (home / "runs").iterdir() if not p.name.startswith(".")
    )


# -- checkpoints, file by file -------------------------------------------------------------

WRITER = """
import os, sys
sys.path.insert(0, {package!r})
from jupyter_trainer import runtime as jt
jt.save_checkpoint({{"step": 1}}, 1)
print("saved", flush=True)
jt.save_checkpoint(b"x" * (600 << 20), 2)
"""


def test_a_half_written_checkpoint_is_never_loaded(tmp_path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "JT_RUN_DIR": str(run_dir), "RANK": "0", "WORLD_SIZE": "1"}
    package = str(Path(rank_files.__file__).resolve().parents[3])
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(package=package)],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "saved"
        folder = run_dir / "checkpoints"
        wait_for(
            lambda: any(p.name.startswith(".step-2.") for p in folder.iterdir()),
            timeout=30,
            what="the second checkpoint being written",
        )
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == ["step-1.pkl"]
    found = rank_files.read_latest(str(folder), "cpu")
    assert (found.step, found.state) == (1, {"step": 1})


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    for step in (3, 10, 7, 12):
        rank_files.save_checkpoint(str(tmp_path), {"at": step}, step, keep=2)
    assert [step for step, _ in rank_files.checkpoints(str(tmp_path))] == [10, 12]
    assert rank_files.read_latest(str(tmp_path), "cpu").state == {"at": 12}
    assert rank_files.read_latest(str(tmp_path / "none"), "cpu") is None


def test_restarts_and_a_stall_on_slurm(cluster, home):
    run = api.submit(RESTARTING, target="cluster", procs=2, max_restarts=2, name="slurm-restart")
    run.wait(timeout=180, raise_on_failure=False)
    check_restarted(run, 2)
    stalling = api.submit(
        STALLING, target="cluster", procs=2, stall_timeout=5, on_stall="cancel", name="slurm-stall"
    )
    with pytest.raises(RunFailed, match="rank 1 stalled"):
        stalling.wait(timeout=180)
    assert "wait_for_a_lost_batch" in stalling.state["stacks"]["1"]


def test_a_stall_on_the_ssh_hosts_is_named_with_stacks_read_over_ssh(pair, home):
    run = api.submit(STALLING, target="pair", nodes=2, procs=1, stall_timeout=5, name="ssh-stall")
    try:
        state = wait_for(
            lambda: run.state.get("stalled") and run.state,
            timeout=90,
            what="a stalled rank in the state",
        )
        assert [e["rank"] for e in state["stalled"]] == [1], state["stalled"]
        assert "wait_for_a_lost_batch" in state["stalled"][0]["stack"]
        stacks = run_stacks(run.store, run.id)
        assert "all_reduce" in stacks[0] and "wait_for_a_lost_batch" in stacks[1]
    finally:
        run.cancel()
    run.wait(timeout=60, raise_on_failure=False)
    assert leftover(run.id) == []


def test_a_run_resumes_on_the_ssh_hosts_from_the_checkpoint_it_brought_back(pair, home, tmp_path):
    add_target(
        "apart",
        "ssh",
        home=home,
        hosts=[
            {"host": alias, "workdir": str(tmp_path / f"node-{i}")}
            for i, alias in enumerate(ALIASES)
        ],
        env={"GLOO_SOCKET_IFNAME": "lo"},
        connect_timeout=5,
    )  # no folder in common
    first = api.submit(RESUMABLE, target="apart", nodes=2, procs=1, name="ssh-first")
    first.wait(timeout=120)
    assert [p.name for p in first.store.existing(first.id).checkpoints.iterdir()] == ["step-2.pt"]
    again = api.resume(first.id)
    again.wait(timeout=120)
    for rank in (0, 1):  # rank 1's node never had the file: rank 0 broadcast it
        assert again.metrics(rank)["first"] == [(3, 3.0), (4, 3.0), (5, 3.0)]
    assert again.spec.lineage == {"resumed_from": first.id, "checkpoint": "step-2.pt"}


def test_the_supervisor_restarts_mpirun_on_slurm(cluster, home):
    run = api.submit(
        RESTARTING,
        target="cluster",
        procs=2,
        launcher="mpirun",
        max_restarts=2,
        name="slurm-mpi-restart",
    )
    run.wait(timeout=180, raise_on_failure=False)
    check_restarted(run, 2)


def test_a_run_resumes_on_slurm_with_a_workdir_apart_from_the_store(cluster, home, tmp_path):
    (home / "targets.toml").write_text(
        f'[targets.apart]\nkind = "slurm"\npartition = "debug"\ntime = "10:00"\n'
        f'workdir = "{tmp_path / "cluster-fs"}"\n'
    )
    first = api.submit(RESUMABLE, target="apart", procs=2, name="slurm-first").wait(timeout=120)
    assert [p.name for p in first.store.existing(first.id).checkpoints.iterdir()] == ["step-2.pt"]
    again = api.resume(first.id).wait(timeout=120)
    assert again.metrics(1)["first"] == [(3, 3.0), (4, 3.0), (5, 3.0)]


def test_resume_on_slurm_starts_a_trainer_from_its_checkpoint(cluster, home, tmp_path):
    """A transformers Trainer's checkpoint folder, written on the cluster's file system apart
    from the store, comes back with the run and is sent to the resumed run's job."""

    (home / "targets.toml").write_text(
        f'[targets.apart]\nkind = "slurm"\npartition = "debug"\ntime = "10:00"\n'
        f'workdir = "{tmp_path / "cluster-fs"}"\n'
    )
    params = {"max_steps": 4, "export": False}
    old = api.submit(hf_code(), target="apart", procs=1, params=params, name="slurm-hf")
    old.wait(timeout=300)
    assert (old.path / "checkpoints" / "out" / "checkpoint-4" / "trainer_state.json").is_file()
    new = api.resume(old.id, params={"max_steps": 8}).wait(timeout=300)
    check_trainer_resumed(old, new)
    assert leftover(new.id) == []


def test_a_node_clock_that_is_off_does_not_shift_stall_detection(tmp_path):
    """Heartbeats as a node an hour ahead writes them: rank 1's last event was 12 s before
    its last heartbeat (on the node's clock), which reached this machine just now."""
    from jupyter_trainer.store import RunPaths
    from jupyter_trainer.supervisor.watch import RunWatch
    from jupyter_trainer.targets.local.target import LocalTarget

    paths = RunPaths(tmp_path)
    paths.ranks.mkdir()
    paths.events.mkdir()
    ahead = time.time() + 3600
    for rank, quiet in ((0, 0.5), (1, 12.0)):
        (paths.ranks / f"rank-{rank}.json").write_text(
            json.dumps(
                {
                    "rank": rank,
                    "pid": os.getpid(),
                    "host": os.uname().nodename,
                    "started": ahead - 60,
                    "attempt": 0,
                }
            )
        )
        (paths.events / f"rank-{rank}.beat").write_text(
            json.dumps({"attempt": 0, "step": 7 - rank, "progress": ahead - quiet, "beat": ahead})
        )
    watch = RunWatch(paths, "torchrun", 10, lambda found: LocalTarget().stacks(None, found))
    [stalled] = watch.stalled()
    assert (stalled["rank"], stalled["last_step"]) == (1, 6)
    assert 12 <= stalled["seconds"] < 14 and "test_a_node_clock" in stalled["stack"]
    assert RunWatch(paths, "torchrun", 15, lambda found: {}).stalled() == []


COLLECTIVE_PAIR = """
import sys, time, torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)

def wait_for_a_lost_batch():
    time.sleep(600)

print("ready", flush=True)
if rank == 1:
    wait_for_a_lost_batch()
dist.all_reduce(torch.ones(1))
"""


def test_the_rank_the_others_wait_for_is_named_even_if_a_waiting_rank_went_quiet_first(tmp_path):
    """Rank 0 waits in all_reduce for rank 1, which is stuck elsewhere. Rank 0's last event
    happens to be older, so it crosses the timeout first (on a loaded machine, or with
    heartbeats brought back over ssh, by whole seconds): the stall is still rank 1's, whose
    stack is not in a collective, not rank 0's."""
    from jupyter_trainer.store import RunPaths
    from jupyter_trainer.supervisor.watch import RunWatch
    from jupyter_trainer.targets.local.target import LocalTarget

    script = tmp_path / "pair.py"
    script.write_text(COLLECTIVE_PAIR)
    ranks = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(tmp_path / "store")],
            stdout=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    try:
        for proc in ranks:
            assert proc.stdout.readline().strip() == "ready"
        paths = RunPaths(tmp_path / "run")
        paths.ranks.mkdir(parents=True)
        paths.events.mkdir()
        now = time.time()
        for rank, quiet in ((0, 12.0), (1, 4.0)):
            (paths.ranks / f"rank-{rank}.json").write_text(
                json.dumps(
                    {
                        "rank": rank,
                        "pid": ranks[rank].pid,
                        "host": os.uname().nodename,
                        "started": now - 60,
                        "attempt": 0,
                    }
                )
            )
            (paths.events / f"rank-{rank}.beat").write_text(
                json.dumps({"attempt": 0, "step": 4, "progress": now - quiet, "beat": now})
            )
        watch = RunWatch(paths, "torchrun", 10, lambda found: LocalTarget().stacks(None, found))
        wait_for(
            lambda: "all_reduce" in LocalTarget().stacks(None, {0: {"pid": ranks[0].pid}})[0],
            timeout=30,
            what="rank 0 inside all_reduce",
        )
        [stalled] = watch.stalled()
        assert (stalled["rank"], stalled["waiting"]) == (1, False), stalled
        assert "wait_for_a_lost_batch" in stalled["stack"]
    finally:
        for proc in ranks:
            proc.kill()
            proc.wait()
