"""Drive one run from ``created`` to a terminal state. One detached process per run.

Started by ``submit`` as ``python -m jupyter_trainer.supervisor --detach RUN_ID``: it forks
into its own session so it outlives the kernel that asked for it, then is the only writer
of the run's ``state.json``. Readers never own the run; they write ``cancel.request``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import replace
from typing import Any

from .. import environment
from ..core.errors import TrainerError
from ..core.records import StateRecord, Status, launcher_record
from ..core.spec import RunSpec
from ..rankside.host.home import HOME_ENV
from ..store import ACTIVE, HEARTBEAT_S, TERMINAL, Store, load_state, reserve, write_json_atomic
from ..store.liveness import pid_record
from ..targets import Target, get_target
from . import attribution, observe, verdict
from .launcher_exit import LauncherExit
from .preemption import Preempting
from .queue_follow import QueueFollowing
from .snapshot_check import settle_code
from .state_writer import StateWriter
from .storage_upload import Uploads
from .verdict import TRACEBACK_TAIL
from .watch import RunWatch

POLL_S = 0.05
STOP_GRACE_S = 3.0  # SIGTERM -> SIGKILL
RANK_FAILURE_GRACE_S = 2.0  # how long a launcher gets to stop its ranks after one fails
LAUNCHER_WORDS_TAIL = 256 << 10  # what is searched for the launcher's words on its ranks
WATCH_S = 0.5  # how often attempts, NaN values and stalls are looked for
STAGING_SAVE_S = 0.5  # how often staging's progress is saved to the state
MLFLOW_LAST_RESORT_S = 900  # the mirror to MLflow stops itself sooner ($JT_MLFLOW_TIMEOUT)


_log = logging.getLogger("jupyter_trainer.supervisor")


def log(message: str) -> None:
    """One line of ``supervisor.log`` (``core.logs.process_log`` set it up)."""
    _log.info(message)


class Supervisor(QueueFollowing, Preempting):
    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.paths = store.existing(run_id)
        self.spec = store.read_spec(run_id)
        self.state: StateRecord = load_state(self.paths, run_id)
        self.writer = StateWriter(store, run_id, self.spec, log)
        self.signal_reason: str | None = None
        self.target: Target | None = None
        self.handle: dict[str, Any] | None = None
        self.launcher_exit = LauncherExit(
            self.paths.logs / "launcher.log", self.spec.launch.launcher
        )
        self._staging_saved = 0.0
        self.relaunches = 0  # attempts started again by this supervisor (not by torchrun)
        self.started: tuple[Any, Any] | None = None  # (spec, plan) the launcher was started with
        self.watch = RunWatch(
            self.paths, self.spec.launch.launcher, self.spec.watch.stall_timeout, self._stacks
        )

    # -- state -------------------------------------------------------------------------
    def transition(self, status: Status, fields: StateRecord | None = None) -> None:
        fields = fields or {}
        if status in TERMINAL:  # every process of the run is gone by now
            fields.update(settle_code(status, self.spec, self.paths, self.target, self.handle, log))
        now = time.time()
        stages = self.state.setdefault("stages", {})
        current = stages.get(self.state["status"])
        if current is not None and "end" not in current:
            current["end"] = now
        if status in ACTIVE:
            stages[status] = {"start": now}
        else:
            self.state["ended"] = now
        self.state["status"] = status
        self.state.update(fields)
        # Logged first: whoever sees the new state in state.json finds its line in the log.
        log(f"{status} {' '.join(f'{k}={v!r}' for k, v in fields.items() if k != 'traceback')}")
        self.writer.write(self.state)

    def save(self) -> None:
        self.writer.write(self.state)

    def cancel_reason(self) -> str | None:
        if self.signal_reason:
            return self.signal_reason
        request = self.store.cancel_request(self.run_id, self.store.owner(self.run_id))
        return request.get("reason", "canceled") if request else None

    # -- lifecycle ---------------------------------------------------------------------
    def run(self) -> int:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        self.state["supervisor"] = pid_record()
        try:  # how readers find this process when the state cannot be read
            write_json_atomic(self.paths.supervisor, self.state["supervisor"])
        except OSError as exc:
            log(f"cannot write {self.paths.supervisor}: {exc}")
        self.writer.reserve()
        self._start_heartbeat()
        # checkpoints and outputs to the run's storage, in a process of its own
        self.uploads = Uploads.start(
            self.store.home, self.paths.root, self.run_id, self.spec.storage
        )
        outcome: dict[str, Any] = {}
        try:
            self.transition("preparing")
            self.writer.check()
            if not self.cancel_reason():
                outcome = self._launch_and_watch()
        except TrainerError as exc:
            outcome = {"error": str(exc)}
        except Exception as exc:  # a supervisor bug must still end the run cleanly
            if reserve.is_disk_full(exc):
                where = getattr(exc, "filename", None) or self.paths.root
                outcome = {"error": reserve.disk_full_error(self.run_id, where)}
            else:
                outcome = {
                    "error": f"internal error in the supervisor: {exc!r}",
                    "traceback": traceback.format_exc()[-TRACEBACK_TAIL:],
                }
        finally:
            self._finish_surely(outcome)
            if self.target is not None:
                try:
                    self.target.release(self.handle)
                except Exception as exc:
                    log(f"releasing the target failed: {exc!r}")
        if not self.writer.settle():
            log("the run's end could not be recorded: the disk stayed full")
        self._mirror_to_mlflow()
        return 0

    def _finish_surely(self, outcome: dict[str, Any]) -> None:
        """``_finish``; if that fails, stop the run's processes and record the failure all
        the same, so that no run stays unfinished and no process is left."""
        try:
            self._finish(outcome)
        except Exception as exc:
            log(f"finishing the run failed: {exc!r}")
            if self.state["status"] in TERMINAL:
                return
            error = (
                self.writer.full_now()
                or f"internal error in the supervisor while finishing the run: {exc!r}"
            )
            try:
                teardown = self._teardown()
            except Exception as again:
                teardown = {"error": repr(again)}
            self.transition(
                "failed",
                {
                    "error": error,
                    "teardown": teardown,
                    "traceback": traceback.format_exc()[-TRACEBACK_TAIL:],
                },
            )

    def _mirror_to_mlflow(self) -> None:
        """With ``--mlflow``, mirror the ended run (``jupyter_trainer.mirrors.mlflow``, in a
        child process that records the result in the state and has its own time limit).
        Whatever happens there, the run's outcome stays as it is."""
        if not self.spec.mlflow:
            return
        argv = [sys.executable, "-m", "jupyter_trainer.mirrors.mlflow", "sync", self.run_id]
        try:
            subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                timeout=MLFLOW_LAST_RESORT_S,
                env={**os.environ, HOME_ENV: str(self.store.home)},
            )
        except (OSError, subprocess.SubprocessError) as exc:
            log(f"mirroring to MLflow failed: {exc!r}")

    def _start_heartbeat(self) -> None:
        """Touch ``supervisor.alive`` every ``HEARTBEAT_S`` while this process lives, so a
        reader that finds it gone dates the run's end to its last touch."""
        path = self.paths.heartbeat

        def beat() -> None:
            while True:
                try:
                    path.touch()
                except OSError:
                    pass
                try:
                    self.writer.beat()
                except Exception as exc:  # the heartbeat itself must go on
                    log(f"keeping the run's record failed: {exc!r}")
                time.sleep(HEARTBEAT_S)

        threading.Thread(target=beat, name="heartbeat", daemon=True).start()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.signal_reason = f"supervisor received {signal.Signals(signum).name}"

    def _launch_and_watch(self) -> dict[str, Any]:
        self.target = get_target(self.spec.target.name, self.store.home)
        self.target.on_staging = self._staging
        reservation = self.target.reserve(self.spec, self.run_id, str(self.paths.root))
        if reservation is not None:
            self.handle = reservation  # from now on, ending the run releases it
            if not self._wait_for_nodes():
                return {}
        realized = environment.realize(
            self.spec.env,
            self.target,
            home=self.store.home,
            code_dir=self.paths.code,
            entry=self.spec.code.entry,
            launcher=self.spec.launch.launcher,
        )
        if self.cancel_reason():  # before each step that can take seconds: no launch after it
            return {}
        python = realized.python
        self.state["environment"] = realized.record  # saved with the next transition
        backend = self.target.resolve_backend(self.spec.launch)
        spec = (
            self.spec if python in (None, self.spec.env.python) else _with_python(self.spec, python)
        )
        # The target's hooks, in the order Target's docstring gives.
        plan = self.target.plan(spec, self.run_id, str(self.paths.root), backend)
        if self.cancel_reason():
            return {}
        built = self.target.build_environment(spec, plan)
        if built is not None:  # the target built the environment on its nodes
            plan = replace(plan, python=built.python)
            self.state["environment"].update(built.record())
        if self.cancel_reason():
            return {}
        self.target.stage(spec, plan, str(self.paths.root))
        if self.cancel_reason():
            return {}
        if realized.variables:  # the environment's variables, over the target's own
            plan = replace(plan, extra_env={**plan.extra_env, **realized.variables})
        command = self.target.command(spec, plan)
        self.writer.check()
        self.transition(
            "queued" if self.target.queues else "running",
            {
                "backend": backend,
                "python": python or plan.python,
                "launcher": {"argv": list(command.argv)},
            },
        )
        self.started = (spec, plan)
        self._start(command)
        return self._watch()

    def _staging(self, record: dict[str, Any]) -> None:
        """The target's staging so far, in the state (at most every STAGING_SAVE_S, and
        always once it is done), for every monitor of the run to show."""
        self.state["staging"] = record
        now = time.monotonic()
        if record.get("done") or now - self._staging_saved >= STAGING_SAVE_S:
            self._staging_saved = now
            self.save()

    def _reserved(self) -> tuple[Target, dict[str, Any]]:
        """The run's target and its handle, once it has one (from ``reserve`` or ``start``)."""
        if self.target is None or self.handle is None:
            raise RuntimeError("the run's target holds nothing for it yet")
        return self.target, self.handle

    def _start(self, command: Any) -> None:
        if self.target is None:
            raise RuntimeError("the run's target is not loaded")
        self.handle = self.target.start(
            command, str(self.paths.root), str(self.launcher_exit.log_path)
        )
        self.launcher_exit.time(self.handle)
        self.state["launcher"].update(launcher_record(self.handle))
        self.save()

    def _watch(self) -> dict[str, Any]:
        """Follow the launcher to its end; start every rank again while restarts are left."""
        while True:
            outcome = self._watch_attempt()
            if "preempt" in outcome:  # the next attempt is started, unless the run ends here
                outcome = self._preempt(outcome["preempt"]) or {}
                if not outcome and not self.cancel_reason():
                    continue
            if not self._restarts_left(outcome):
                return outcome
            self._relaunch()

    def _watch_attempt(self) -> dict[str, Any]:
        target, handle = self._reserved()
        failure_seen: float | None = None
        next_rank_check = next_watch = 0.0
        while True:
            code = target.poll(handle)
            target.sync(handle)
            if code is not None:
                self._ran_unseen(self.store.rank_records(self.run_id))
                return {"launcher_exit": code, "launcher_seen_exit": time.time()}
            if self.state["status"] == "queued":
                self._follow_queue()
            if self.cancel_reason():
                return {}
            now = time.monotonic()
            if now >= next_watch:
                next_watch = now + WATCH_S
                full = self.writer.full_now()
                if full:
                    return {"error": full}
                ended = self._observe()
                if ended:
                    return ended
                preempt = self._preempt_requested()
                if preempt:
                    return {"preempt": preempt}
            if failure_seen is None and now >= next_rank_check:
                next_rank_check = now + 0.5
                records = self.store.rank_records(self.run_id)
                failed = attribution.first_own_failure(records, self.relaunches)
                if failed and not self._launcher_restarts():
                    failure_seen = now
            if failure_seen is not None and now - failure_seen > RANK_FAILURE_GRACE_S:
                log("a rank failed and the launcher has not stopped the others; stopping them")
                return {"stopped_after_rank_failure": True}
            time.sleep(POLL_S)

    # -- restarts, NaN values, stalls ----------------------------------------------------
    def _launcher_restarts(self) -> bool:
        """True while torchrun itself will start the ranks again after a failure."""
        if not self.spec.launch.restarts_itself or not self.spec.launch.max_restarts:
            return False
        records = self.store.rank_records(self.run_id)
        attempt = max((r.get("attempt", 0) for r in records.values()), default=0)
        return attempt < self.spec.launch.max_restarts

    def _restarts_left(self, outcome: dict[str, Any]) -> bool:
        """Whether to start every rank again after ``outcome``: the launcher failed (a rank
        failed), restarts are left, and nobody asked the run to end. torchrun on one node
        restarts its ranks itself (``LaunchSpec.restarts_itself``); the supervisor does it
        for the other launchers and for torchrun on several nodes."""
        failed = outcome.get("launcher_exit") not in (0, None) or outcome.get(
            "stopped_after_rank_failure"
        )
        return bool(
            failed
            and "error" not in outcome
            and not self.cancel_reason()
            and not self.spec.launch.restarts_itself
            and self.relaunches < self.spec.launch.max_restarts
        )

    def _relaunch(self) -> None:
        target, handle = self._reserved()
        if self.started is None:
            raise RuntimeError("the run was not started, so it cannot start again")
        self._observe()
        target.end_attempt(handle, self.run_id, STOP_GRACE_S)
        target.sync(handle)
        self.relaunches += 1
        spec, plan = self.started
        plan = replace(plan, extra_env={**plan.extra_env, "JT_ATTEMPT": str(self.relaunches)})
        log(f"a rank failed; starting attempt {self.relaunches} of {self.spec.launch.max_restarts}")
        self._start(target.command(spec, plan))

    def _observe(self) -> dict[str, Any] | None:
        """Put the attempts, new NaN/inf values and stalled ranks in the state; an outcome
        when one of them ends the run (``--stop-on-nan``, ``--on-stall cancel``)."""
        before = observe.observed(self.state)
        if self.spec.launch.max_restarts:  # without restarts there is only one attempt
            self.state["attempts"] = self.watch.attempts()
        observe.debugging(self.state, self.watch)
        ended = self._observe_non_finite() or observe.stalls(
            self.state, self.watch, self.spec.watch.on_stall, log
        )
        if ended or observe.observed(self.state) != before:
            self.save()
        return ended

    def _observe_non_finite(self) -> dict[str, Any] | None:
        return observe.non_finite(self.state, self.watch, self.spec.watch.stop_on_nan)

    def _stacks(self, records: dict[int, dict[str, Any]]) -> dict[int, str]:
        if self.target is None:
            return {}
        try:
            return self.target.stacks(
                {**(self.handle or {}), "python": self.state.get("python")}, records
            )
        except TrainerError as exc:
            return dict.fromkeys(records, f"(no stack: {exc})")

    def _teardown(self) -> dict[str, Any]:
        """Stop every process of the run and prove none is left."""
        if self.target is None:
            return {"leftovers": []}
        report: dict[str, Any] = {}
        if self.handle is not None:
            report.update(self.target.stop(self.handle, self.run_id, STOP_GRACE_S))
        left = self.target.leftovers(self.run_id)
        if left:  # stragglers that escaped the process group
            log(f"leftover processes: {left}")
            report["stragglers"] = [*report.get("stragglers", []), *left]
            self.target.stop(self.handle or {"pgid": 0, "pid": 0}, self.run_id, STOP_GRACE_S)
            left = self.target.leftovers(self.run_id)
        report["leftovers"] = left
        return report

    def _finish(self, outcome: dict[str, Any]) -> None:
        if self.state["status"] in TERMINAL:
            return
        self.state.pop("stalled", None)
        stopped = self._observe_non_finite()  # values the ranks wrote after the last look
        if stopped and "error" not in outcome and not self.cancel_reason():
            outcome = stopped
        self.transition("finalizing")
        teardown = self._teardown()
        if self.target is not None and self.handle is not None:
            try:
                collected = self.target.collect(self.handle)
            except TrainerError as exc:
                collected = {"error": str(exc)}
            if collected:
                teardown["collected"] = collected
            self._ran_unseen(self.store.rank_records(self.run_id))
        launcher_exit = outcome.get("launcher_exit")
        if self.handle is not None:
            if launcher_exit is None:
                launcher_exit = self.target.poll(self.handle) if self.target else None
            self.state["launcher"]["exit_code"] = launcher_exit
        records = self.store.rank_records(self.run_id)
        if self.spec.launch.max_restarts:
            self.state["attempts"] = self.watch.attempts()
        self.state.pop("debugging", None)
        fields: StateRecord = {
            "teardown": teardown,
            "rank_exit_codes": {str(r): rec.get("exit_code") for r, rec in sorted(records.items())},
        }
        report = self.target.report(self.handle) if self.target and self.handle else {}
        if report:
            fields["scheduler"] = report
        launcher = self.spec.launch.launcher
        words = self.launcher_exit.log_tail(LAUNCHER_WORDS_TAIL)
        status, why = verdict.decide(
            verdict.Evidence(
                outcome=outcome,
                records=records,
                launcher=launcher,
                launcher_exit=launcher_exit,
                launcher_death=self.launcher_exit.death(outcome),
                launcher_words=attribution.launcher_signals(
                    words, launcher, launcher_exit, records
                ),
                launcher_statuses=attribution.launcher_statuses(words),
                log_tail=self.launcher_exit.log_tail(),
                hot=(self.state.get("launcher") or {}).get("hot") or {},
                report=report,
                world_size=self.spec.launch.world_size,
                cancel_reason=self.cancel_reason(),
                disk_full=self.writer.full_now(),
            )
        )
        fields.update(why)
        fields.update(self.uploads.finish(log))  # the last uploads, within their time limit
        self.transition(status, fields)


def _with_python(spec: RunSpec, python: str) -> RunSpec:
    return replace(spec, env=replace(spec.env, python=python))
