"""``Sweep``: a handle on one sweep in the store. Like ``Run``, it only reads the store and
writes requests; the sweep's driver owns the study and the trials."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ...core import hooks
from ...core.errors import RunCanceled, RunFailed, RunStateError, TrainerError
from ...core.spec import validate_run_id
from ...store import TERMINAL, Store
from ...store.owners import Identity
from ...store.sweeps import SWEEP_TERMINAL, SweepStore
from .ended import run_over, still_running

if TYPE_CHECKING:
    from ..runs import Run
    from .spec import SweepSpec


class Sweep:
    def __init__(self, sweep_id: str, store: Store | None = None) -> None:
        self.id = validate_run_id(sweep_id)
        self.store = store or Store()
        self.sweeps = SweepStore(self.store.home)

    def __repr__(self) -> str:
        return f"<Sweep {self.id} {self.status}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Sweep) and other.id == self.id and other.store.home == self.store.home
        )

    def __hash__(self) -> int:
        return hash(self.id)

    @property
    def spec(self) -> SweepSpec:
        from .spec import SweepSpec

        return SweepSpec.from_dict(self.sweeps.read_spec(self.id))

    @property
    def name(self) -> str:
        return self.sweeps.read_spec(self.id)["name"]

    @property
    def state(self) -> dict[str, Any]:
        return self.sweeps.read_state(self.id)

    @property
    def status(self) -> str:
        """created, running, completed, canceled, failed, or interrupted (its driver is
        gone before the end: ``resume()`` goes on)."""
        return self.state["status"]

    @property
    def done(self) -> bool:
        return self.status in SWEEP_TERMINAL

    @property
    def storage(self) -> str:
        """The Optuna storage URL of the study: ``optuna.load_study(study_name=sweep.id,
        storage=sweep.storage)``."""
        return self.sweeps.existing(self.id).storage_url

    def trials(self) -> list[Run]:
        """The runs of the trials started so far, by trial number."""
        from ..runs import Run

        return [Run(t["run"], self.store) for t in self.state["trials"] if t.get("run")]

    def table(self) -> list[dict[str, Any]]:
        """One row per trial: number, run, params, status, objective, step, duration and,
        for a pruned or failed trial, why."""
        rows = []
        for t in self.state["trials"]:
            start, end = t.get("start"), t.get("end")
            rows.append(
                {
                    "number": t["number"],
                    "run": t.get("run"),
                    "params": t["params"],
                    "status": t["status"],
                    "objective": t.get("objective"),
                    "step": t.get("step"),
                    "pruned_at": t.get("pruned_at"),
                    "reason": t.get("reason") or t.get("error"),
                    "duration": ((end or time.time()) - start) if start else None,
                }
            )
        return rows

    def best(self) -> Run | None:
        """The completed trial with the best objective so far (None before one completes)."""
        from ..runs import Run

        best = self.state.get("best")
        return Run(best["run"], self.store) if best else None

    @property
    def best_params(self) -> dict[str, Any] | None:
        best = self.state.get("best")
        return dict(best["params"]) if best else None

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> Sweep:
        """Block until the sweep ends (or its driver is gone: ``TrainerError`` says how to
        resume it). An ended sweep has no trial left running, and its driver has exited."""
        start = time.monotonic()
        while True:
            state = self.state
            status = state["status"]
            if status in SWEEP_TERMINAL and (
                not still_running(state.get("driver"))
                or (timeout is not None and time.monotonic() - start > timeout)
            ):
                break
            if status == "interrupted":
                raise TrainerError(
                    f"the driver of sweep {self.id} is gone before the sweep "
                    f"ended; resume it with `jupyter-trainer sweep resume "
                    f"{self.id}`"
                )
            if timeout is not None and time.monotonic() - start > timeout:
                raise TimeoutError(f"sweep {self.id} is still {status} after {timeout} s")
            time.sleep(min(poll, 0.05 + (time.monotonic() - start) / 200))
        if status == "failed":
            self.raise_for_status()
        return self

    def raise_for_status(self) -> None:
        """As ``Run.raise_for_status``: ``RunCanceled`` for a canceled sweep (with the reason
        it recorded), ``RunFailed`` for a failed one, ``TrainerError`` for one whose driver is
        gone; nothing for a running or completed one."""
        state = self.state
        status = state["status"]
        if status == "canceled":
            raise RunCanceled(
                f"sweep {self.id} was canceled: {state.get('reason') or ''}".rstrip(": "),
                run_id=self.id,
                status=status,
            )
        if status == "failed":
            raise RunFailed(
                f"sweep {self.id} failed: {state.get('error')}", run_id=self.id, status=status
            )
        if status == "interrupted":
            raise TrainerError(
                f"the driver of sweep {self.id} is gone before the sweep ended; "
                f"resume it with `jupyter-trainer sweep resume {self.id}`"
            )

    def cancel(
        self,
        *,
        wait: bool = True,
        timeout: float = 90.0,
        reason: str = "canceled by user",
        actor: Identity | None = None,
    ) -> None:
        """Cancel the sweep and every running trial; by default wait until they have ended.
        A sweep whose driver is gone is canceled here. ``reason`` is recorded in the sweep's
        state and its trials'. Another user's sweep refuses (``NotOwner``) unless ``actor``
        (this process's user) is in the workspace's admin group."""
        status = self.status
        if status in SWEEP_TERMINAL:
            raise RunStateError(f"sweep {self.id} already ended ({status}); nothing to cancel")
        self.sweeps.request_cancel(self.id, reason=reason, actor=actor)
        deadline = time.monotonic() + timeout
        if status == "interrupted":
            self._cancel_without_driver(deadline, reason)
        elif wait:
            while True:
                state = self.state
                if state["status"] in SWEEP_TERMINAL and not still_running(state.get("driver")):
                    break
                if state["status"] == "interrupted":
                    self._cancel_without_driver(deadline, reason)
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"sweep {self.id} did not end within {timeout} s")
                time.sleep(0.1)

    def _cancel_without_driver(self, deadline: float, reason: str) -> None:
        """Cancel the runs of the trials here, wait until each is over, then record the
        sweep as canceled (its driver is gone, so nobody else will)."""
        state = self.sweeps.read_state(self.id)
        runs = [t["run"] for t in state["trials"] if t.get("run")]
        for run_id in runs:  # a pruned trial's run may still be stopping too
            if (
                not run_over(self.store, run_id)
                and self.store.read_state(run_id)["status"] not in TERMINAL
            ):
                self.store.request_cancel(run_id, reason=f"sweep {self.id}: {reason}")
        while runs := [run_id for run_id in runs if not run_over(self.store, run_id)]:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the runs {', '.join(runs)} of sweep {self.id} did not end "
                    "in time; cancel the sweep again to wait for them"
                )
            time.sleep(0.1)
        for trial in state["trials"]:
            if trial["status"] in ("running", "starting"):
                trial.update(status="canceled", end=time.time())
        state.update(status="canceled", ended=time.time(), reason=reason)
        state.pop("recorded_status", None)
        self.sweeps.write_state(self.id, state)

    def resume(self) -> Sweep:
        """Start a driver again for a sweep whose driver is gone (or that failed)."""
        from .driver_start import check_spec, start_driver

        check_spec(self.sweeps, self.id)
        status = self.status
        if status not in ("interrupted", "failed"):
            raise RunStateError(
                f"sweep {self.id} is {status}: only an interrupted or failed sweep can be resumed"
            )
        self.sweeps.clear_cancel(self.id)
        start_driver(str(self.store.home), self.id)
        deadline = time.monotonic() + 60
        while self.status not in ("running", *SWEEP_TERMINAL):
            if time.monotonic() > deadline:
                raise TrainerError(
                    f"the driver of sweep {self.id} did not start; see "
                    f"{self.sweeps.paths(self.id).log}"
                )
            time.sleep(0.05)
        return self

    def monitor(self, **kwargs: Any):
        """This sweep's monitor (the widget in a notebook, text and plots elsewhere)."""
        return hooks.monitor("sweep", self, **kwargs)
