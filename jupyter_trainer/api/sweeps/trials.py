"""The trials a sweep's driver follows (driver.py): a running trial (``Live``) and one whose
run is still ending (``Ending``); the sweep's metric read from what rank 0 of a trial's run
logged, as (step, value) pairs; when the pruner is asked; and a trial's run found by its
spec, for a driver that stopped before it wrote the run's id down.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...store import Store
from .ended import is_over


@dataclass
class Live:
    """A running trial: its Optuna trial, its run and how far its events were read."""

    trial: Any  # an optuna.trial.Trial (optuna is imported only by the driver)
    run: str
    offset: int = 0
    count: int = 0  # metric values read, the step of a value logged without one
    reported: set[int] = field(default_factory=set)


@dataclass
class Ending:
    """A trial whose outcome is recorded but whose run has not yet ended and left no
    process: a pruned trial whose run is stopping, or one whose supervisor is exiting."""

    run: str
    final: bool = False  # the run's state is final; only its supervisor is left to exit


def new_values(store: Store, live: Live, metric: str) -> Iterator[tuple[int, float]]:
    """The values of ``metric`` rank 0 of ``live``'s run logged since the last read, with
    their steps (a value logged without a step, or with one that is not a whole number
    from 0, counts as the next)."""
    try:
        events, live.offset = store.read_events(live.run, 0, live.offset)
    except FileNotFoundError:
        return
    for event in events:
        values = event.get("values") if event.get("kind") == "metric" else None
        if not isinstance(values, dict) or metric not in values:
            continue
        value = metric_number(values[metric])
        if value is None:
            continue
        step = event.get("step")
        step = (
            int(step)
            if isinstance(step, (int, float)) and step >= 0 and step == int(step)
            else live.count
        )
        live.count += 1
        yield step, value


def note_value(
    record: dict[str, Any], step: int, value: float, better: Callable[[float, float], bool]
) -> None:
    """A trial's record after a value: its step, its last value and its best one."""
    finite = math.isfinite(value)
    record["step"] = step
    record["last"] = value if finite else None
    if finite and (record.get("best") is None or better(value, record["best"])):
        record["best"] = value


def evaluates(step: int, prune_kind: str, after: int, every: int) -> bool:
    """Whether the pruner is asked at ``step`` (HyperDrive's delay_evaluation and
    evaluation_interval: ``--prune-after`` and ``--prune-every``)."""
    return (
        prune_kind != "none"
        and step >= after
        and (prune_kind == "hyperband" or (step - after) % every == 0)
    )


def find_trial_run(store: Store, sweep_id: str, since: float, number: int) -> str | None:
    """The run of trial ``number`` of ``sweep_id``, if one was created (its driver may have
    stopped before it wrote the run's id down); runs created before ``since`` are not
    looked at."""
    for row in store.list_runs(limit=1 << 30):
        if row["created"] < since:
            break
        spec = store.read_spec(row["id"])
        if spec.sweep == sweep_id and spec.trial == number:
            return row["id"]
    return None


def over_or_unreadable(store: Store, run_id: str) -> bool:
    """Whether the run has ended and left no process, or its state cannot be read."""
    try:
        return is_over(store.read_state(run_id))
    except Exception:  # a run whose state cannot be read cannot be waited for
        return True


def metric_number(value: Any) -> float | None:
    """A logged value as a number (``nan`` and the infinities too, as JSON writes them)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if value in ("nan", "inf", "-inf"):
        return float(value)
    return None
