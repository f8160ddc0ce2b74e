"""Which trial a sweep tries next (the sampler) and which it stops early (the pruner).

Both come from Optuna; the only pruner written here is ``BanditPruner``, Azure ML
HyperDrive's Bandit policy, which Optuna lacks. Names and policy texts are validated
without importing Optuna, so a bad ``--sampler`` or ``--prune`` fails in the kernel
before a sweep starts; Optuna is imported when a sampler or pruner is built.

Prune policy texts:

    none               never prune
    median[:N]         stop a trial whose best value so far is worse than the median of
                       the finished trials at the same step, once N have finished (default 2)
    truncation:PCT     stop a trial whose best value so far is in the worst PCT percent
                       (0 < PCT < 100) of the finished trials at the same step, once 2
                       have finished
    bandit:SLACK       stop a trial outside the slack factor SLACK of the best value any
                       other trial reported at the same step (HyperDrive's slack_factor)
    bandit:amount=A    the same with a slack amount A (HyperDrive's slack_amount)
    hyperband          Optuna's HyperbandPruner

``after`` and ``every`` in ``make_pruner`` are HyperDrive's delay_evaluation and
evaluation_interval: nothing is pruned before step ``after``, then at every ``every``-th step.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

from ...core.errors import SpecError
from .space import Dimension, grid, grid_size

if TYPE_CHECKING:
    import optuna

SAMPLERS = ("random", "grid", "tpe", "gp")
PRUNE_KINDS = ("none", "median", "truncation", "bandit", "hyperband")
PRUNE_FORMS = (
    "none, median, median:N (N finished trials before any pruning, default 2), "
    "truncation:PCT (0 < PCT < 100), bandit:SLACK (slack factor > 0), "
    "bandit:amount=A (slack amount > 0) or hyperband"
)
STARTUP_TRIALS = 2  # median's default N, and truncation's


@dataclass(frozen=True)
class PrunePolicy:
    """A parsed ``--prune`` text. ``value`` is median's startup trials, truncation's
    percent or bandit's slack; ``slack`` says whether bandit's is a factor or an amount."""

    kind: str = "none"
    value: float | None = None
    slack: str = "factor"

    def __post_init__(self) -> None:
        kind, value = self.kind, self.value
        if kind not in PRUNE_KINDS:
            raise SpecError(f"unknown prune policy {kind!r}; use one of {PRUNE_FORMS}")
        if self.slack not in ("factor", "amount") or (self.slack == "amount" and kind != "bandit"):
            raise SpecError(
                f"slack {self.slack!r} is not valid for {kind}: bandit's slack is "
                "a factor or an amount"
            )
        if kind in ("none", "hyperband"):
            if value is not None:
                raise SpecError(f"the {kind} prune policy takes no value; write {kind}")
        elif kind == "median":
            value = STARTUP_TRIALS if value is None else value
            if type(value) is not int or value < 0:
                raise SpecError(f"median:N takes a whole number of trials N >= 0, got {value!r}")
        elif not _is_number(value):
            raise SpecError(
                f"{kind} needs a number, for example "
                f"{'truncation:25' if kind == 'truncation' else 'bandit:0.1'}"
            )
        elif kind == "truncation" and not 0 < value < 100:
            raise SpecError(
                f"truncation:PCT takes a percentage between 0 and 100 (exclusive) "
                f"of trials to stop, got {value!r}"
            )
        elif kind == "bandit" and not value > 0:
            raise SpecError(f"bandit's slack {self.slack} must be above 0, got {value!r}")
        object.__setattr__(self, "value", value)

    @property
    def number(self) -> float:
        """The policy's value, for the kinds that take one (median, truncation, bandit)."""
        if self.value is None:
            raise SpecError(f"the {self.kind} prune policy takes no value")
        return self.value

    @property
    def text(self) -> str:
        """The canonical policy text; ``parse_prune(p.text) == p``."""
        if self.value is None:
            return self.kind
        shown = f"{self.value:g}" if self.kind != "median" else str(self.value)
        if float(shown) != self.value:
            shown = repr(self.value)
        return f"{self.kind}:{'amount=' if self.slack == 'amount' else ''}{shown}"


