"""The sweep driver: one detached process per sweep, the owner of its Optuna study.

The driver (started by ``driver_start``) keeps at most ``parallel`` trials running until
``trials`` have started (or ``timeout`` has passed) and every started one has ended. A trial
is an ordinary run of the sweep's template (``start.start_trial``): the driver reads rank 0's
events of each running trial as they arrive (trials.py), reports the sweep's metric to the
study at each step and, when the pruner says so, cancels the run (it is then
``pruned``, at that step, with the reason). The study lives in the sweep's ``study.db``, and
the driver writes the sweep's ``state.json`` after every change, so a driver killed at any
point loses no finished trial: a new driver (``jupyter-trainer sweep resume``) adopts the
trials still running, records those that ended meanwhile, and goes on to the same total.

A trial ends when its run has ended and left no process (``ended.is_over``): a pruned trial
keeps its place among the ``parallel`` until its run has stopped, and the sweep's final
state (completed, canceled or failed) is written only once every trial it started is over.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections.abc import Mapping
from typing import Any

from ...core.errors import RunNotFound, TrainerError
from ...core.redact import redact_text, redact_url
from ...core.waker import Waker
from ...rankside.host import procs
from ...store import TERMINAL, Store, read_json
from ...store.owners import verified_owner
from ...store.sweeps import SweepStore
from .ended import is_over
from .recovery import recover
from .spec import SweepSpec
from .trials import (
    Ending,
    Live,
    evaluates,
    new_values,
    note_value,
    over_or_unreadable,
)

POLL_S = 0.05  # between looks at the trials, where inotify cannot wake the driver
WAKE_S = 0.5  # the longest wait for a change inotify reports (a cancel request, a deadline)
START_FAILURES = 3  # trials in a row that cannot start end the sweep as failed
# How often the driver says which trials it still waits for while the sweep ends. The wait
# itself has no limit of its own: each run's supervisor bounds its teardown (SIGTERM, then
# SIGKILL), and a supervisor that dies leaves its run lost, which ends the wait too.
ENDING_NOTE_S = 30.0


log = logging.getLogger(__name__).info  # to driver.log, as driver_start sets it up


class SweepDriver:
    def __init__(self, store: Store, sweep_id: str) -> None:
        self.store, self.id = store, sweep_id
        self.sweeps = SweepStore(store.home)
        self.paths = self.sweeps.existing(sweep_id)
        self.spec = SweepSpec.from_dict(self.sweeps.read_spec(sweep_id))
        self.state: dict[str, Any] = read_json(self.paths.state)
        self.live: dict[int, Live] = {}
        self.ending: dict[int, Ending] = {}
        self.waker = Waker()
        self.staged: Any = None  # the next trial's snapshot, copied ahead of its start
        self.waker.watch(self.paths.root)
        # whose sweep this is, for an admin's cancel left in the workspace (``requests``);
        # one left before this driver began (a sweep resumed since) is stale
        self.owner = verified_owner(self.state.get("owner"), self.paths.root)
        self.admin_group = store.settings.admin_group
        self.began = time.time()

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
            study_name=self.id,
            storage=self.paths.storage_url,
            load_if_exists=True,
            direction=self.spec.direction,
            sampler=make_sampler(self.spec.sampler, self.space, seed=self.spec.seed),
            pruner=make_pruner(
                self.spec.prune, after=self.spec.prune_after, every=self.spec.prune_every
            ),
        )
        self.warm_up()

    def warm_up(self) -> None:
        """Import what starting a trial needs, and copy the first trial's snapshot, before
        the sweep starts: the first trial then starts as fast as the others."""
        from ... import capture
        from ...supervisor import starter
        from ...targets import get_target

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
        try:
            self.open_study()
            now = time.time()
            self.state.update(
                status="running",
                started=self.state.get("started") or now,
                ended=None,
                error=None,
                metric=self.spec.metric,
                goal=self.spec.goal,
                trials_total=self.total,
                parallel=self.spec.parallel,
                storage=redact_url(self.paths.storage_url),  # no database password in a record
                driver={
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "start_ticks": procs.start_ticks(os.getpid()),
                    "since": now,
                },
            )
            recover(self)
            self.save()
            log(f"sweep {self.id}: {self.total} trials, {self.spec.parallel} at a time")
            self.loop()
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.stop_after_failure(error)
            self.end("failed", error=error)
            raise
        finally:
            self.discard_staged()
        return 0

    def cancel_request(self) -> dict[str, Any] | None:
        return self.sweeps.cancel_request(self.id, self.owner, self.admin_group, self.began)

    def loop(self) -> None:
        deadline = (self.state["started"] + self.spec.timeout) if self.spec.timeout else None
        failures = 0
        while True:
            self.paths.alive.touch()
            request = self.cancel_request()
            if request is not None:
                self.cancel_all(request.get("reason") or "canceled by user")
                return
            changed = self.poll()
            while not self.starting_done(deadline) and self.busy() < self.spec.parallel:
                if self.cancel_request() is not None:
                    break  # seen at the top of the loop, before any more trials start
                failures = 0 if self.start_next() else failures + 1
                changed = True
                if failures >= START_FAILURES:
                    raise TrainerError(
                        f"{failures} trials in a row could not start; the last: "
                        f"{self.state['trials'][-1].get('error')}"
                    )
            if self.starting_done(deadline) and not self.live and not self.ending:
                fields = {}
                if deadline and time.time() >= deadline and len(self.state["trials"]) < self.total:
                    fields["reason"] = f"--timeout {self.spec.timeout:g} s reached"
                self.end("completed", **fields)
                return
            if changed:
                self.save()
            if self.staged is None and not self.starting_done(deadline):
                self.stage_next()
            self.pause()

    def busy(self) -> int:
        """The trials that hold a place among the ``parallel``: those running, and those
        pruned whose runs are still stopping."""
        return len(self.live) + sum(not e.final for e in self.ending.values())

    def pause(self) -> None:
        """Wait for a change: a supervisor's exit wakes no watch, so look often for one."""
        exiting = any(e.final for e in self.ending.values())
        self.waker.wait(POLL_S if exiting else WAKE_S, POLL_S)

    def end(self, status: str, **fields: Any) -> None:
        """Write the sweep's final state; every trial it started is over by now. What the
        driver itself started (a waiting supervisor, a staged snapshot) goes first."""
        from ...supervisor import starter

        starter.release_spare()
        self.discard_staged()
        self.state.update(status=status, ended=time.time(), **fields)
        self.save()
        log(
            f"sweep {self.id} {status}: "
            + (fields.get("error") or fields.get("reason") or f"best {self.state.get('best')}")
        )

    def discard_staged(self) -> None:
        if self.staged is not None:
            self.store.discard_staging(self.staged)
            self.staged = None

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
            deadline is not None and time.time() >= deadline
        )

    def start_next(self) -> bool:
        """Ask the study for a trial and start its run; False if it could not start."""
        from ..start import start_trial
        from .space import suggest_params

        trial = self.study.ask()
        params = suggest_params(trial, self.space)
        record = {
            "number": trial.number,
            "run": None,
            "params": params,
            "status": "starting",
            "objective": None,
            "step": None,
            "start": time.time(),
            "end": None,
        }
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
    def poll(self, prune: bool = True) -> bool:
        """Read what the running trials logged (pruning with ``prune``), record those whose
        runs ended, and let go of those that are over; True if anything changed."""
        changed = False
        for number, live in list(self.live.items()):
            record = self.record(number)
            status = self.store.read_state(live.run)["status"]
            if self.read_metric(live, record, prune=prune and status not in TERMINAL):
                changed = True
                if record["status"] == "pruned":
                    continue
            if status in TERMINAL:
                self.read_metric(live, record, prune=False)
                self.finish(live, record, self.store.read_state(live.run))
                changed = True
        return self.reap() or changed

    def reap(self) -> bool:
        """Let go of the ending trials whose runs have ended and left no process; a trial's
        end is then its run's."""
        changed = False
        for number, ending in list(self.ending.items()):
            state: Mapping[str, Any]
            try:
                state = self.store.read_state(ending.run)
            except RunNotFound:  # deleted meanwhile: nothing of it is left to wait for
                state = {"status": "lost", "ended": None}
            ending.final = state["status"] in TERMINAL
            if is_over(state):
                del self.ending[number]
                self.waker.forget(self.store.paths(ending.run).root)
                self.record(number)["end"] = state.get("ended") or time.time()
                changed = True
        return changed

    def read_metric(self, live: Live, record: dict[str, Any], prune: bool) -> bool:
        """Report the metric values rank 0 logged since the last read, asking the pruner at
        each evaluation step (with ``prune``); True if there were any."""
        new = False
        for step, value in new_values(self.store, live, self.spec.metric):
            new = True
            note_value(record, step, value, self.spec.better)
            if step in live.reported or not self.evaluates(step):
                continue  # the study hears the steps its pruner is asked at, no others
            live.reported.add(step)
            live.trial.report(value, step)
            if prune and live.trial.should_prune():
                self.prune(live, record, step, value)
                return True
        return new

    def evaluates(self, step: int) -> bool:
        """Whether the pruner is asked at ``step`` (HyperDrive's delay_evaluation and
        evaluation_interval: ``--prune-after`` and ``--prune-every``)."""
        return evaluates(step, self.prune_kind, self.spec.prune_after, self.spec.prune_every)

    def prune(self, live: Live, record: dict[str, Any], step: int, value: float) -> None:
        from .policies import prune_reason

        finite = value if math.isfinite(value) else None
        record.update(
            status="pruned",
            pruned_at=step,
            end=time.time(),
            reason=prune_reason(self.spec.prune, self.spec.metric, step, finite),
        )
        self.store.request_cancel(
            live.run, reason=f"pruned by sweep {self.id} at step {step}: {record['reason']}"
        )
        self.tell(record["number"], state=self.optuna.trial.TrialState.PRUNED)
        self.unfollow(record["number"])
        self.ending[record["number"]] = Ending(live.run)
        log(f"trial {record['number']} pruned at step {step}: {record['reason']}")

    def finish(self, live: Live, record: dict[str, Any], run_state: Mapping[str, Any]) -> None:
        TrialState = self.optuna.trial.TrialState
        self.unfollow(record["number"])
        self.ending[record["number"]] = Ending(live.run, final=True)
        record["end"] = run_state.get("ended") or time.time()
        status = run_state["status"]
        objective = record.get("best") if self.spec.objective == "best" else record.get("last")
        if status == "completed" and objective is not None:
            record.update(status="completed", objective=objective)
            self.tell(record["number"], objective)
            self.update_best(record)
        elif status == "completed":
            record.update(
                status="failed",
                error=f"the run never logged {self.spec.metric} as a "
                f"finite number on rank 0 (jt.log(step=..., {self.spec.metric}=...))",
            )
            self.tell(record["number"], state=TrialState.FAIL)
        else:
            record.update(
                status="canceled" if status == "canceled" else "failed",
                error=run_state.get("reason") or run_state.get("error") or status,
            )
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
        """Stop reading the trial's events; its run's folder stays watched until it is over."""
        live = self.live.pop(number)
        self.waker.forget(self.store.paths(live.run).events)

    def record(self, number: int) -> dict[str, Any]:
        return next(t for t in self.state["trials"] if t["number"] == number)

    # -- cancel and recovery -----------------------------------------------------------
    def cancel_all(self, reason: str) -> None:
        self.request_stop(reason)
        self.settle()
        self.end("canceled", reason=reason)

    def request_stop(self, reason: str) -> None:
        """Ask the run of every running trial to stop."""
        for live in self.live.values():
            try:
                self.store.request_cancel(live.run, reason=f"sweep {self.id}: {reason}")
            except TrainerError:
                pass

    def settle(self) -> None:
        """Wait until every trial started is over: those asked to stop are recorded as their
        runs end (canceled, or completed if one finished first), none is pruned meanwhile."""
        noted = time.monotonic()
        while self.live or self.ending:
            if self.poll(prune=False):
                self.save()
            if time.monotonic() - noted > ENDING_NOTE_S:
                noted = time.monotonic()
                runs = self.unfinished_runs()
                log(f"waiting for the runs of {len(runs)} trials to end: {', '.join(runs)}")
            self.pause()

    def unfinished_runs(self) -> list[str]:
        """The runs of the trials still running or ending."""
        return [live.run for live in self.live.values()] + [e.run for e in self.ending.values()]

    def stop_after_failure(self, error: str) -> None:
        """The sweep failed: stop its running trials and wait until they are over, as a
        cancel does. Where even that fails, wait for each run by its state alone."""
        self.request_stop(f"the sweep failed: {error}")
        try:
            self.settle()
            return
        except Exception as exc:
            log(
                f"cannot record the trials' ends ({type(exc).__name__}: {exc}); waiting for "
                "their runs to end"
            )
        runs = set(self.unfinished_runs())
        while runs:
            runs = {run for run in runs if not over_or_unreadable(self.store, run)}
            time.sleep(WAKE_S)

    def save(self) -> None:
        counts: dict[str, int] = {}
        for trial in self.state["trials"]:
            counts[trial["status"]] = counts.get(trial["status"], 0) + 1
        self.state["counts"] = counts
        self.state["updated"] = time.time()
        if self.state.get("error"):  # a database's error may quote its URL
            self.state["error"] = redact_text(str(self.state["error"]))
        self.sweeps.write_state(self.id, self.state)
