"""At a run's end: whether every copy of its snapshot is still as captured, and what becomes
of the nodes' working directories (removed when the run completed or was canceled, kept for
a look when it failed). Recorded in the run's final state as ``snapshot`` and ``workdirs``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.records import StateRecord
from ..core.spec import RunSpec
from ..store import RunPaths
from ..targets import Target
from ..targets.base import remove_workdirs


def settle_code(
    status: str,
    spec: RunSpec,
    paths: RunPaths,
    target: Target | None,
    handle: dict[str, Any] | None,
    log: Callable[[str], None],
) -> StateRecord:
    """The ``snapshot`` and ``workdirs`` fields of a run that ends ``status``. Never raises:
    the run must still reach its terminal state."""
    fields: StateRecord = {}
    try:
        snapshot = fields["snapshot"] = check_snapshot(spec, paths, target, handle, log)
        if not snapshot["intact"]:
            log(f"the snapshot changed during the run: {snapshot['changed']}")
        if status == "failed":
            fields["workdirs"] = {"kept": True}
        elif target is not None:
            fields["workdirs"] = {"kept": False, **target.discard_workdirs(handle, str(paths.root))}
        else:
            fields["workdirs"] = {"kept": False, **remove_workdirs(str(paths.root))}
    except Exception as exc:
        log(f"checking the snapshot or the working directories failed: {exc!r}")
        fields.setdefault("workdirs", {"error": repr(exc)})
    return fields


def check_snapshot(
    spec: RunSpec,
    paths: RunPaths,
    target: Target | None,
    handle: dict[str, Any] | None,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """The snapshot's content hash, here and on every node that ran from a copy of it."""
    from ..capture.snapshot import hash_snapshot  # here, not at start-up: it pulls pathspec

    expected = spec.code.hash
    try:
        found: dict[str, str | None] = {"code/": hash_snapshot(paths.code)}
    except OSError as exc:
        log(f"cannot hash the snapshot: {exc}")
        found = {"code/": None}
    if target is not None and handle is not None:
        found.update(target.snapshot_hashes(handle))
    changed = {where: h for where, h in found.items() if h is not None and h != expected}
    record: dict[str, Any] = {"hash": expected, "intact": not changed}
    if changed:
        record["changed"] = changed
    unverified = sorted(where for where, h in found.items() if h is None)
    if unverified:
        record["unverified"] = unverified
    return record