def parse_prune(text: str | PrunePolicy | None) -> PrunePolicy:
    """Read a ``--prune`` text (see the module docstring); ``None`` is ``none``."""
    if isinstance(text, PrunePolicy):
        return text
    if text is None:
        return PrunePolicy()
    if not isinstance(text, str):
        raise SpecError(f"--prune takes a policy text, got {text!r}; use one of {PRUNE_FORMS}")
    kind, sep, raw = text.strip().partition(":")
    kind, raw = kind.strip(), raw.strip()
    slack = "factor"
    if kind == "bandit" and raw.startswith("amount"):
        name, eq, raw = raw.partition("=")
        slack = "amount" if name.strip() == "amount" and eq else "?"
    value: Any = None
    if sep:
        value = _number(raw, whole=kind == "median")
    if kind not in PRUNE_KINDS or slack == "?" or (sep and value is None):
        raise SpecError(f"--prune {text!r} is not a prune policy; use one of {PRUNE_FORMS}")
    try:
        return PrunePolicy(kind, value, slack)
    except SpecError as exc:
        raise SpecError(f"--prune {text!r}: {exc}") from None


def check_sampler(name: str, space: Mapping[str, Dimension]) -> None:
    """Raise ``SpecError`` unless ``name`` is a sampler that can search ``space``."""
    if name not in SAMPLERS:
        raise SpecError(f"unknown sampler {name!r}; use one of {', '.join(SAMPLERS)}")
    if name == "grid":
        grid_size(space)


def prune_reason(policy_text: str, metric: str, step: int, value: float | None) -> str:
    """Why the policy ``policy_text`` stopped a trial whose ``metric`` was ``value`` (None:
    not finite) at ``step``, in words for the trials table."""
    policy = parse_prune(policy_text)
    shown = f"{metric} {value:.6g}" if value is not None else f"{metric} not finite"
    why = {
        "median": "worse than the median of the earlier trials at that step",
        "truncation": f"among the worst {policy.value:g}% of the trials at that step",
        "bandit": "outside the slack of the best trial at that step",
        "hyperband": "not promoted to hyperband's next rung",
    }.get(policy.kind, "stopped by the pruner")
    return f"{shown} at step {step} was {why} ({policy_text} policy)"


def make_sampler(
    name: str, space: Mapping[str, Dimension], seed: int | None = None
) -> optuna.samplers.BaseSampler:
    """Optuna's sampler for ``name``: random, grid (every combination of the space's
    grid values, in an order shuffled by ``seed``), tpe or gp (a Gaussian process, which
    needs torch and scipy)."""
    check_sampler(name, space)
    import optuna

    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "grid":
        return optuna.samplers.GridSampler(grid(space), seed=seed)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    try:
        import scipy  # noqa: F401  (Optuna imports these lazily, at the first sample)
        import torch  # noqa: F401
    except ImportError as exc:
        raise SpecError(
            f"--sampler gp needs torch and scipy ({exc}); install them with "
            "`pip install torch scipy`, or use --sampler tpe"
        ) from None
    return optuna.samplers.GPSampler(seed=seed)


