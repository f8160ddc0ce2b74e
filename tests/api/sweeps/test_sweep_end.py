"""A sweep that says it has ended has nothing left running: when ``wait()`` or ``cancel()``
returns, every trial's run has ended, its supervisor and ranks are gone, and so is the
driver. Real sweeps of real trials; a pruned trial takes a moment to stop (it saves a
checkpoint on SIGTERM, as training loops do), which is when a sweep used to end too early."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from conftest import leftover, wait_for
from support.jt_cli import cli

import jupyter_trainer as jt
from jupyter_trainer.rankside.host import procs
from jupyter_trainer.store import TERMINAL

# Each trial scores lower than every trial before it at the same step (the score is minus
# the time), so once one trial has finished, the median policy prunes every later trial at
# its first step. A rank that has logged a step takes ``stop`` seconds to stop after
# SIGTERM (a checkpoint written on the way out; inside the supervisor's grace before
# SIGKILL); one stopped before its first step ends at once.
SLOW_TO_STOP = """
import signal
import time
from jupyter_trainer import runtime as jt

logged = False

def stop(signum, frame):
    time.sleep(float(jt.params["stop"]) if logged else 0.0)
    raise SystemExit(0)

signal.signal(signal.SIGTERM, stop)
for step in range(int(jt.params["steps"])):
    jt.log(step=step, score=-time.time())
    logged = True
    time.sleep(0.1)
"""


def start(
    tmp_path: Path, *, trials: int, parallel: int, steps: int = 6, stop: float = 1.5
) -> jt.Sweep:
    script = tmp_path / "train.py"
    script.write_text(SLOW_TO_STOP)
    return jt.sweep(
        script=script,
        space={"x": "uniform(0, 1)", "steps": steps, "stop": stop},
        metric="score",
        goal="max",
        trials=trials,
        parallel=parallel,
        sampler="random",
        seed=5,
        prune="median:1",
        launcher="python",
    )


def most_at_once(sweep: jt.Sweep) -> int:
    """The most trial runs alive at one moment, from each run's own start and end."""
    edges = []
    for trial in sweep.state["trials"]:
        state = jt.get_run(trial["run"]).state
        edges += [(state["created"], 1), (state["ended"], -1)]
    running = most = 0
    for _, change in sorted(edges):
        running += change
        most = max(most, running)
    return most


def still_running(sweep: jt.Sweep) -> list[str]:
    """What of the sweep is still there: trials not ended, runs not ended, supervisors,
    ranks, and the driver. Read at once, before anything else happens."""
    state = sweep.sweeps.read_state(sweep.id)
    found = []
    for trial in state["trials"]:
        if trial["status"] not in ("completed", "pruned", "failed", "canceled"):
            found.append(f"trial {trial['number']} is {trial['status']}")
        if not trial.get("run"):
            continue
        run_state = sweep.store.read_state(trial["run"])
        if run_state["status"] not in TERMINAL:
            found.append(f"run of trial {trial['number']} is {run_state['status']}")
        supervisor = run_state.get("supervisor") or {}
        if procs.is_alive(supervisor.get("pid"), supervisor.get("start_ticks")):
            found.append(
                f"supervisor of trial {trial['number']}: {procs.describe(supervisor['pid'])}"
            )
        found += [f"rank of trial {trial['number']}: {p}" for p in leftover(trial["run"])]
    driver = state.get("driver") or {}
    if procs.is_alive(driver.get("pid"), driver.get("start_ticks")):
        found.append(f"driver: {procs.describe(driver['pid'])}")
    return found


