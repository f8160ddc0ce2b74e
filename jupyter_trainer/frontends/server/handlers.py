"""REST handlers: list runs, read one run, read events and logs incrementally, stream, cancel
(sweeps have theirs in ``sweeps.py``, the model registry in ``models.py``).

Every verb is ``@tornado.web.authenticated``. Run ids are validated by the store before any
path is built from them. Core errors map to statuses in one place (``_status_of``), and every
error answer is JSON with ``error`` (and ``message``, as jupyter_server's own errors have).

Numbers in a query are ASCII digits only, in a documented range: byte offsets 0 to 2**62,
ranks 0 to ``MAX_RANK``, ``limit`` 1 to 1000; anything else answers 400 naming the argument
and its range. An offset past the end of a file reads nothing.
"""

from __future__ import annotations

import asyncio
import errno
import json
import re
import time
from pathlib import Path
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.iostream import StreamClosedError

from ...core.version import __version__
from ...core.errors import (DiskFull, InvalidRunId, ModelNotFound, NotOwner, RecordDamaged,
                            RunNotFound, RunStateError, SpecError, StoreError, TrainerError)
from ..views.health import list_fields
from ...core.spec import MAX_PROCS
from ...store import TERMINAL, Store, read_complete_lines

API_PREFIX = "jupyter-trainer/api"
_RUN = r"(?P<run_id>[^/]+)"
MAX_READ_BYTES = 4 << 20
MAX_OFFSET = 1 << 62
MAX_RANK = 1024 * MAX_PROCS - 1  # the largest world size a LaunchSpec allows, less one
MAX_NAME_FILTER = 100  # a run name is at most 100 characters
ALL_RUNS = 1 << 30
_DIGITS = re.compile(r"[0-9]+")  # ASCII only: \d and int() take other scripts' digits too
STREAM_POLL_S = 0.25


def _status_of(exc: TrainerError) -> int:
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
    return bool(_DIGITS.fullmatch(raw) and len(raw.lstrip("0")) <= len(str(high))
                and low <= int(raw) <= high)


def parse_whole(name: str, raw: str, low: int, high: int) -> int:
    """``raw`` as a whole number from ``low`` to ``high``, written in ASCII digits only."""
    if not _in_range(raw, low, high):
        shown = raw if len(raw) <= 40 else raw[:40] + "..."
        raise SpecError(f"query argument {name}={shown!r} must be a whole number from {low} "
                        f"to {high}, in ASCII digits")
    return int(raw)


def _read_lines(path: Path, offset: int) -> tuple[bytes, int]:
    """Complete lines of ``path`` from ``offset``. An offset past what the file system allows
    (``seek`` fails with EINVAL) is past the end of the file: nothing to read."""
    try:
        return read_complete_lines(path, offset, MAX_READ_BYTES)
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return b"", offset


def read_events(store: Store, run_id: str, rank: int, offset: int) -> tuple[list[Any], int]:
    """Events of ``rank`` from ``offset``. The offset comes from the client and may point into
    the middle of a line, so any line that does not decode is skipped, whatever ``json``
    raises for it (a 5,000-digit number, brackets nested too deep)."""
    data, new_offset = _read_lines(store.existing(run_id).events_file(rank), offset)
    events = []
    for line in data.splitlines():
        try:
            events.append(json.loads(line))
        except (ValueError, RecursionError):
            continue
    return events, new_offset


def read_log(store: Store, run_id: str, rank: int, offset: int) -> tuple[str, int]:
    data, new_offset = _read_lines(store.existing(run_id).log_file(rank), offset)
    return data.decode(errors="replace"), new_offset