def make_pruner(
    policy: str | PrunePolicy | None, after: int = 0, every: int = 1
) -> optuna.pruners.BasePruner:
    """Optuna's pruner for ``policy``: nothing is pruned before step ``after``, and then
    only every ``every`` steps from there (median and truncation judge at the first step
    reported in each interval, as Optuna's percentile pruners do). Hyperband picks its own
    rungs: its min_resource is ``max(1, after)``, the rest stays at Optuna's defaults
    (max_resource from the longest finished trial, reduction factor 3), and ``every``
    does not apply to it."""
    policy = parse_prune(policy)
    for name, number, low in (("after", after, 0), ("every", every, 1)):
        if type(number) is not int or number < low:
            raise SpecError(
                f"the prune {name} setting takes a whole number of steps >= {low}, got {number!r}"
            )
    import optuna

    pruners = optuna.pruners
    if policy.kind == "none":
        return pruners.NopPruner()
    if policy.kind == "median":
        return pruners.MedianPruner(
            n_startup_trials=int(policy.number), n_warmup_steps=after, interval_steps=every
        )
    if policy.kind == "truncation":
        # Optuna keeps the top ``percentile`` in both directions (it flips it for maximize).
        return pruners.PercentilePruner(
            100 - policy.number,
            n_startup_trials=STARTUP_TRIALS,
            n_warmup_steps=after,
            interval_steps=every,
        )
    if policy.kind == "hyperband":
        return pruners.HyperbandPruner(min_resource=max(1, after))
    amount = policy.slack == "amount"
    return _bandit_class()(
        slack_factor=None if amount else policy.number,
        slack_amount=policy.number if amount else None,
        after=after,
        every=every,
    )


def __getattr__(name: str) -> Any:
    """``BanditPruner`` is built on first use, so importing this module skips Optuna."""
    if name == "BanditPruner":
        return _bandit_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _bandit_class() -> type:
    import optuna
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    class BanditPruner(optuna.pruners.BasePruner):
        """HyperDrive's Bandit policy. At each evaluation step (``step >= after`` and
        ``(step - after) % every == 0``) a trial's value is compared with the best value
        any other trial (finished, pruned or running) reported at that same step. With a
        slack factor f it is stopped when below ``best / (1 + f)`` (maximize) or above
        ``best * (1 + f)`` (minimize), which assumes positive values; with a slack amount
        a, when below ``best - a`` or above ``best + a``. With no other value at the step
        nothing is stopped; a value that is NaN or infinite is always stopped."""

        def __init__(
            self,
            slack_factor: float | None = None,
            slack_amount: float | None = None,
            after: int = 0,
            every: int = 1,
        ) -> None:
            if slack_factor is not None and slack_amount is None:
                self._by_factor, self._slack = True, slack_factor
            elif slack_amount is not None and slack_factor is None:
                self._by_factor, self._slack = False, slack_amount
            else:
                raise SpecError("BanditPruner takes one of slack_factor and slack_amount")
            self.slack_factor = slack_factor
            self.slack_amount = slack_amount
            self.after = after
            self.every = every

        def prune(self, study: optuna.study.Study, trial: optuna.trial.FrozenTrial) -> bool:
            step = trial.last_step
            if step is None or step < self.after or (step - self.after) % self.every:
                return False
            value = trial.intermediate_values[step]
            if not math.isfinite(value):
                return True
            states = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
            others = [
                t.intermediate_values[step]
                for t in study.get_trials(deepcopy=False, states=states)
                if t.number != trial.number and step in t.intermediate_values
            ]
            others = [v for v in others if math.isfinite(v)]
            if not others:
                return False
            slack = self._slack
            if study.direction == StudyDirection.MAXIMIZE:
                best = max(others)
                bar = best / (1 + slack) if self._by_factor else best - slack
                return value < bar
            best = min(others)
            bar = best * (1 + slack) if self._by_factor else best + slack
            return value > bar

    BanditPruner.__qualname__ = "BanditPruner"
    return BanditPruner


def _is_number(value: object) -> TypeGuard[int | float]:
    """A finite int or float (a bool is neither here)."""
    return isinstance(value, (int, float)) and type(value) is not bool and math.isfinite(value)


def _number(raw: str, whole: bool) -> int | float | None:
    """``raw`` as an int (``whole``) or a finite number, else None."""
    try:
        return int(raw) if whole else float(raw)
    except ValueError:
        return None
