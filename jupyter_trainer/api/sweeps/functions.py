"""The sweep functions of the Python API: ``sweep``, ``sweeps`` and ``get_sweep``
(``jupyter_trainer.sweep(...)`` and so on). Sweeps sit above the run API: a sweep's trials
are runs that ``submit`` would start, made from one captured template."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ...core.errors import SpecError
from ...core.spec import validate_run_id
from ...store import Store
from ...store.sweeps import SweepStore
from ..runs import submit
from ..submission import first_line, given_params, is_flag_list, run_writer
from .create import check_cell_reads, create_sweep, placeholders
from .handle import Sweep
from .space import parse_space, space_texts
from .space_file import load_space_file
from .spec import SweepSpec

# submit()'s run options and their defaults: every trial is such a run.
_RUN_DEFAULTS = {
    name: p.default
    for name, p in inspect.signature(submit).parameters.items()
    if name not in ("code", "wait", "home", "dry_run")
}
_RUN_OPTIONS = frozenset(_RUN_DEFAULTS)


def sweep(
    code: str | None = None,
    *,
    space: Mapping[str, Any] | Sequence[str] | None = None,
    space_file: str | os.PathLike[str] | None = None,
    metric: str | None = None,
    goal: str = "max",
    trials: int = 10,
    parallel: int = 1,
    sampler: str = "tpe",
    prune: str = "none",
    prune_after: int = 0,
    prune_every: int = 1,
    timeout: float | None = None,
    seed: int | None = None,
    objective: str = "last",
    wait: bool = False,
    home: str | os.PathLike | None = None,
    **options: Any,
) -> Sweep:
    """Start a sweep of ``code`` (a cell's source) or ``script=``: ``trials`` runs, at most
    ``parallel`` at a time, whose params are drawn from ``space`` (``{"lr":
    "loguniform(1e-4, 1e-1)"}``, ``["lr=loguniform(1e-4,1e-1)"]``, and/or the YAML file
    ``space_file``) by ``sampler`` (random, grid, tpe, gp) to optimise ``metric`` (logged with
    ``jt.log``) toward ``goal`` (max or min), stopping poor trials early with ``prune``
    (none, median, truncation:PCT, bandit:SLACK, hyperband) from step ``prune_after``, every
    ``prune_every`` steps. ``options`` are ``submit``'s (target, procs, launcher, env, params,
    ...): every trial is such a run. Everything is checked before the sweep exists; a
    detached driver then runs it, so it outlives this process."""
    unknown = sorted(set(options) - _RUN_OPTIONS)
    if unknown:
        raise SpecError(
            f"sweep() got unknown options {unknown}; it takes the sweep's own "
            f"options and submit()'s: {', '.join(sorted(_RUN_OPTIONS))}"
        )
    merged = dict(parse_space(load_space_file(space_file))) if space_file is not None else {}
    if space:  # flags (or the mapping) win over the file
        merged.update(parse_space(list(space) if is_flag_list(space) else space))
    if not merged:
        raise SpecError(
            "a sweep needs a search space: --sweep KEY=EXPR (repeatable), "
            "--sweep-file FILE.yaml, or space={...}"
        )
    texts = space_texts(merged)
    name = options.get("name") or (
        Path(options["script"]).stem if options.get("script") else "cell"
    )
    spec = SweepSpec(
        space=texts,
        metric=metric or "",
        goal=goal,
        trials=trials,
        parallel=parallel,
        sampler=sampler,
        prune=prune,
        prune_after=prune_after,
        prune_every=prune_every,
        timeout=timeout,
        seed=seed,
        objective=objective,
        name=name,
    )
    if code is not None:
        check_cell_reads(
            code,
            texts,
            options.get("namespace") or {},
            first_line=first_line(options.get("origin")),
        )
    run_options = {
        key: value for key, value in {**_RUN_DEFAULTS, **options}.items() if key != "params"
    }
    store, tgt, write = run_writer(
        code,
        home=home,
        **run_options,
        params={**given_params(options.get("params")), **placeholders(texts)},
    )
    handle = Sweep(create_sweep(store, tgt, write, spec), store)
    return handle.wait() if wait else handle


def sweeps(*, home: str | os.PathLike | None = None) -> list[Sweep]:
    """The sweeps in the store, newest first."""
    store = Store(home)
    return [Sweep(sweep_id, store) for sweep_id in SweepStore(store.home).ids()]


def is_sweep_id(sweep_id: str, *, home: str | os.PathLike | None = None) -> bool:
    """Whether ``sweep_id`` names a sweep in the store (rather than a run)."""
    try:
        return SweepStore(Store(home).home).paths(sweep_id).spec.is_file()
    except SpecError:
        return False


def get_sweep(sweep_id: str, *, home: str | os.PathLike | None = None) -> Sweep:
    """The sweep ``sweep_id``; raises ``SweepNotFound`` if there is none."""
    store = Store(home)
    SweepStore(store.home).existing(validate_run_id(sweep_id))
    return Sweep(sweep_id, store)
