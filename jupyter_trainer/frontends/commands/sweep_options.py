"""The options of a sweep, in every front end (``%%train``, ``%train script.py``,
``jupyter-trainer sweep start``): with ``--sweep`` a cell or script runs as a search over its
params, each trial a run with the run options of ``options.py``."""

from __future__ import annotations

import argparse
from typing import Any

from ...core.errors import SpecError


def add_sweep_options(parser: argparse.ArgumentParser) -> None:
    """The options of a sweep, in every front end: with ``--sweep`` a cell or script runs as
    a search over its params, each trial a run with the run options above."""
    group = parser.add_argument_group("sweep (hyperparameter search; each trial is a run)")
    group.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="KEY=EXPR",
        help="search KEY over EXPR: choice(a,b,...), uniform(lo,hi), "
        "loguniform(lo,hi), quniform(lo,hi,q), randint(lo,hi) (hi "
        "excluded), normal(mu,sigma), or a fixed value (repeatable)",
    )
    group.add_argument(
        "--sweep-file",
        default=None,
        metavar="FILE",
        help="a YAML mapping of KEY: EXPR (the --sweep flags win)",
    )
    group.add_argument(
        "--trials",
        type=int,
        default=10,
        metavar="N",
        help="how many trials to start in all (default: 10)",
    )
    group.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="at most N trials running at once, no more than --trials (default: 1)",
    )
    group.add_argument(
        "--metric",
        default=None,
        metavar="NAME",
        help="the metric to optimise, as the trials jt.log() it (on rank 0)",
    )
    group.add_argument("--goal", default="max", metavar="max|min", help="default: max")
    group.add_argument(
        "--sampler",
        default="tpe",
        metavar="random|grid|tpe|gp",
        help="how params are chosen, by Optuna (default: tpe)",
    )
    group.add_argument(
        "--prune",
        default="none",
        metavar="none|median[:N]|truncation:PCT|bandit:SLACK|hyperband",
        help="stop poor trials early (default: none)",
    )
    group.add_argument(
        "--prune-after",
        type=int,
        default=0,
        metavar="STEP",
        help="prune nothing before this step (default: 0)",
    )
    group.add_argument(
        "--prune-every",
        type=int,
        default=1,
        metavar="STEPS",
        help="ask the pruner every STEPS steps (default: 1)",
    )
    group.add_argument(
        "--timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="start no trial after this long; running trials finish",
    )
    group.add_argument("--seed", type=int, default=None, help="the sampler's seed, 0 to 2**32-1")
    group.add_argument(
        "--objective",
        default="last",
        metavar="last|best",
        help="a trial's objective: the metric's last value or its best (default: last)",
    )


def sweep_kwargs(ns: argparse.Namespace) -> dict[str, Any]:
    """``api.sweep`` keyword arguments (its own, not the run's) from parsed sweep options."""
    return {
        "space": ns.sweep,
        "space_file": ns.sweep_file,
        "metric": ns.metric,
        "goal": ns.goal,
        "trials": ns.trials,
        "parallel": ns.parallel,
        "sampler": ns.sampler,
        "prune": ns.prune,
        "prune_after": ns.prune_after,
        "prune_every": ns.prune_every,
        "timeout": ns.timeout,
        "seed": ns.seed,
        "objective": ns.objective,
    }


_SWEEP_DEFAULTS = {
    "trials": 10,
    "parallel": 1,
    "metric": None,
    "goal": "max",
    "sampler": "tpe",
    "prune": "none",
    "prune_after": 0,
    "prune_every": 1,
    "timeout": None,
    "seed": None,
    "objective": "last",
}


def is_sweep(ns: argparse.Namespace) -> bool:
    """Whether the options ask for a sweep; sweep options without ``--sweep`` are an error."""
    if ns.sweep or ns.sweep_file:
        if getattr(ns, "dry_run", False):
            raise SpecError(
                "--dry-run shows one run and a sweep starts many: leave out "
                "--sweep to see the command of one run with these options"
            )
        return True
    given = [key for key, default in _SWEEP_DEFAULTS.items() if getattr(ns, key) != default]
    if given:
        flags = ", ".join("--" + key.replace("_", "-") for key in given)
        raise SpecError(
            f"{flags} only go with a sweep: add --sweep KEY=EXPR (for example "
            "--sweep lr=loguniform(1e-4,1e-1)) or leave them out"
        )
    return False