class BaseHandler(APIHandler):
    """Maps the core's errors to JSON error responses."""

    @property
    def store(self) -> Store:
        return Store()

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def write_failure(self, exc: TrainerError) -> None:
        self.write_json({"error": str(exc), "message": str(exc), "type": type(exc).__name__},
                        _status_of(exc))

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
            raise SpecError(f"query argument name is {len(name)} characters long; a {kind} "
                            f"name has at most {MAX_NAME_FILTER}, so give at most that many")
        return limit, offset, status, name

    def offsets_arg(self, name: str) -> dict[int, int]:
        """``name=RANK:OFFSET,RANK:OFFSET`` as {rank: offset}; absent or empty: {}."""
        raw = self.get_query_argument(name, "", strip=False)
        offsets: dict[int, int] = {}
        for pair in filter(None, raw.split(",")):
            rank, sep, offset = pair.partition(":")
            if not (sep and _in_range(rank, 0, MAX_RANK) and _in_range(offset, 0, MAX_OFFSET)):
                shown = raw if len(raw) <= 80 else raw[:80] + "..."
                raise SpecError(f"query argument {name}={shown!r} must be rank:offset pairs "
                                f"separated by commas, like {name}=0:1234,1:88 (the offsets "
                                f"of the last messages received), ranks from 0 to {MAX_RANK} "
                                f"and offsets from 0 to {MAX_OFFSET}, in ASCII digits")
            if int(rank) in offsets:
                raise SpecError(f"query argument {name} names rank {int(rank)} twice")
            offsets[int(rank)] = int(offset)
        return offsets

    async def _execute_guarded(self, coro) -> None:
        try:
            await coro
        except TrainerError as exc:
            self.write_failure(exc)


class VersionHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        self.write_json({"version": __version__, "api": 1})


class RunsHandler(BaseHandler):
    """Runs, newest first; each row names its sweep and trial number (null if none), and
    ``trials=0`` leaves out the runs that are trials of a sweep."""

    @tornado.web.authenticated
    async def get(self) -> None:
        await self._execute_guarded(self._get())

    async def _get(self) -> None:
        from .sweeps import trial_runs

        limit, offset, status, name = self.list_args("run")
        with_trials = self.int_arg("trials", 1, 0, 1)
        store = self.store
        if with_trials:
            rows = store.list_runs(status=status, name=name, limit=limit + 1, offset=offset)
            trials = trial_runs(store, rows)
        else:  # the trials are left to their sweeps' rows, before the page is cut
            rows = store.list_runs(status=status, name=name, limit=ALL_RUNS)
            trials = trial_runs(store, rows)
            rows = [r for r in rows if r["id"] not in trials][offset:offset + limit + 1]
        now = time.time()
        for row in rows[:limit]:
            row["sweep"], row["trial"] = trials.get(row["id"], (None, None))
            row["progress"] = store.latest_progress(row["id"])
            row.update(health_of(store, row["id"], now))
        self.write_json({"runs": rows[:limit], "limit": limit, "offset": offset,
                         "more": len(rows) > limit})


def health_of(store: Store, run_id: str, now: float) -> dict[str, Any]:
    """A list row's latest attempt, allowed restarts and stalled ranks; the spec is read
    only for a run that has attempts. A run removed meanwhile has none of them."""
    try:
        state = store.read_state(run_id)
        spec = store.read_spec(run_id) if state.get("attempts") else None
    except (TrainerError, OSError, ValueError):
        state, spec = {}, None
    return list_fields(state, spec, now)


class RunHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        await self._execute_guarded(self._get(run_id))

    async def _get(self, run_id: str) -> None:
        store = self.store
        spec = store.read_spec(run_id)
        self.write_json({"id": run_id, "spec": spec.to_dict(), "state": store.read_state(run_id),
                         "ranks": store.ranks(run_id)})


class RankReadHandler(BaseHandler):
    """One rank's events (``field="events"``) or log text (``field="text"``), read from a
    byte offset; the answer's ``offset`` is where the next read starts."""

    def initialize(self, field: str) -> None:
        self.field = field

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        await self._execute_guarded(self._get(run_id))

    async def _get(self, run_id: str) -> None:
        rank = self.int_arg("rank", 0, 0, MAX_RANK)
        offset = self.int_arg("offset", 0)
        read = read_events if self.field == "events" else read_log
        data, new_offset = read(self.store, run_id, rank, offset)
        self.write_json({"rank": rank, self.field: data, "offset": new_offset})


class CancelHandler(BaseHandler):
    @tornado.web.authenticated
    async def post(self, run_id: str) -> None:
        await self._execute_guarded(self._post(run_id))

    async def _post(self, run_id: str) -> None:
        status = request_cancel(self.store, run_id)
        self.write_json({"id": run_id, "status": status, "cancel_requested": True}, 202)


