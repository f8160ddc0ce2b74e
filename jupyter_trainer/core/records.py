"""The records that cross a process boundary, as types: a run's ``state.json``, the target's
handle kept in it, and the event lines of ``events/rank-<r>.jsonl``.

Each is a ``TypedDict``, so a misspelled key in the code that writes or reads one is a type
error, not a silent ``None``. ``spec.json`` is ``RunSpec`` (``spec.py``); its file carries
``SPEC_SCHEMA`` beside the spec's fields.

Schema versions. A record written from now on carries ``"schema": N``; one written before
has no such key and reads as version 0, which differs from version 1 only by that key. A
reader refuses a record of a version newer than it knows (``newer_than_known``), with the
fix in the message, rather than misreading it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict, TypeGuard, cast, get_args

STATE_SCHEMA = 1
SPEC_SCHEMA = 1
SCHEMA_KEY = "schema"

Status = Literal[
    "created",
    "preparing",
    "queued",
    "running",
    "finalizing",
    "completed",
    "failed",
    "canceled",
    "lost",
]


class Stage(TypedDict, total=False):
    """When the run entered one status and, once it moved on, when it left it."""

    start: float
    end: float


class PidRecord(TypedDict):
    """A process as its own record of itself (``supervisor.pid``, the state's ``supervisor``):
    the start time in clock ticks tells a reused pid apart."""

    pid: int
    host: str
    start_ticks: int | None


class Handle(TypedDict, total=False):
    """What a target's ``start`` (or ``reserve``) returns, kept in the state so that another
    process can follow or stop the run. Each kind of target fills the keys it needs."""

    pid: int
    pgid: int
    start_ticks: int | None
    host: str
    hosts: list[str]
    nodes: list[Any]
    job_id: str
    hold_job: str
    script: str
    name: str
    api: str
    labels: dict[str, str]
    objects: list[Any]
    waiting: bool
    mpi: Any
    error: str


class LauncherRecord(Handle, total=False):
    """The state's ``launcher``: the handle, plus the launcher's command line, its exit code
    once it ended, and the warm pool's record when the ranks were forked from one."""

    argv: list[str]
    exit_code: int | None
    hot: dict[str, Any]
    started: float


class Failure(TypedDict):
    """Which process failed first, and how (``attribution.Death``)."""

    rank: int | None
    how: str
    at: float | None
    signal: str | None


class StateRecord(TypedDict, total=False):
    """``state.json``: written only by the run's supervisor (and by ``doctor --fix``).

    ``run_id``, ``status`` and ``created`` are in every state; the rest appear as the run
    goes on. ``schema`` is missing in a state written before states had one (version 0).
    """

    schema: int
    run_id: str
    status: Status
    created: float
    updated: float
    ended: float
    stages: dict[str, Stage]
    owner: dict[str, Any]  # {"user", "uid", "hub_user"} (store/owners.py)
    supervisor: PidRecord
    supervisor_last_seen: float
    environment: dict[str, Any]
    backend: str
    python: str | None
    launcher: LauncherRecord
    queue: dict[str, Any]
    staging: dict[str, Any]
    attempts: list[dict[str, Any]]
    preemptions: list[dict[str, Any]]  # one per preempted attempt (supervisor/preemption.py)
    non_finite: dict[str, dict[str, Any]]
    stalled: list[dict[str, Any]]
    # set by readers, never written: a supervisor that does not answer (store/liveness.py)
    stale: dict[str, Any]
    debugging: list[dict[str, Any]]  # ranks waiting in a debugger (rankside/debug/debugger.py)
    stacks: dict[str, str]
    teardown: dict[str, Any]
    rank_exit_codes: dict[str, int | None]
    scheduler: dict[str, Any]
    snapshot: dict[str, Any]
    workdirs: dict[str, Any]
    failure: Failure
    failed_rank: int
    error: str
    traceback: str | None
    reason: str
    mlflow: dict[str, Any]
    storage: dict[str, Any]  # the uploads to the run's storage (supervisor/storage_upload.py)
    recorded_status: str
    rebuilt: dict[str, Any]
    damaged: str


class MetricEvent(TypedDict):
    """``jt.log(step, **values)``: one line of ``events/rank-<r>.jsonl``. A non-finite value
    is the string "nan", "inf" or "-inf"; a value that is no number, its ``str()``."""

    kind: Literal["metric"]
    t: float
    step: int | None
    values: dict[str, float | int | str]


class ProgressEvent(TypedDict):
    """``jt.progress(done, total)``."""

    kind: Literal["progress"]
    t: float
    done: float | int | str
    total: float | int | str | None


class TagEvent(TypedDict):
    """``jt.tag(**tags)``: tags set on the run, as strings; the last value of a key wins."""

    kind: Literal["tag"]
    t: float
    values: dict[str, str]


class ErrorEvent(TypedDict):
    """An event that could not be written as itself (a value that would not encode)."""

    kind: Literal["error"]
    t: float
    error: str


Event = MetricEvent | ProgressEvent | TagEvent | ErrorEvent


STATUSES: tuple[str, ...] = get_args(Status)


def launcher_record(handle: Mapping[str, Any]) -> LauncherRecord:
    """A target's handle as the state's ``launcher`` record. Targets return their handles as
    plain JSON objects (``targets.base.Handle``); this is the one place the state takes one
    in, trusting the target for its keys."""
    return cast(LauncherRecord, dict(handle))


def state_problem(data: object) -> str | None:
    """What keeps ``data`` (read from a ``state.json``) from being a run's state, or None."""
    if not isinstance(data, dict):
        return "does not hold a JSON object"
    if data.get("status") not in STATUSES:
        return f"holds no known status ({data.get('status')!r})"
    created = data.get("created")
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        return "holds no creation time"
    return None


def is_state(data: object) -> TypeGuard[StateRecord]:
    """``data`` holds what every state has: a known status and a creation time."""
    return state_problem(data) is None


def schema_of(record: dict[str, Any]) -> int:
    """The schema version a record was written with; 0 for one written before versions."""
    version = record.get(SCHEMA_KEY, 0)
    return version if isinstance(version, int) and not isinstance(version, bool) else -1


def newer_than_known(record: dict[str, Any], known: int) -> str | None:
    """What is wrong with a record whose schema this code cannot read, or None."""
    version = schema_of(record)
    if version < 0:
        return f"holds a schema version that is not a whole number ({record.get(SCHEMA_KEY)!r})"
    if version > known:
        return (
            f"was written by a newer jupyter_trainer (schema {version}; this one reads up to "
            f"{known}); upgrade jupyter_trainer to read it"
        )
    return None
