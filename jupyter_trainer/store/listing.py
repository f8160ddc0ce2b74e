"""One page of the run list, read from the index a batch at a time.

The list shows each run's owner as the kernel has it (its folder's owner, ``verify_rows``)
and an unfinished run's status as its state has it (``lost`` when its supervisor is gone),
so every row listed costs a look at its folder. ``page`` reads the index newest first in
growing batches (``RunQueries.find_batches``) and stops as soon as the page is full: the
first page of a store of 100,000 runs looks at some 20 folders, not 100,000.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import RecordDamaged, RunNotFound, SpecError
from ..core.records import StateRecord
from .index_base import RunQueries
from .owners import Identity, verify_rows
from .records import ACTIVE, STATUSES, RunPaths


class RunStore(Protocol):
    """What ``list_runs`` needs of a ``Store``."""

    index: RunQueries

    def paths(self, run_id: str) -> RunPaths: ...

    def read_state(self, run_id: str) -> StateRecord: ...

    def run_ids_on_disk(self) -> list[str]: ...


def list_runs(
    store: RunStore,
    *,
    status: str | None = None,
    name: str | None = None,
    owner: Identity | None = None,
    limit: int = 50,
    offset: int = 0,
) -> list[dict[str, Any]]:
    """``Store.list_runs``, a page at a time (see ``page``)."""
    check_page_args(status, limit, offset)
    if not store.index.exists() and not store.run_ids_on_disk():
        return []  # a store never used: nothing to list, nothing to create

    def effective(run_id: str) -> dict[str, Any]:
        """The status, end and failed rank of an unfinished row, from the run's state."""
        try:
            state = store.read_state(run_id)
        except RecordDamaged as exc:
            return {"damaged": str(exc)}
        except (RunNotFound, OSError, ValueError, KeyError):
            return {}
        return {
            "status": state["status"],
            "ended": state.get("ended"),
            "failed_rank": state.get("failed_rank"),
            **({"stale": state["stale"]} if "stale" in state else {}),
        }

    return page(
        store.index,
        lambda row: store.paths(str(row["id"])).root,
        effective,
        status=status,
        name=name,
        owner=owner,
        limit=limit,
        offset=offset,
    )


def check_page_args(status: str | None, limit: int, offset: int) -> None:
    """``SpecError`` for a status, limit or offset that no list can have."""
    if status is not None and status not in STATUSES:
        raise SpecError(f"unknown status {status!r}; choose one of {', '.join(STATUSES)}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise SpecError(f"limit must be a whole number of at least 1, not {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise SpecError(f"offset must be a whole number of at least 0, not {offset!r}")


def page(
    index: RunQueries,
    folder_of: Callable[[dict[str, Any]], Path],
    effective: Callable[[str], dict[str, Any]],
    *,
    status: str | None,
    name: str | None,
    owner: Identity | None,
    limit: int,
    offset: int,
) -> list[dict[str, Any]]:
    """Rows ``offset`` to ``offset + limit`` of the runs, newest first, as
    ``Store.list_runs`` lists them: owners verified by ``folder_of(row)``, an unfinished
    run's status, end and failed rank from ``effective(run_id)``, and ``status``
    matching that effective status (an active status also reads the ``lost`` rows, one
    of which may still be running)."""
    check_page_args(status, limit, offset)
    if status in ("lost",) + ACTIVE:
        wanted: tuple[str, ...] = ACTIVE + ("lost",)
    else:
        wanted = (status,) if status else ()
    want = offset + limit
    kept: list[dict[str, Any]] = []
    for batch in index.find_batches(name, wanted, owner, want):
        for row in verify_rows(batch, folder_of, owner):
            if row["status"] in ACTIVE:
                row.update(effective(row["id"]))
            if status is None or row["status"] == status:
                kept.append(row)
        if len(kept) >= want:
            break
    return kept[offset:want]
