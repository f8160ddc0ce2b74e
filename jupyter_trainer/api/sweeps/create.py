"""Create a sweep: capture its template run, check it as a run would be checked, write the
sweep folder and start its driver. On any error nothing is left in the store."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ...core.errors import SpecError
from ...core.spec import RunSpec
from ...store import Store
from ...store.sweeps import SweepStore
from ...targets import Target
from ..start import write_checked
from .spec import SweepSpec


def placeholders(space: Mapping[str, str]) -> dict[str, Any]:
    """The template's value of each swept param: none, every trial gives its own."""
    return dict.fromkeys(space)


def check_cell_reads(
    code: str, space: Mapping[str, str], namespace: Mapping[str, Any], first_line: int = 1
) -> None:
    """Each swept key must be a name the cell reads (or a notebook variable its helpers may
    read): a trial's value replaces that variable. ``first_line`` numbers a syntax error's
    line as the editor does."""
    from ...capture import free_names

    read = set(free_names(code, first_line))
    unread = [key for key in space if key not in read and key not in namespace]
    if unread:
        raise SpecError(
            f"the cell does not read {', '.join(map(repr, unread))}: each --sweep KEY replaces a "
            "notebook variable of that name in the cell, so use the variable in the cell (or "
            "sweep a name it does use)"
        )


def create_sweep(
    store: Store, target: Target, write: Callable[[Path], RunSpec], spec: SweepSpec
) -> str:
    """Write the template run with ``write``, check it and the target, make the sweep and
    start its driver; return the sweep's id."""
    from .driver_start import start_driver

    sweeps = SweepStore(store.home)
    store.check_writable()
    staging = store.staging_dir()
    sweep_id = None
    try:
        template = write_checked(write, staging, target, store.home)
        sweep_id = sweeps.create(spec.name, spec.to_dict(), template, staging)
        start_driver(str(store.home), sweep_id)
    except BaseException:
        if sweep_id is not None:
            from ...store.folders import rmtree

            rmtree(sweeps.paths(sweep_id).root)
        else:
            store.discard_staging(staging)
        raise
    return sweep_id