def request_cancel(store: Store, run_id: str) -> str:
    """Ask the run's supervisor to cancel it; its status now. A run that ended refuses."""
    return store.cancel(run_id, reason="canceled from JupyterLab")


class StreamHandler(BaseHandler):
    """Server-sent events: ``state`` on every change, ``events`` and ``log`` as they arrive,
    then ``end`` once the run is over and everything was sent.

    ``?events=0:1234,1:88&logs=0:4096`` resumes a rank's events or log from that offset (the
    ``offset`` of the last message received for it); other ranks start from the beginning.
    A problem after the stream has begun (the run deleted meanwhile, an unreadable file) is
    sent as an ``error`` event, and the stream closes cleanly.
    """

    @tornado.web.authenticated
    async def get(self, run_id: str) -> None:
        await self._execute_guarded(self._stream(run_id))

    async def _stream(self, run_id: str) -> None:
        event_offsets = self.offsets_arg("events")
        log_offsets = self.offsets_arg("logs")
        store = self.store
        store.existing(run_id)
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")
        try:
            await self._follow(store, run_id, event_offsets, log_offsets)
        except StreamClosedError:
            return
        except (TrainerError, OSError, ValueError) as exc:
            try:
                self._send("error", {"error": str(exc), "message": str(exc),
                                     "type": type(exc).__name__})
                await self.flush()
            except StreamClosedError:
                return
        finally:
            if not self._finished:
                self.finish()

    async def _follow(self, store: Store, run_id: str, event_offsets: dict[int, int],
                      log_offsets: dict[int, int]) -> None:
        last_state = None
        while True:
            # None: the state is damaged and its supervisor, which writes it again, runs
            state = store.current_state(run_id) or last_state or {"status": "unknown"}
            if state != last_state:
                self._send("state", state)
                last_state = state
            sent = 0
            for rank in store.ranks(run_id):
                events, event_offsets[rank] = read_events(
                    store, run_id, rank, event_offsets.get(rank, 0))
                if events:
                    self._send("events", {"rank": rank, "events": events,
                                          "offset": event_offsets[rank]})
                text, log_offsets[rank] = read_log(store, run_id, rank, log_offsets.get(rank, 0))
                if text:
                    self._send("log", {"rank": rank, "text": text, "offset": log_offsets[rank]})
                sent += bool(events) + bool(text)
            await self.flush()
            if state["status"] in TERMINAL and not sent:
                self._send("end", {"status": state["status"]})
                await self.flush()
                return
            if not sent:
                await asyncio.sleep(STREAM_POLL_S)

    def _send(self, kind: str, data: Any) -> None:
        self.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n")


class NotFoundHandler(BaseHandler):
    """Any other path under the API: a JSON 404 that lists the routes."""

    ROUTES = ("version", "runs", "runs/RUN", "runs/RUN/events", "runs/RUN/logs",
              "runs/RUN/stream", "runs/RUN/cancel", "runs/RUN/view (WebSocket)", "sweeps",
              "sweeps/SWEEP", "sweeps/SWEEP/cancel", "models", "models/MODEL",
              "models/MODEL/VERSION")

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
        message = (f"no such route {self.request.path!r}; the routes under /{API_PREFIX}/ are "
                   + ", ".join(self.ROUTES))
        self.write_json({"error": message, "message": message, "type": "NotFound"}, 404)


def setup_handlers(web_app: Any) -> None:
    from .models import model_routes
    from .sweeps import sweep_routes
    from .view import ViewSocket

    base = url_path_join(web_app.settings["base_url"], API_PREFIX)
    web_app.add_handlers(".*$", [
        (url_path_join(base, "version"), VersionHandler),
        (url_path_join(base, "runs"), RunsHandler),
        (url_path_join(base, "runs", _RUN), RunHandler),
        (url_path_join(base, "runs", _RUN, "events"), RankReadHandler, {"field": "events"}),
        (url_path_join(base, "runs", _RUN, "logs"), RankReadHandler, {"field": "text"}),
        (url_path_join(base, "runs", _RUN, "stream"), StreamHandler),
        (url_path_join(base, "runs", _RUN, "cancel"), CancelHandler),
        (url_path_join(base, "runs", _RUN, "view"), ViewSocket),
        *sweep_routes(base),
        *model_routes(base),
        (url_path_join(base, "(.*)"), NotFoundHandler),
    ])
