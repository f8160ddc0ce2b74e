"""The live Python stacks of a run's ranks, for ``jupyter-trainer stack`` and ``%train stack``.

The ranks' records say where each rank runs (``host``, ``pid``); the run's target reads the
stacks there with ``py-spy dump`` (see ``Target.stacks``).

``py-spy`` runs as the caller and reads another process's memory, so only the run's owner
(by the kernel's record of who owns its folder) and the workspace's admins may ask. And the
program is never one a record someone else wrote chose: the py-spy beside the ranks'
interpreter (which the run's ``state.json`` names) is used only when that state was written
by a user the caller trusts (``core/trust.py``) and, where this host sees it, that py-spy
and every folder above it pass the same check; else the node's own ``py-spy`` on its PATH.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from ..core.errors import RunStateError, SpecError, Untrusted
from ..core.trust import Trust
from ..store import TERMINAL, Store
from ..store.attempts import current_records
from ..supervisor.stack_text import tidy
from ..targets import get_target


def run_stacks(store: Store, run_id: str, rank: int | None = None) -> dict[int, str]:
    """``{rank: stack text}`` of every live rank of ``run_id`` (or of ``rank`` only)."""
    paths = store.existing(run_id)
    state = store.read_state(run_id)
    store.check_owner(
        run_id,
        state,
        None,
        "read the stacks of",
        "nothing was read (py-spy reads the ranks' memory, which the kernel allows their "
        "owner: ask them to run `jupyter-trainer stack RUN`)",
    )
    if state.get("status") in TERMINAL:
        saved = state.get("stacks") or {}
        hint = (
            " (the stacks saved when it was ended for a stall are in its state: "
            "`jupyter-trainer show RUN --json`)"
            if saved
            else ""
        )
        raise RunStateError(f"run {run_id} is {state['status']}: it has no live ranks{hint}")
    spec = store.read_spec(run_id)
    records = current_records(paths.ranks)
    if rank is not None:
        if rank not in records:
            known = ", ".join(map(str, sorted(records))) or "none yet"
            raise SpecError(f"run {run_id} has no rank {rank} (its ranks: {known})")
        records = {rank: records[rank]}
    if not records:
        raise RunStateError(
            f"run {run_id} has no rank running yet ({state.get('status')}); "
            "try again once it is running"
        )
    target = get_target(spec.target.name, store.home)
    python = trusted_python(store.settings.trust(), paths.state, state.get("python"))
    handle: dict[str, Any] = {**(state.get("launcher") or {}), "python": python}
    return {rank: tidy(text) for rank, text in sorted(target.stacks(handle, records).items())}


def trusted_python(trust: Trust, state_file: Path, python: object) -> str | None:
    """``python`` (the ranks' interpreter, as the run's ``state_file`` names it), whose
    folder's ``py-spy`` may run as this user: None unless ``state_file`` was written by a
    user ``trust`` trusts and, where this host sees that py-spy, it and every folder above
    it are theirs and written by nobody else."""
    if not isinstance(python, str) or not os.path.isabs(python):
        return None
    try:
        if trust.check(state_file, "the run's state") is None:
            return None
    except Untrusted:
        return None
    program = Path(os.path.dirname(python)) / "py-spy"
    try:
        found = os.lstat(program)
    except FileNotFoundError:
        return python  # on the run's nodes only: the trusted record names it
    except OSError:
        return None
    if trust.refusal(found, program, "py-spy") is not None:
        return None
    return python if _folders_trusted(trust, program.parent) else None


def _folders_trusted(trust: Trust, folder: Path) -> bool:
    """Whether ``folder`` and each one above it are no link, are owned by a user ``trust``
    trusts, and can be written by nobody else (unless sticky, as ``/tmp`` is)."""
    here = Path(os.path.abspath(folder))
    for place in (here, *here.parents):
        try:
            found = os.lstat(place)
        except OSError:
            return False
        if stat.S_ISLNK(found.st_mode) or not trust.trusts(found.st_uid):
            return False
        others_write = stat.S_IMODE(found.st_mode) & (stat.S_IWGRP | stat.S_IWOTH)
        if others_write and not found.st_mode & stat.S_ISVTX:
            return False
    return True
