"""``jupyter-trainer doctor``'s checks of the runs: ``runs.db`` and the run folders.

The run folders are the truth. One finding per problem:

- the index file is missing, not a file, or corrupt (fix: move it aside, rebuild it);
- a run folder has no index row, a row has no folder, or a row's status, end or failed
  rank disagrees with the run's ``state.json`` (fix: rewrite or drop the row);
- a run is lost: its state is unfinished and its supervisor is gone (fix: record ``lost``
  in its state, ended when the supervisor was last seen);
- a snapshot no longer hashes to its ``spec.code.hash`` (reported only: nothing can
  restore the code a run was started with);
- a run's ``state.json`` or ``spec.json`` is missing or unreadable (fix: rebuild the state
  from the index row, or move a run without a spec aside; see ``store.repair``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...capture.snapshot import hash_snapshot
from ...core.errors import RecordDamaged
from .. import ACTIVE, Store, load_spec, load_state, repair
from ..index_base import index_row
from ..owners import verified_owner
from .report import Finding, Report, add, check_index

# Index columns that must match the run's folder (``updated`` is the index's own).
_COMPARED = (
    "status",
    "ended",
    "failed_rank",
    "name",
    "target",
    "launcher",
    "nodes",
    "procs",
    "code_hash",
    "created",
    "started",
    "owner",
    "owner_uid",
    "hub_user",
)


def check_runs(store: Store, report: Report, *, hashes: bool) -> None:
    rows = _check_index(store, report)
    run_ids = store.run_ids_on_disk()
    report.runs = len(run_ids)
    for run_id in run_ids:
        _check_run(store, run_id, rows, report, hashes=hashes)
    if rows is not None:
        for run_id in sorted(set(rows) - set(run_ids)):
            if store.paths(run_id).spec.is_file():
                continue  # created after the folders were listed
            add(
                report,
                Finding(
                    "orphan-row", "in the index, but its folder is gone", run_id, "drop the row"
                ),
                lambda: store.index.delete(run_id),  # noqa: B023 (called at once)
                "row dropped",
            )


def _check_index(store: Store, report: Report) -> dict[str, dict[str, Any]] | None:
    """The index rows, or None when the index is broken and stays so."""
    if not check_index(store.index, len(store.run_ids_on_disk()), "index", report):
        return None
    return store.index_rows()


def _check_run(
    store: Store,
    run_id: str,
    rows: dict[str, dict[str, Any]] | None,
    report: Report,
    *,
    hashes: bool,
) -> None:
    paths = store.paths(run_id)
    try:
        spec = load_spec(paths, run_id)
        recorded = load_state(paths, run_id)
        status = recorded["status"]
    except RecordDamaged as exc:
        found = repair.damage(store, run_id, exc)
        finding = Finding("damaged", found.message, run_id, found.fix)
        if found.repair is None or found.done is None:
            report.findings.append(finding)
        else:
            add(report, finding, found.repair, found.done, paths.root)
        return
    except (OSError, ValueError, KeyError, TypeError) as exc:
        report.findings.append(
            Finding("unreadable", f"its spec or state cannot be read ({exc})", run_id)
        )
        return
    row = rows.get(run_id) if rows is not None else None
    # the row the folder calls for, from the records just read (not read a second time)
    expected: dict[str, Any] | None = index_row(
        run_id, spec, {**recorded, "owner": verified_owner(recorded.get("owner"), paths.root)}
    )
    if status in ACTIVE and store.read_state(run_id)["status"] == "lost":
        if add(
            report,
            Finding(
                "lost",
                _lost_message(store, paths, recorded),
                run_id,
                "record it as lost, ended when the supervisor was last seen",
            ),
            lambda: store.record_lost(run_id),
            "recorded as lost in state.json and the index",
        ):
            row, expected = store.index.row(run_id), None  # its state was rewritten
    if rows is not None:
        _check_row(store, run_id, row, report, expected)
    if hashes:
        _check_snapshot(paths.code, spec.code.hash, run_id, report)


def _check_row(
    store: Store,
    run_id: str,
    row: dict[str, Any] | None,
    report: Report,
    expected: dict[str, Any] | None = None,
) -> None:
    """``expected``: the row the folder calls for, when its records were just read."""
    expected = expected or store.folder_row(run_id)
    if expected is None:
        return
    if row is None:
        if store.index.row(run_id) is None:  # not a run made since the rows were read
            add(
                report,
                Finding(
                    "unindexed", "its folder has no index row", run_id, "index it from its folder"
                ),
                lambda: store.reindex(run_id),
                "indexed",
            )
        return
    differ = [c for c in _COMPARED if row.get(c) != expected.get(c)]
    if differ:
        said = ", ".join(f"{c} {row.get(c)!r} (state: {expected.get(c)!r})" for c in differ)
        add(
            report,
            Finding(
                "disagrees",
                f"the index disagrees with its state: {said}",
                run_id,
                "rewrite the row from its folder",
            ),
            lambda: store.reindex(run_id),
            "row rewritten from its folder",
        )


def _check_snapshot(code: Path, expected: str, run_id: str, report: Report) -> None:
    try:
        found = hash_snapshot(code) if code.is_dir() else None
    except OSError as exc:
        report.findings.append(Finding("snapshot", f"its snapshot cannot be read ({exc})", run_id))
        return
    if found is None:
        report.findings.append(Finding("snapshot", f"its snapshot {code} is missing", run_id))
    elif found != expected:
        report.findings.append(
            Finding(
                "snapshot",
                f"its snapshot changed after submission: code/ hashes to {found[:19]}…, "
                f"spec.code.hash is {expected[:19]}…; submit again from the source for a trusted "
                "record",
                run_id,
            )
        )


def _lost_message(store: Store, paths: Any, recorded: Mapping[str, Any]) -> str:
    seen = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(store.last_seen(paths, recorded)))
    sup = recorded.get("supervisor") or {}
    gone = (
        f"its supervisor (pid {sup['pid']} on {sup.get('host') or socket.gethostname()}) is gone"
        if sup.get("pid")
        else "no supervisor ever started for it"
    )
    return f"lost: its state says {recorded['status']}, but {gone}; last seen {seen}"
