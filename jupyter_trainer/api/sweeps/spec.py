"""What was asked of a sweep: ``SweepSpec``, written once to the sweep's ``spec.json``.

The space is stored as canonical expression texts (``space.space_texts``), so a stored spec
is data that parses back to the same space and never holds code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from ...core.errors import SpecError

GOALS = {"max": "max", "maximize": "max", "min": "min", "minimize": "min"}
OBJECTIVES = ("last", "best")
# Each running trial has a supervisor process on the driver's host (and, on the local
# target, its ranks): past this many at once a sweep is better split into several.
MAX_PARALLEL = 100
MAX_SEED = 2**32 - 1  # the samplers seed numpy, whose seeds are 0 to 2**32 - 1


@dataclass(frozen=True)
class SweepSpec:
    """A sweep: ``trials`` runs of one snapshot, at most ``parallel`` at a time, each with
    params drawn from ``space`` by ``sampler``; ``prune`` stops poor trials early from the
    ``metric`` they log, and ``goal`` says which way is better. A trial's objective is the
    metric's ``last`` value on rank 0 (or its ``best``)."""

    space: Mapping[str, str]
    metric: str
    goal: str = "max"
    trials: int = 10
    parallel: int = 1
    sampler: str = "tpe"
    prune: str = "none"
    prune_after: int = 0
    prune_every: int = 1
    timeout: float | None = None
    seed: int | None = None
    objective: str = "last"
    name: str = "sweep"
    extra: Mapping[str, Any] = field(default_factory=dict)  # origin: notebook, user, host

    def __post_init__(self) -> None:
        from .policies import check_sampler, parse_prune
        from .space import parse_space, space_texts

        space = parse_space(dict(self.space))
        object.__setattr__(self, "space", space_texts(space))
        if not isinstance(self.metric, str) or not self.metric.strip():
            raise SpecError(
                "a sweep needs --metric NAME: the metric its trials log with "
                "jt.log(...) that the sweep optimises"
            )
        goal = GOALS.get(str(self.goal).lower())
        if goal is None:
            raise SpecError(f"--goal {self.goal!r} is not a goal: use max or min")
        object.__setattr__(self, "goal", goal)
        for key, low in (("trials", 1), ("parallel", 1), ("prune_every", 1), ("prune_after", 0)):
            value = getattr(self, key)
            if type(value) is not int or value < low:
                flag = "--" + key.replace("_", "-")
                raise SpecError(
                    f"{flag} {value!r} is not valid: give a whole number of at least {low}"
                )
        if self.parallel > self.trials:
            raise SpecError(
                f"--parallel {self.parallel} is more than --trials {self.trials}: "
                f"give --parallel {self.trials} or less"
            )
        if self.parallel > MAX_PARALLEL:
            raise SpecError(
                f"--parallel {self.parallel} is more than {MAX_PARALLEL} trials at "
                f"once: give --parallel {MAX_PARALLEL} or less, or split the search "
                "into several sweeps"
            )
        if self.timeout is not None and (
            not isinstance(self.timeout, (int, float))
            or not math.isfinite(self.timeout)
            or self.timeout <= 0
        ):
            raise SpecError(
                f"--timeout {self.timeout!r} is not valid: give a number of seconds "
                "above 0, or leave it out for no time limit"
            )
        if self.seed is not None and (type(self.seed) is not int or not 0 <= self.seed <= MAX_SEED):
            raise SpecError(
                f"--seed {self.seed!r} is not valid: give a whole number from 0 to "
                f"{MAX_SEED}, or leave it out for a different search each time"
            )
        if self.objective not in OBJECTIVES:
            raise SpecError(f"objective {self.objective!r} is not one of {', '.join(OBJECTIVES)}")
        check_sampler(self.sampler, space)
        parse_prune(self.prune)
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def direction(self) -> Literal["maximize", "minimize"]:
        """Optuna's name for the goal."""
        return "maximize" if self.goal == "max" else "minimize"

    def better(self, a: float, b: float) -> bool:
        """Whether objective ``a`` is better than ``b``."""
        return a > b if self.goal == "max" else a < b

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SweepSpec:
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise SpecError(f"malformed sweep spec: unknown fields {sorted(unknown)}")
        return cls(**dict(data))