def test_wait_returns_once_every_trial_has_ended_and_left_nothing(home, tmp_path):
    sweep = start(tmp_path, trials=6, parallel=2)
    sweep.wait(timeout=240)
    assert still_running(sweep) == []
    state = sweep.state
    assert state["status"] == "completed" and len(state["trials"]) == 6
    last = state["trials"][5]
    assert last["status"] == "pruned" and last["pruned_at"] == 0, last
    assert "pruned" in jt.get_run(last["run"]).state["reason"]  # it was stopping
    for trial in state["trials"]:  # a trial ends when its run does, a pruned one too
        assert trial["end"] == jt.get_run(trial["run"]).state["ended"] <= state["ended"]
    # a pruned trial keeps its place among the parallel until its run has stopped
    assert most_at_once(sweep) <= 2


def pruned_then(sweep: jt.Sweep, action) -> None:
    """Do ``action`` as soon as the sweep records its first pruned trial (whose run is then
    still stopping)."""
    wait_for(
        lambda: sweep.state.get("counts", {}).get("pruned"),
        120,
        interval=0.02,
        what="a pruned trial",
    )
    action()


def kill_driver(sweep: jt.Sweep) -> None:
    os.kill(sweep.sweeps.read_state(sweep.id)["driver"]["pid"], signal.SIGKILL)
    wait_for(lambda: sweep.status == "interrupted", 20, what="the sweep to be interrupted")


def test_cancel_while_a_trial_is_being_pruned_waits_for_it(home, tmp_path):
    sweep = start(tmp_path, trials=4, parallel=1)
    pruned_then(sweep, sweep.cancel)
    assert still_running(sweep) == []
    state = sweep.state
    assert state["status"] == "canceled"
    assert [t["status"] for t in state["trials"]][:2] == ["completed", "pruned"]


def test_cancel_of_a_sweep_without_its_driver_waits_for_a_stopping_trial(home, tmp_path):
    sweep = start(tmp_path, trials=4, parallel=1)
    pruned_then(sweep, lambda: kill_driver(sweep))
    sweep.cancel()
    assert still_running(sweep) == []
    assert sweep.status == "canceled"


def test_a_resumed_sweep_waits_for_a_trial_its_earlier_driver_pruned(home, tmp_path):
    sweep = start(tmp_path, trials=2, parallel=1, stop=2.5)
    pruned_then(sweep, lambda: kill_driver(sweep))
    sweep.resume()
    sweep.wait(timeout=240)
    assert still_running(sweep) == []
    assert [t["status"] for t in sweep.state["trials"]] == ["completed", "pruned"]


def test_a_sweep_whose_stored_seed_breaks_the_sampler_says_so_on_resume(home, tmp_path):
    """A sweep made before --seed was checked (seed -1): its driver died in the sampler,
    so it was left without one. ``sweep resume`` names the problem at once."""
    sweep = start(tmp_path, trials=1, parallel=1, steps=1)
    sweep.wait(timeout=120)
    paths = sweep.sweeps.paths(sweep.id)
    spec = json.loads(paths.spec.read_text())
    paths.spec.write_text(json.dumps({**spec, "seed": -1}))
    paths.study.unlink()
    paths.state.write_text(
        json.dumps(
            {
                "id": sweep.id,
                "status": "created",
                "created": time.time() - 600,
                "trials": [],
                "counts": {},
            }
        )
    )
    assert sweep.status == "interrupted"
    began = time.monotonic()
    done = cli("sweep", "resume", sweep.id, timeout=120)
    assert time.monotonic() - began < 20
    assert done.returncode == 2, done
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert "--seed -1 is not valid" in done.stderr and "start a new sweep" in done.stderr
    assert sweep.status == "interrupted"  # nothing was started


def test_a_cancel_stops_a_burst_of_trial_starts(home, tmp_path):
    """Up to --parallel trials start one after another; a cancel asked for meanwhile is
    heeded before the next one starts, not after all of them."""
    sweep = start(tmp_path, trials=6, parallel=6, steps=600)
    wait_for(lambda: jt.runs(), 120, interval=0.02, what="the first trial's run")
    sweep.cancel()
    assert still_running(sweep) == []
    assert sweep.status == "canceled" and len(jt.runs()) < 6
