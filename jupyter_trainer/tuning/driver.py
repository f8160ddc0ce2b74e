"""The sweep driver: one detached process per sweep, the owner of its Optuna study.

``python -m jupyter_trainer.tuning.driver --detach SWEEP_ID`` keeps at most ``parallel``
trials running until ``trials`` have started (or ``timeout`` has passed) and every started
one has ended. A trial is an ordinary run of the sweep's template (``start.start_trial``):
the driver reads rank 0's events of each running trial as they arrive, reports the sweep's
metric to the study at each step and, when the pruner says so, cancels the run (it is then
``pruned``, at that step, with the reason). The study lives in the sweep's ``study.db``, and
the driver writes the sweep's ``state.json`` after every change, so a driver killed at any
point loses no finished trial: a new driver (``jupyter-trainer sweep resume``) adopts the
trials still running, records those that ended meanwhile, and goes on to the same total.
"""

from __future__ import annotations

import argparse
import fcntl
import math
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from .. import procs
from ..errors import TrainerError
from ..store import TERMINAL, Store, read_json
from ..store.sweeps import SWEEP_TERMINAL, SweepStore
from ..waker import Waker
from .spec import SweepSpec

POLL_S = 0.05  # between looks at the trials, where inotify cannot wake the driver
WAKE_S = 0.5  # the longest wait for a change inotify reports (a cancel request, a deadline)
START_FAILURES = 3  # trials in a row that cannot start end the sweep as failed
CANCEL_WAIT_S = 60.0


def log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


@dataclass
class Live:
    """A running trial: its Optuna trial, its run and how far its events were read."""

    trial: Any
    run: str
    offset: int = 0
    count: int = 0  # metric values read, the step of a value logged without one
    reported: set = field(default_factory=set)


