"""What every REST handler shares: the base handler (JSON answers, core errors mapped to
HTTP statuses in one place, ``status_of``), the argument checks, the API's prefix and
limits, and the catch-all 404.

Every verb is ``@tornado.web.authenticated``. Run ids are validated by the store before any
path is built from them. Every error answer is JSON with ``error`` (and ``message``, as
jupyter_server's own errors have). Numbers in a query are ASCII digits only, in a documented
range: byte offsets 0 to 2**62, ranks 0 to ``MAX_RANK``, ``limit`` 1 to 1000; anything else
answers 400 naming the argument and its range.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler

from ...core.errors import (
    DiskFull,
    InvalidRunId,
    ModelNotFound,
    NotOwner,
    RecordDamaged,
    RunNotFound,
    RunStateError,
    SpecError,
    StoreError,
    TrainerError,
)
from ...core.spec import MAX_PROCS
from ...store import Store
from ...store.owners import HUB_USER_ENV, Identity

API_PREFIX = "jupyter-trainer/api"
RUN = r"(?P<run_id>[^/]+)"
MAX_READ_BYTES = 4 << 20
MAX_OFFSET = 1 << 62
MAX_RANK = 1024 * MAX_PROCS - 1  # the largest world size a LaunchSpec allows, less one
MAX_NAME_FILTER = 100  # a run name is at most 100 characters
ALL_RUNS = 1 << 30
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: \d and int() take other scripts' digits too
STREAM_POLL_S = 0.25


def status_of(exc: TrainerError) -> int:
    if isinstance(exc, (RunNotFound, ModelNotFound)):
        return 404
    if isinstance(exc, (RunStateError, RecordDamaged)):
        # A damaged record is the run's state, not the request's fault nor the server's,
        # and retrying will not help: 409 with the message, which says what repairs it.
        return 409
    if isinstance(exc, NotOwner):
        return 403
    if isinstance(exc, (SpecError, InvalidRunId)):
        return 400
    if isinstance(exc, DiskFull):
        return 507
    if isinstance(exc, StoreError):  # the run store cannot be read or written: not the request
        return 503
    return 500


def _in_range(raw: str, low: int, high: int) -> bool:
    return bool(
        _DIGITS.fullmatch(raw)
        and len(raw.lstrip("0")) <= len(str(high))
        and low <= int(raw) <= high
    )


def parse_whole(name: str, raw: str, low: int, high: int) -> int:
    """``raw`` as a whole number from ``low`` to ``high``, written in ASCII digits only."""
    if not _in_range(raw, low, high):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise SpecError(
            f"query argument {name}={shown!r} must be a whole number from {low} "
            f"to {high}, in ASCII digits"
        )
    return int(raw)


class BaseHandler(APIHandler):
    """Maps the core's errors to JSON error responses."""

    @property
    def store(self) -> Store:
        return Store()

    def actor(self) -> Identity:
        return actor_of(self.current_user)

    def owner_arg(self) -> Identity | None:
        """``owner=mine``: this user's (``actor``); left out or empty: everyone's."""
        raw = self.get_query_argument("owner", None) or None
        if raw is None:
            return None
        if raw != "mine":
            raise SpecError(
                f"query argument owner={raw[:40]!r}: give owner=mine for your own runs, or "
                "leave it out for everyone's"
            )
        return self.actor()

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def write_failure(self, exc: TrainerError) -> None:
        self.write_json(
            {"error": str(exc), "message": str(exc), "type": type(exc).__name__}, status_of(exc)
        )

    def int_arg(self, name: str, default: int, low: int = 0, high: int = MAX_OFFSET) -> int:
        raw = self.get_query_argument(name, None, strip=False)
        return default if raw is None else parse_whole(name, raw, low, high)

    def list_args(self, kind: str) -> tuple[int, int, str | None, str | None]:
        """A list's ``limit``, ``offset`` and its ``status`` and ``name`` filters (None if
        not given); ``kind`` (run, sweep) names what is listed in an error."""
        limit = self.int_arg("limit", 50, 1, 1000)
        offset = self.int_arg("offset", 0)
        status = self.get_query_argument("status", None) or None
        name = self.get_query_argument("name", None) or None
        if name is not None and len(name) > MAX_NAME_FILTER:
            raise SpecError(
                f"query argument name is {len(name)} characters long; a {kind} "
                f"name has at most {MAX_NAME_FILTER}, so give at most that many"
            )
        return limit, offset, status, name

    def offsets_arg(self, name: str) -> dict[int, int]:
        """``name=RANK:OFFSET,RANK:OFFSET`` as {rank: offset}; absent or empty: {}."""
        raw = self.get_query_argument(name, "", strip=False)
        offsets: dict[int, int] = {}
        for pair in filter(None, raw.split(",")):
            rank, sep, offset = pair.partition(":")
            if not (sep and _in_range(rank, 0, MAX_RANK) and _in_range(offset, 0, MAX_OFFSET)):
                shown = raw if len(raw) <= 80 else raw[:80] + "..."
                raise SpecError(
                    f"query argument {name}={shown!r} must be rank:offset pairs "
                    f"separated by commas, like {name}=0:1234,1:88 (the offsets "
                    f"of the last messages received), ranks from 0 to {MAX_RANK} "
                    f"and offsets from 0 to {MAX_OFFSET}, in ASCII digits"
                )
            if int(rank) in offsets:
                raise SpecError(f"query argument {name} names rank {int(rank)} twice")
            offsets[int(rank)] = int(offset)
        return offsets

    async def _execute_guarded(self, coro) -> None:
        try:
            await coro
        except TrainerError as exc:
            self.write_failure(exc)


def request_cancel(store: Store, run_id: str, actor: Identity) -> str:
    """Ask the run's supervisor to cancel it; its status now. A run that ended refuses, and
    so does another user's (``NotOwner``: 403) unless ``actor`` is an admin."""
    return store.cancel(run_id, reason="canceled from JupyterLab", actor=actor)


def actor_of(user: Any) -> Identity:
    """Who acts through a request: the server's Unix user and, under JupyterHub, the Hub
    user the request was authenticated as."""
    hub = getattr(user, "username", None) if os.environ.get(HUB_USER_ENV) else None
    return Identity.current(hub_user=hub)


class NotFoundHandler(BaseHandler):
    """Any other path under the API: a JSON 404 that lists the routes."""

    ROUTES = (
        "version",
        "runs",
        "runs/RUN",
        "runs/RUN/events",
        "runs/RUN/logs",
        "runs/RUN/stream",
        "runs/RUN/cancel",
        "runs/RUN/view (WebSocket)",
        "sweeps",
        "sweeps/SWEEP",
        "sweeps/SWEEP/cancel",
        "models",
        "models/MODEL",
        "models/MODEL/VERSION",
    )

    @tornado.web.authenticated
    async def get(self, *_args: str) -> None:
        self._not_found()

    @tornado.web.authenticated
    async def post(self, *_args: str) -> None:
        self._not_found()

    @tornado.web.authenticated
    async def delete(self, *_args: str) -> None:
        self._not_found()

    def _not_found(self) -> None:
        message = (
            f"no such route {self.request.path!r}; the routes under /{API_PREFIX}/ are "
            + ", ".join(self.ROUTES)
        )
        self.write_json({"error": message, "message": message, "type": "NotFound"}, 404)
