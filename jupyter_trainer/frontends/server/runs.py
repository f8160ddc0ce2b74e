"""REST handlers of runs: list them, read one, read events and logs incrementally, stream,
cancel (sweeps have theirs in ``sweeps.py``, the model registry in ``models.py``, the run
view's WebSocket in ``view.py``). An offset past the end of a file reads nothing.
"""

from __future__ import annotations

import asyncio
import errno
import json
import time
from pathlib import Path
from typing import Any

import tornado.web
from tornado.iostream import StreamClosedError

from ...core import bounded_json
from ...core.errors import (
    TrainerError,
)
from ...core.version import __version__
from ...store import TERMINAL, Store, read_complete_lines
from ...store.ranks import line_end_after, read_log_lines
from ...store.sweeps import trial_runs
from ..views.health import list_fields
from .base import (
    ALL_RUNS,
    MAX_RANK,
    MAX_READ_BYTES,
    STREAM_POLL_S,
    BaseHandler,
    request_cancel,
)


def _read_lines(path: Path, offset: int, log: bool = False) -> tuple[bytes, int]:
    """Complete lines of ``path`` from ``offset``, at most ``MAX_READ_BYTES`` of them. A log's
    line longer than that comes in pieces (``read_log_lines``); an event line longer than
    that is skipped, since no piece of it decodes. An offset past what the file system
    allows (``seek`` fails with EINVAL) is past the end of the file: nothing to read."""
    try:
        if log:
            return read_log_lines(path, offset, MAX_READ_BYTES)
        data, new_offset = read_complete_lines(path, offset, MAX_READ_BYTES)
        if not data and path.stat().st_size - offset >= MAX_READ_BYTES:
            return b"", line_end_after(path, offset)
        return data, new_offset
    except FileNotFoundError:
        return b"", offset
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
            events.append(bounded_json.loads(line))  # deep enough to break the answer: skipped
        except (ValueError, RecursionError):
            continue
    return events, new_offset


def read_log(store: Store, run_id: str, rank: int, offset: int) -> tuple[str, int]:
    """Text of ``rank``'s log from ``offset``, which ends where a line does, or in the middle
    of one longer than a read (the rest comes with the next read)."""
    data, new_offset = _read_lines(store.existing(run_id).log_file(rank), offset, log=True)
    return data.decode(errors="replace"), new_offset


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
        limit, offset, status, name = self.list_args("run")
        with_trials = self.int_arg("trials", 1, 0, 1)
        owner = self.owner_arg()
        store = self.store
        if with_trials:
            rows = store.list_runs(
                status=status, name=name, owner=owner, limit=limit + 1, offset=offset
            )
            trials = trial_runs(store, rows)
        else:  # the trials are left to their sweeps' rows, before the page is cut
            rows = store.list_runs(status=status, name=name, owner=owner, limit=ALL_RUNS)
            trials = trial_runs(store, rows)
            rows = [r for r in rows if r["id"] not in trials][offset : offset + limit + 1]
        now = time.time()
        for row in rows[:limit]:
            row["sweep"], row["trial"] = trials.get(row["id"], (None, None))
            row["progress"] = store.latest_progress(row["id"])
            row.update(health_of(store, row["id"], now))
        self.write_json(
            {"runs": rows[:limit], "limit": limit, "offset": offset, "more": len(rows) > limit}
        )


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
        self.write_json(
            {
                "id": run_id,
                "spec": spec.to_dict(),
                "state": store.read_state(run_id),
                "ranks": store.ranks(run_id),
            }
        )


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
        status = request_cancel(self.store, run_id, self.actor())
        self.write_json({"id": run_id, "status": status, "cancel_requested": True}, 202)


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
                self._send(
                    "error", {"error": str(exc), "message": str(exc), "type": type(exc).__name__}
                )
                await self.flush()
            except StreamClosedError:
                return
        finally:
            if not self._finished:
                self.finish()

    async def _follow(
        self, store: Store, run_id: str, event_offsets: dict[int, int], log_offsets: dict[int, int]
    ) -> None:
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
                    store, run_id, rank, event_offsets.get(rank, 0)
                )
                if events:
                    self._send(
                        "events", {"rank": rank, "events": events, "offset": event_offsets[rank]}
                    )
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
