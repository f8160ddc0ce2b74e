"""A run's record files: where each lives, how they are written, and how they are read.

``spec.json`` and ``state.json`` are replaced atomically, so a reader sees the old file or
the new one, never a torn one. One that is missing or cannot be read all the same (a disk
error, a hand edit, a truncated copy) is *damaged*: reading it raises ``RecordDamaged``,
which names the file, what is wrong with it and what ``jupyter-trainer doctor --fix`` does
about it, never a bare ``KeyError`` or ``JSONDecodeError``. Every reader goes through
``load_spec`` and ``load_state``; each front end shows the error as it shows any other.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core import bounded_json
from ..core.errors import RecordDamaged, RunNotFound, SpecError, StoreError
from ..core.files import write_atomic
from ..core.records import (
    SCHEMA_KEY,
    SPEC_SCHEMA,
    STATE_SCHEMA,
    StateRecord,
    is_state,
    newer_than_known,
    state_problem,
)
from ..core.spec import RunSpec

ACTIVE = ("created", "preparing", "queued", "running", "finalizing")
TERMINAL = ("completed", "failed", "canceled", "lost")
STATUSES = ACTIVE + TERMINAL
FIX = "jupyter-trainer doctor --fix"
DAMAGED_DIR = "damaged"  # <home>/damaged/<run-id>: runs set aside by doctor --fix


def write_json_atomic(path: Path, data: Any) -> None:
    """Write a record to ``path`` so that readers see the old or the new file, never a torn
    one (``rankside.host.atomic``). Owner-only, but readable by the group in a folder of a shared
    workspace (setgid: ``modes``)."""
    try:
        shared = bool(os.stat(path.parent).st_mode & stat.S_ISGID)
    except OSError:
        shared = False
    write_atomic(path, json_text(data), mode=0o640 if shared else 0o600)


def json_text(data: Any) -> str:
    """A record as its file holds it."""
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def read_json(path: Path) -> Any:
    """The JSON in ``path``; ``ValueError`` when it is not JSON, or ``TooDeep`` (one) when
    it nests deeper than any record does: anyone in a workspace can make a run folder, so
    its files are read as another user's."""
    with open(path, encoding="utf-8") as fh:
        return bounded_json.loads(fh.read())


def read_json_object(path: Path) -> dict[str, Any]:
    """``read_json`` of a file that must hold a JSON object; ``ValueError`` if it holds
    something else (as for a file that is not JSON at all)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds {type(data).__name__}, not a JSON object")
    return data


@dataclass(frozen=True)
class RunPaths:
    """Where each piece of one run lives."""

    root: Path

    @property
    def spec(self) -> Path:
        return self.root / "spec.json"

    @property
    def state(self) -> Path:
        return self.root / "state.json"

    @property
    def cancel_request(self) -> Path:
        return self.root / "cancel.request"

    @property
    def supervisor_log(self) -> Path:
        return self.root / "supervisor.log"

    @property
    def heartbeat(self) -> Path:
        return self.root / "supervisor.alive"

    @property
    def supervisor(self) -> Path:
        return self.root / "supervisor.pid"

    @property
    def code(self) -> Path:
        return self.root / "code"

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def ranks(self) -> Path:
        return self.root / "ranks"

    @property
    def outputs(self) -> Path:
        return self.root / "outputs"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def session(self) -> Path:
        return self.root / "session"

    def events_file(self, rank: int) -> Path:
        return self.events / f"rank-{rank}.jsonl"

    def log_file(self, rank: int) -> Path:
        return self.logs / f"rank-{rank}.log"

    def rank_file(self, rank: int) -> Path:
        return self.ranks / f"rank-{rank}.json"


def spec_record(spec: RunSpec) -> dict[str, Any]:
    """What ``spec.json`` holds: the spec's fields and the schema version."""
    return {SCHEMA_KEY: SPEC_SCHEMA, **spec.to_dict()}


def new_state(run_id: str, created: float, owner: dict[str, Any]) -> StateRecord:
    """The state of a run just created by ``owner`` (``owners.Identity.record()``)."""
    return {
        "schema": STATE_SCHEMA,
        "run_id": run_id,
        "status": "created",
        "created": created,
        "owner": owner,
        "stages": {},
    }


def _check_schema(path: Path, run_id: str, data: Any, known: int) -> None:
    """Refuse a record of a schema newer than this code reads (not damaged: the fix is an
    upgrade, and ``doctor --fix`` must not touch it)."""
    problem = newer_than_known(data, known) if isinstance(data, dict) else None
    if problem is not None:
        raise StoreError(f"run {run_id}: {path} {problem}")


def load_spec(paths: RunPaths, run_id: str) -> RunSpec:
    """The run's spec; ``RecordDamaged`` if ``spec.json`` cannot be read as one."""
    data, problem = _load(paths, paths.spec, run_id)
    if problem is None:
        _check_schema(paths.spec, run_id, data, SPEC_SCHEMA)
        try:
            return RunSpec.from_dict(data)
        except (SpecError, ValueError, KeyError, TypeError, AttributeError) as exc:
            problem = f"does not hold a run spec ({exc})"
    home = paths.root.parent.parent
    raise RecordDamaged(
        f"run {run_id}: its spec {paths.spec} {problem}. A run's spec cannot be rebuilt once "
        f"its supervisor has ended (a running one restores it); `{FIX}` moves the run aside "
        f"to {home / DAMAGED_DIR / run_id}, with its logs and outputs",
        run_id=run_id,
        path=str(paths.spec),
        problem=problem,
    )


def load_state(paths: RunPaths, run_id: str) -> StateRecord:
    """The run's state as recorded; ``RecordDamaged`` if ``state.json`` cannot be read as
    one (it is then missing, not JSON, or without a status and a creation time). A state
    written before states had a schema version reads as it is."""
    state, problem = _load(paths, paths.state, run_id)
    if problem is None:
        _check_schema(paths.state, run_id, state, STATE_SCHEMA)
        if is_state(state):
            return state
        problem = state_problem(state) or "is not a run's state"
    raise state_damaged(paths, run_id, problem)


def state_damaged(paths: RunPaths, run_id: str, problem: str) -> RecordDamaged:
    return RecordDamaged(
        f"run {run_id}: its state {paths.state} {problem}. While its supervisor runs, the "
        f"supervisor writes it again within seconds; otherwise `{FIX}` rebuilds it from the "
        "run's index row",
        run_id=run_id,
        path=str(paths.state),
        problem=problem,
    )


def _load(paths: RunPaths, path: Path, run_id: str) -> tuple[Any, str | None]:
    """The JSON in ``path``, or what is wrong with it."""
    try:
        return read_json(path), None
    except FileNotFoundError:
        if not paths.root.is_dir():  # the run was deleted meanwhile
            raise RunNotFound(f"no run {run_id!r} in {paths.root.parent.parent}") from None
        return None, "is missing"
    except bounded_json.TooDeep as exc:
        return None, str(exc)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        return None, f"is not valid JSON ({exc})"
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or exc})"


def read_supervisor(paths: RunPaths) -> dict[str, Any] | None:
    """The supervisor's own record of itself (pid, host, start ticks), written when it
    starts, beside its state: how a reader finds it when the state is damaged."""
    try:
        record = read_json(paths.supervisor)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("pid") else None
