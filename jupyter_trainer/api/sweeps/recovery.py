"""How a new sweep driver picks up what an earlier one left (``jupyter-trainer sweep resume``
after a driver was killed): the trials still running are followed again, those that ended
meanwhile are recorded, and a trial asked for but never started is dropped."""

from __future__ import annotations

import logging
import time
from typing import Any, Protocol

from ...core.errors import RunNotFound
from ...core.waker import Waker
from ...store import TERMINAL, Store
from .ended import is_over
from .trials import Ending, Live, find_trial_run

log = logging.getLogger(__name__).info  # to driver.log, with every logger of the package


class Driver(Protocol):
    """What recovery uses of the sweep's driver (``driver.SweepDriver``)."""

    @property
    def store(self) -> Store: ...
    @property
    def id(self) -> str: ...
    @property
    def state(self) -> dict[str, Any]: ...
    @property
    def optuna(self) -> Any: ...
    @property
    def study(self) -> Any: ...
    @property
    def space(self) -> dict[str, Any]: ...
    @property
    def live(self) -> dict[int, Live]: ...
    @property
    def ending(self) -> dict[int, Ending]: ...
    @property
    def waker(self) -> Waker: ...

    def tell(self, number: int, value: float | None = None, state: Any = None) -> None: ...

    def follow(self, number: int, live: Live) -> None: ...

    def update_best(self, record: dict[str, Any]) -> None: ...


def recover(driver: Driver) -> None:
    """Pick up what an earlier driver left: trials still running are followed again,
    and a trial asked for but never started is dropped (it does not count)."""
    TrialState = driver.optuna.trial.TrialState
    records = {t["number"]: t for t in driver.state["trials"]}
    for frozen in driver.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        record = records.get(frozen.number)
        run_id = (record or {}).get("run") or find_trial_run(
            driver.store, driver.id, driver.state.get("created", 0), frozen.number
        )
        if run_id is None:
            driver.tell(frozen.number, state=TrialState.FAIL)
            if record is not None:
                driver.state["trials"].remove(record)
            continue
        if record is None:
            params = driver.store.read_spec(run_id).params
            record = {
                "number": frozen.number,
                "params": {k: params[k] for k in driver.space},
                "objective": None,
                "step": None,
                "start": time.time(),
                "end": None,
            }
            driver.state["trials"].append(record)
        record.update(run=run_id, status="running")
        driver.follow(
            frozen.number,
            Live(
                driver.optuna.trial.Trial(driver.study, frozen._trial_id),
                run_id,
                reported=set(frozen.intermediate_values),
            ),
        )
        log(f"trial {frozen.number}: following run {run_id} again")
    recover_ending(driver)
    for record in list(driver.state["trials"]):  # told, but the state was not saved
        if record["status"] in ("running", "starting") and record["number"] not in driver.live:
            frozen = driver.study.trials[record["number"]]
            record["status"] = {
                TrialState.COMPLETE: "completed",
                TrialState.PRUNED: "pruned",
            }.get(frozen.state, "failed")
            record["objective"] = frozen.value
            if record["status"] == "completed":
                driver.update_best(record)
    driver.state["trials"].sort(key=lambda t: t["number"])


def recover_ending(driver: Driver) -> None:
    """Trials an earlier driver recorded (pruned, say) whose runs are not over yet: the
    sweep ends after them too."""
    for record in driver.state["trials"]:
        if record.get("run") and record["number"] not in driver.live:
            try:
                state = driver.store.read_state(record["run"])
            except RunNotFound:
                continue
            if not is_over(state):
                driver.ending[record["number"]] = Ending(
                    record["run"], final=state["status"] in TERMINAL
                )
                driver.waker.watch(driver.store.paths(record["run"]).root)