class SweepDriver:
    def __init__(self, store: Store, sweep_id: str) -> None:
        self.store, self.id = store, sweep_id
        self.sweeps = SweepStore(store.home)
        self.paths = self.sweeps.existing(sweep_id)
        self.spec = SweepSpec.from_dict(self.sweeps.read_spec(sweep_id))
        self.state: dict[str, Any] = read_json(self.paths.state)
        self.live: dict[int, Live] = {}
        self.waker = Waker()
        self.staged: Any = None  # the next trial's snapshot, copied ahead of its start
        self.waker.watch(self.paths.root)

    # -- the study ---------------------------------------------------------------------
    def open_study(self) -> None:
        import optuna

        from .policies import make_pruner, make_sampler, parse_prune
        from .space import grid_size, parse_space

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.space = parse_space(self.spec.space)
        self.total = self.spec.trials
        self.prune_kind = parse_prune(self.spec.prune).kind
        if self.spec.sampler == "grid":
            self.total = min(self.total, grid_size(self.space))
        self.study = optuna.create_study(
            study_name=self.id, storage=self.paths.storage_url, load_if_exists=True,
            direction=self.spec.direction,
            sampler=make_sampler(self.spec.sampler, self.space, seed=self.spec.seed),
            pruner=make_pruner(self.spec.prune, after=self.spec.prune_after,
                               every=self.spec.prune_every))
        self.warm_up()

    def warm_up(self) -> None:
        """Import what starting a trial needs, and copy the first trial's snapshot, before
        the sweep starts: the first trial then starts as fast as the others."""
        from .. import capture, start, starter  # noqa: F401
        from ..targets import get_target

        target = self.sweeps.read_template(self.id).target.name
        get_target(target, self.store.home).warm_up()
        capture.hash_snapshot  # noqa: B018 (loads the module)
        starter.keep_spare(str(self.store.home), target)  # the first trial's supervisor
        self.stage_next()

    def tell(self, number: int, value: float | None = None, state: Any = None) -> None:
        try:
            self.study.tell(number, value, state=state, skip_if_finished=True)
        except RuntimeError as exc:  # GridSampler stops the study when its grid is done:
            if "Study.stop" not in str(exc):  # only an optimize loop has one to stop
                raise

    # -- the loop ----------------------------------------------------------------------
    def run(self) -> int:
        self.open_study()
        now = time.time()
        self.state.update(
            status="running", started=self.state.get("started") or now, ended=None, error=None,
            metric=self.spec.metric, goal=self.spec.goal, trials_total=self.total,
            parallel=self.spec.parallel, storage=self.paths.storage_url,
            driver={"pid": os.getpid(), "host": socket.gethostname(),
                    "start_ticks": procs.start_ticks(os.getpid()), "since": now})
        self.recover()
        self.save()
        log(f"sweep {self.id}: {self.total} trials, {self.spec.parallel} at a time")
        try:
            self.loop()
        except BaseException as exc:
            self.state.update(status="failed", ended=time.time(),
                              error=f"{type(exc).__name__}: {exc}")
            self.save()
            raise
        finally:
            if self.staged is not None:
                self.store.discard_staging(self.staged)
        return 0

    def loop(self) -> None:
        deadline = (self.state["started"] + self.spec.timeout) if self.spec.timeout else None
        failures = 0
        while True:
            self.paths.alive.touch()
            request = self.sweeps.cancel_request(self.id)
            if request is not None:
                self.cancel_all(request.get("reason") or "canceled by user")
                return
            changed = self.poll()
            while not self.starting_done(deadline) and len(self.live) < self.spec.parallel:
                failures = 0 if self.start_next() else failures + 1
                changed = True
                if failures >= START_FAILURES:
                    raise TrainerError(f"{failures} trials in a row could not start; the last: "
                                       f"{self.state['trials'][-1].get('error')}")
            if self.starting_done(deadline) and not self.live:
                self.state.update(status="completed", ended=time.time())
                if deadline and time.time() >= deadline and len(self.state["trials"]) < self.total:
                    self.state["reason"] = f"--timeout {self.spec.timeout:g} s reached"
                self.save()
                log(f"sweep {self.id} completed: best {self.state.get('best')}")
                return
            if changed:
                self.save()
            if self.staged is None and not self.starting_done(deadline):
                self.stage_next()
            self.waker.wait(WAKE_S, POLL_S)

    def stage_next(self) -> None:
        """Copy (and check) the template's snapshot for the next trial while the driver
        waits, so that starting it is a rename; a failure here is the next start's to report."""
        from ..start import stage_template

        try:
            self.staged = stage_template(self.store, self.id)
        except Exception:
            self.staged = None

    def starting_done(self, deadline: float | None) -> bool:
        return len(self.state["trials"]) >= self.total or (
            deadline is not None and time.time() >= deadline)

    def start_next(self) -> bool:
        """Ask the study for a trial and start its run; False if it could not start."""
        from ..start import start_trial
        from .space import suggest_params

        trial = self.study.ask()
        params = suggest_params(trial, self.space)
        record = {"number": trial.number, "run": None, "params": params, "status": "starting",
                  "objective": None, "step": None, "start": time.time(), "end": None}
        # Saved once the run exists: a driver that dies before that leaves a run that
        # recover() finds by its spec, or none, and then the trial does not count.
        self.state["trials"].append(record)
        staged, self.staged = self.staged, None
        try:
            run_id = start_trial(self.store, self.id, trial.number, params, staged=staged)
        except Exception as exc:  # the trial fails; the sweep goes on unless all do
            record.update(status="failed", end=time.time(), error=f"{type(exc).__name__}: {exc}")
            self.tell(trial.number, state=self.optuna.trial.TrialState.FAIL)
            log(f"trial {trial.number} could not start: {exc}")
            return False
        record.update(run=run_id, status="running")
        self.follow(trial.number, Live(trial, run_id))
        log(f"trial {trial.number}: run {run_id} with {params}")
        return True

    # -- following the trials ----------------------------------------------------------
    def poll(self) -> bool:
        changed = False
        for number, live in list(self.live.items()):
            record = self.record(number)
            status = self.store.read_state(live.run)["status"]
            if self.read_metric(live, record, prune=status not in TERMINAL):
                changed = True
                if record["status"] == "pruned":
                    continue
            if status in TERMINAL:
                self.read_metric(live, record, prune=False)
                self.finish(live, record, self.store.read_state(live.run))
                changed = True
        return changed

    def read_metric(self, live: Live, record: dict[str, Any], prune: bool) -> bool:
        """Report the metric values rank 0 logged since the last read, asking the pruner at
        each evaluation step (with ``prune``); True if there were any."""
        try:
            events, live.offset = self.store.read_events(live.run, 0, live.offset)
        except FileNotFoundError:
            return False
        new = False
        for event in events:
            values = event.get("values") if event.get("kind") == "metric" else None
            if not isinstance(values, dict) or self.spec.metric not in values:
                continue
            value = _number(values[self.spec.metric])
            if value is None:
                continue
            step = event.get("step")
            step = int(step) if isinstance(step, (int, float)) and step >= 0 and step == int(step) \
                else live.count
            live.count += 1
            new = True
            self.note_value(record, step, value)
            if step in live.reported or not self.evaluates(step):
                continue  # the study hears the steps its pruner is asked at, no others
            live.reported.add(step)
            live.trial.report(value, step)
            if prune and live.trial.should_prune():
                self.prune(live, record, step, value)
                return True
        return new

    def note_value(self, record: dict[str, Any], step: int, value: float) -> None:
        finite = math.isfinite(value)
        record["step"] = step
        record["last"] = value if finite else None
        if finite and (record.get("best") is None or self.spec.better(value, record["best"])):
            record["best"] = value

    def evaluates(self, step: int) -> bool:
        """Whether the pruner is asked at ``step`` (HyperDrive's delay_evaluation and
        evaluation_interval: ``--prune-after`` and ``--prune-every``)."""
        after = self.spec.prune_after
        return self.prune_kind != "none" and step >= after and \
            (self.prune_kind == "hyperband" or (step - after) % self.spec.prune_every == 0)

    def prune(self, live: Live, record: dict[str, Any], step: int, value: float) -> None:
        finite = value if math.isfinite(value) else None
        record.update(status="pruned", pruned_at=step, end=time.time(),
                      reason=self.prune_reason(step, finite))
        self.store.request_cancel(live.run, reason=f"pruned by sweep {self.id} at step {step}: "
                                                   f"{record['reason']}")
        self.tell(record["number"], state=self.optuna.trial.TrialState.PRUNED)
        self.unfollow(record["number"])
        log(f"trial {record['number']} pruned at step {step}: {record['reason']}")

    def prune_reason(self, step: int, value: float | None) -> str:
        from .policies import parse_prune

        policy = parse_prune(self.spec.prune)
        shown = f"{self.spec.metric} {value:.6g}" if value is not None else \
            f"{self.spec.metric} not finite"
        why = {
            "median": "worse than the median of the earlier trials at that step",
            "truncation": f"among the worst {policy.value:g}% of the trials at that step",
            "bandit": "outside the slack of the best trial at that step",
            "hyperband": "not promoted to hyperband's next rung",
        }.get(policy.kind, "stopped by the pruner")
        return f"{shown} at step {step} was {why} ({self.spec.prune} policy)"

    def finish(self, live: Live, record: dict[str, Any], run_state: dict[str, Any]) -> None:
        TrialState = self.optuna.trial.TrialState
        self.unfollow(record["number"])
        record["end"] = run_state.get("ended") or time.time()
        status = run_state["status"]
        objective = record.get("best") if self.spec.objective == "best" else record.get("last")
        if status == "completed" and objective is not None:
            record.update(status="completed", objective=objective)
            self.tell(record["number"], objective)
            self.update_best(record)
        elif status == "completed":
            record.update(status="failed", error=f"the run never logged {self.spec.metric} as a "
                          f"finite number on rank 0 (jt.log(step=..., {self.spec.metric}=...))")
            self.tell(record["number"], state=TrialState.FAIL)
        else:
            record.update(status="canceled" if status == "canceled" else "failed",
                          error=run_state.get("reason") or run_state.get("error") or status)
            self.tell(record["number"], state=TrialState.FAIL)
        log(f"trial {record['number']} {record['status']}: objective {record['objective']}")

    def update_best(self, record: dict[str, Any]) -> None:
        best = self.state.get("best")
        if best is None or self.spec.better(record["objective"], best["objective"]):
            self.state["best"] = {k: record[k] for k in ("number", "run", "params", "objective")}

    def follow(self, number: int, live: Live) -> None:
        self.live[number] = live
        paths = self.store.paths(live.run)
        self.waker.watch(paths.root, paths.events)

    def unfollow(self, number: int) -> None:
        live = self.live.pop(number)
        paths = self.store.paths(live.run)
        self.waker.forget(paths.root, paths.events)

    def record(self, number: int) -> dict[str, Any]:
        return next(t for t in self.state["trials"] if t["number"] == number)

    # -- cancel and recovery -----------------------------------------------------------
    def cancel_all(self, reason: str) -> None:
        for live in self.live.values():
            try:
                self.store.request_cancel(live.run, reason=f"sweep {self.id}: {reason}")
            except TrainerError:
                pass
        deadline = time.monotonic() + CANCEL_WAIT_S
        while self.live and time.monotonic() < deadline:
            self.poll()
            self.waker.wait(WAKE_S, POLL_S)
        for number in list(self.live):  # a run that did not end in time is still recorded
            record = self.record(number)
            record.update(status="canceled", end=time.time(), error=reason)
            self.tell(number, state=self.optuna.trial.TrialState.FAIL)
            self.unfollow(number)
        self.state.update(status="canceled", ended=time.time(), reason=reason)
        self.save()
        log(f"sweep {self.id} canceled: {reason}")

    def recover(self) -> None:
        """Pick up what an earlier driver left: trials still running are followed again,
        and a trial asked for but never started is dropped (it does not count)."""
        TrialState = self.optuna.trial.TrialState
        records = {t["number"]: t for t in self.state["trials"]}
        for frozen in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            record = records.get(frozen.number)
            run_id = (record or {}).get("run") or self.find_run(frozen.number)
            if run_id is None:
                self.tell(frozen.number, state=TrialState.FAIL)
                if record is not None:
                    self.state["trials"].remove(record)
                continue
            if record is None:
                params = self.store.read_spec(run_id).params
                record = {"number": frozen.number, "params": {k: params[k] for k in self.space},
                          "objective": None, "step": None, "start": time.time(),
                          "end": None}
                self.state["trials"].append(record)
            record.update(run=run_id, status="running")
            self.follow(frozen.number, Live(self.optuna.trial.Trial(self.study, frozen._trial_id),
                                            run_id, reported=set(frozen.intermediate_values)))
            log(f"trial {frozen.number}: following run {run_id} again")
        for record in list(self.state["trials"]):  # told, but the state was not saved
            if record["status"] in ("running", "starting") and record["number"] not in self.live:
                frozen = self.study.trials[record["number"]]
                record["status"] = {TrialState.COMPLETE: "completed",
                                    TrialState.PRUNED: "pruned"}.get(frozen.state, "failed")
                record["objective"] = frozen.value
                if record["status"] == "completed":
                    self.update_best(record)
        self.state["trials"].sort(key=lambda t: t["number"])

    def find_run(self, number: int) -> str | None:
        """The run of trial ``number``, if one was created (the driver may have stopped
        before it wrote the run's id down)."""
        for row in self.store.list_runs(limit=1 << 30):
            if row["created"] < self.state.get("created", 0):
                break
            spec = self.store.read_spec(row["id"])
            if spec.sweep == self.id and spec.trial == number:
                return row["id"]
        return None

    def save(self) -> None:
        counts: dict[str, int] = {}
        for trial in self.state["trials"]:
            counts[trial["status"]] = counts.get(trial["status"], 0) + 1
        self.state["counts"] = counts
        self.state["updated"] = time.time()
        self.sweeps.write_state(self.id, self.state)


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def start_driver(home: str, sweep_id: str) -> None:
    """Start the sweep's driver in its own session; returns once it has detached."""
    import subprocess

    from ..home import HOME_ENV

    done = subprocess.run(
        [sys.executable, "-m", "jupyter_trainer.tuning.driver", "--detach", sweep_id],
        env={**os.environ, HOME_ENV: str(home)}, stdin=subprocess.DEVNULL,
        capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise TrainerError(f"the driver of sweep {sweep_id} did not start: "
                           f"{done.stderr.strip()[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_trainer.tuning.driver")
    parser.add_argument("sweep_id")
    parser.add_argument("--detach", action="store_true")
    args = parser.parse_args(argv)
    store = Store()
    sweeps = SweepStore(store.home)
    paths = sweeps.existing(args.sweep_id)
    state = read_json(paths.state)
    if state["status"] in SWEEP_TERMINAL and state["status"] != "failed":
        print(f"sweep {args.sweep_id} already ended ({state['status']})", file=sys.stderr)
        return 2
    if state["status"] == "running" and not sweeps.driver_gone(state):
        print(f"sweep {args.sweep_id} already has a driver (pid {state['driver']['pid']})",
              file=sys.stderr)
        return 2
    lock = open(paths.root / "driver.lock", "w")
    try:  # held for the driver's life (the detached child inherits it)
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"sweep {args.sweep_id} already has a driver", file=sys.stderr)
        return 2
    if args.detach:
        procs.detach()
    procs.redirect_output(paths.log)
    return SweepDriver(store, args.sweep_id).run()


if __name__ == "__main__":
    sys.exit(main())
