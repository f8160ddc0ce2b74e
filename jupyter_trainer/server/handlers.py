"""REST handlers: list runs, read one run, read events and logs incrementally, stream, cancel.

Every verb is ``@tornado.web.authenticated``. Run ids are validated by the store before any
path is built from them. Core errors map to statuses in one place (``_status_of``).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import tornado.web
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.iostream import StreamClosedError

from .. import __version__
from ..errors import InvalidRunId, RunNotFound, RunStateError, SpecError, TrainerError
from ..store import TERMINAL, Store

API_PREFIX = "jupyter-trainer/api"
_RUN = r"(?P<run_id>[^/]+)"
MAX_READ_BYTES = 4 << 20
_WHOLE = re.compile(r"[0-9]{1,18}")  # ASCII digits only (\d takes other scripts' digits too)
STREAM_POLL_S = 0.25


def _status_of(exc: TrainerError) -> int:
    if isinstance(exc, RunNotFound):
        return 404
    if isinstance(exc, RunStateError):
        return 409
    if isinstance(exc, (SpecError, InvalidRunId)):
        return 400
    return 500


class BaseHandler(APIHandler):
    """Maps the core's errors to JSON error responses."""

    @property
    def store(self) -> Store:
        return Store()

    def write_json(self, data: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(data))

    def int_arg(self, name: str, default: int, low: int = 0, high: int = 1 << 62) -> int:
        raw = self.get_query_argument(name, None)
        if raw is None:
            return default
        try:
            value = int(raw)
        except ValueError:
            raise SpecError(f"query argument {name}={raw!r} must be a whole number") from None
        if not low <= value <= high:
            raise SpecError(f"query argument {name}={value} must be between {low} and {high}")
        return value

    def offsets_arg(self, name: str) -> dict[int, int]:
        """``name=RANK:OFFSET,RANK:OFFSET`` as {rank: offset}; absent or empty: {}."""
        raw = self.get_query_argument(name, "")
        offsets: dict[int, int] = {}
        for pair in filter(None, raw.split(",")):
            rank, sep, offset = pair.partition(":")
            if not (sep and _WHOLE.fullmatch(rank) and _WHOLE.fullmatch(offset)):
                raise SpecError(f"query argument {name}={raw!r} must be rank:offset pairs "
                                f"separated by commas, like {name}=0:1234,1:88 (the offsets "
                                "of the last messages received)")
            if int(rank) in offsets:
                raise SpecError(f"query argument {name}={raw!r} names rank {rank} twice")
            offsets[int(rank)] = int(offset)
        return offsets

    async def _execute_guarded(self, coro) -> None:
        try:
            await coro
        except TrainerError as exc:
            self.write_json({"error": str(exc), "type": type(exc).__name__}, _status_of(exc))


class VersionHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        self.write_json({"version": __version__, "api": 1})


class RunsHandler(BaseHandler):
    @tornado.web.authenticated
    async def get(self) -> None:
        await self._execute_guarded(self._get())

    async def _get(self) -> None:
        limit = self.int_arg("limit", 50, 1, 1000)
        offset = self.int_arg("offset", 0)
        status = self.get_query_argument("status", None) or None
        name = self.get_query_argument("name", None) or None
        store = self.store
        rows = store.list_runs(status=status, name=name, limit=limit + 1, offset=offset)
        for row in rows[:limit]:
            row["progress"] = store.latest_progress(row["id"])
        self.write_json({"runs": rows[:limit], "limit": limit, "offset": offset,
                         "more": len(rows) > limit})


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
        rank = self.int_arg("rank", 0)
        offset = self.int_arg("offset", 0)
        read = self.store.read_events if self.field == "events" else self.store.read_log
        data, new_offset = read(run_id, rank, offset, MAX_READ_BYTES)
        self.write_json({"rank": rank, self.field: data, "offset": new_offset})


class CancelHandler(BaseHandler):
    @tornado.web.authenticated
    async def post(self, run_id: str) -> None:
        await self._execute_guarded(self._post(run_id))

    async def _post(self, run_id: str) -> None:
        store = self.store
        status = store.read_state(run_id)["status"]
        if status in TERMINAL:
            raise RunStateError(f"run {run_id} already ended ({status}); nothing to cancel")
        store.request_cancel(run_id, reason="canceled from JupyterLab")
        self.write_json({"id": run_id, "status": status, "cancel_requested": True}, 202)


class StreamHandler(BaseHandler):
    """Server-sent events: ``state`` on every change, ``events`` and ``log`` as they arrive,
    then ``end`` once the run is over and everything was sent.

    ``?events=0:1234,1:88&logs=0:4096`` resumes a rank's events or log from that offset (the
    ``offset`` of the last message received for it); other ranks start from the beginning.
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
        last_state = None
        try:
            while True:
                state = store.read_state(run_id)
                if state != last_state:
                    self._send("state", state)
                    last_state = state
                sent = 0
                for rank in store.ranks(run_id):
                    events, event_offsets[rank] = store.read_events(
                        run_id, rank, event_offsets.get(rank, 0), MAX_READ_BYTES)
                    if events:
                        self._send("events", {"rank": rank, "events": events,
                                              "offset": event_offsets[rank]})
                    text, log_offsets[rank] = store.read_log(
                        run_id, rank, log_offsets.get(rank, 0), MAX_READ_BYTES)
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
        except StreamClosedError:
            return
        finally:
            if not self._finished:
                self.finish()

    def _send(self, kind: str, data: Any) -> None:
        self.write(f"event: {kind}\ndata: {json.dumps(data)}\n\n")


def setup_handlers(web_app: Any) -> None:
    base = url_path_join(web_app.settings["base_url"], API_PREFIX)
    web_app.add_handlers(".*$", [
        (url_path_join(base, "version"), VersionHandler),
        (url_path_join(base, "runs"), RunsHandler),
        (url_path_join(base, "runs", _RUN), RunHandler),
        (url_path_join(base, "runs", _RUN, "events"), RankReadHandler, {"field": "events"}),
        (url_path_join(base, "runs", _RUN, "logs"), RankReadHandler, {"field": "text"}),
        (url_path_join(base, "runs", _RUN, "stream"), StreamHandler),
        (url_path_join(base, "runs", _RUN, "cancel"), CancelHandler),
    ])
