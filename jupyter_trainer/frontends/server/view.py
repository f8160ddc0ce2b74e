"""The run view's feed over a WebSocket: what the notebook widget gets as kernel messages.

``GET /jupyter-trainer/api/runs/RUN/view`` upgrades to a WebSocket (Jupyter auth required,
the run id checked and the run looked up before the upgrade). The server runs the same
``ViewFeeder`` as the widget and sends each update as one JSON text message,
``{"set": {name: value, ...}}``, with the chart series' float64 buffers base64-encoded.
The viewer sends ``{"set": {"chart_options": {...}}}`` or ``{"set": {"log_selection": "1"}}``
as it changes them, and ``{"msg": {"type": "cancel" | "log_resync"}}``. A message that is
not one of these is answered with ``{"error": ...}`` and changes nothing; so is one nested
deeper than ``MAX_DEPTH`` (refused before it is parsed). A message over ``MAX_MESSAGE_BYTES``
closes the socket with code 1009 (message too big). ``FeedSocket`` is what this socket and
the sweep view's (``server.sweeps``) share.
"""

from __future__ import annotations

import base64
import json
import re
from itertools import accumulate
from typing import Any

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web
from tornado.ioloop import IOLoop
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from ...api.runs import Run
from ...core.errors import TrainerError
from ...store import Store
from ..views.feeder import ViewFeeder
from .base import actor_of, request_cancel, status_of

MAX_METRICS = 1000  # names in one chart selection
MAX_MESSAGE_BYTES = 256 << 10  # a viewer's message: a full chart selection, 1000 names of
# 200 characters, fits; the depth check costs about 50 ms at this size
MAX_DEPTH = 8  # nesting of a viewer's message; the deepest valid one has 4 levels
_RANK = re.compile(r"(all|[0-9]{1,7})")
# A string, or what is left of one that never closes: each match ends where the next search
# starts, so every character is looked at once (a pattern that must find the closing quote
# rescans the rest of the message from every unclosed one: quadratic).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^][{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def check_depth(text: str | bytes) -> None:
    """ValueError when the JSON in ``text`` nests deeper than ``MAX_DEPTH``: found by counting
    brackets outside strings, so a hostile message never reaches the recursive parser. Time
    and memory are linear in the message's length, whatever it holds."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > MAX_DEPTH:
        raise ValueError(f"message nested deeper than {MAX_DEPTH} levels")


def check_options(value: Any) -> dict[str, Any]:
    """Chart options as the viewer may set them; ValueError naming what is wrong."""
    if not isinstance(value, dict) or set(value) - {"x", "agg", "selected"}:
        raise ValueError("chart_options must be an object with x, agg and selected")
    x, agg, selected = value.get("x", "step"), value.get("agg", "ranks"), value.get("selected")
    if x not in ("step", "time") or agg not in ("ranks", "mean"):
        raise ValueError('chart_options: x is "step" or "time", agg is "ranks" or "mean"')
    if selected is not None and not (
        isinstance(selected, list)
        and len(selected) <= MAX_METRICS
        and all(isinstance(n, str) for n in selected)
    ):
        raise ValueError(
            f"chart_options.selected is null or a list of at most {MAX_METRICS} metric names"
        )
    return {"x": x, "agg": agg, "selected": selected}


def encode(changes: dict[str, Any]) -> str:
    """One update as JSON: the chart series' byte buffers as base64 text."""
    charts = changes.get("charts")
    if charts:
        charts = dict(
            charts,
            charts={
                name: dict(
                    chart,
                    series=[
                        dict(
                            s,
                            x=base64.b64encode(s["x"]).decode(),
                            y=base64.b64encode(s["y"]).decode(),
                        )
                        for s in chart["series"]
                    ],
                )
                for name, chart in charts["charts"].items()
            },
        )
        changes = dict(changes, charts=charts)
    return json.dumps({"set": changes})


class FeedSocket(WebSocketMixin, WebSocketHandler, JupyterHandler):
    """One viewer of one feed (a run's ``ViewFeeder``, a sweep's ``SweepFeeder``): its first
    update, then each one the feeder publishes on its thread, sent from the server's loop."""

    feeder: Any = None
    max_message_size = MAX_MESSAGE_BYTES  # tornado closes the socket with 1009 beyond it

    def set_default_headers(self) -> None:
        """JupyterHandler's headers do not apply to a WebSocket."""

    def make_feeder(self) -> Any:
        raise NotImplementedError

    def encode(self, changes: dict[str, Any]) -> str:
        return json.dumps({"set": changes})

    def open(self, *args: Any, **kwargs: Any) -> None:
        super().open()
        self.loop = IOLoop.current()
        self.feeder = self.make_feeder()
        self.write_message(self.encode(self.feeder.first()))
        self.feeder.start()

    def _publish(self, changes: dict[str, Any]) -> None:
        """On the feeder's thread: hand the update to the server's event loop."""
        self.loop.add_callback(self._send, self.encode(changes))

    def _send(self, text: str) -> None:
        try:
            self.write_message(text)
        except WebSocketClosedError:
            self.on_close()

    def on_message(self, message: str | bytes) -> None:
        try:
            check_depth(message)
            self._handle(json.loads(message))
        except (ValueError, TypeError, AttributeError) as exc:
            self._send(json.dumps({"error": f"{exc}"[:500]}))

    def _handle(self, message: Any) -> None:
        raise NotImplementedError

    def on_close(self) -> None:
        if self.feeder is not None:
            self.feeder.stop()
            self.feeder = None


def check_message(message: Any) -> None:
    """A viewer's message is ``{"set": {...}}`` or ``{"msg": {"type": ...}}``."""
    if (
        not isinstance(message, dict)
        or len(message) != 1
        or not (isinstance(message.get("set"), dict) or isinstance(message.get("msg"), dict))
    ):
        raise ValueError('send {"set": {...}} or {"msg": {"type": ...}}')


class ViewSocket(FeedSocket):
    """One viewer of one run."""

    @ws_authenticated
    async def get(self, run_id: str) -> None:
        store = Store()
        try:
            store.existing(run_id)
            self.run = Run(run_id, store)
            self.run.spec  # noqa: B018  (a run without a readable spec cannot be shown)
        except TrainerError as exc:
            raise web.HTTPError(status_of(exc), str(exc)) from None
        await super().get(run_id)

    def make_feeder(self) -> ViewFeeder:
        return ViewFeeder(self.run, self._publish, name=f"jt-view-{self.run.id}")

    def encode(self, changes: dict[str, Any]) -> str:
        return encode(changes)

    def _handle(self, message: Any) -> None:
        feeder = self.feeder
        if feeder is None:
            return
        check_message(message)
        if "set" in message:
            changes = message["set"]
            if set(changes) - {"chart_options", "log_selection"}:
                raise ValueError("only chart_options and log_selection can be set")
            if "chart_options" in changes:
                feeder.chart_options = check_options(changes["chart_options"])
                feeder.request("charts")
            if "log_selection" in changes:
                selection = changes["log_selection"]
                if not isinstance(selection, str) or not _RANK.fullmatch(selection):
                    raise ValueError('log_selection is "all" or a rank number')
                feeder.log_selection = selection
                feeder.request("log_reset")
            return
        kind = message["msg"].get("type")
        if kind == "log_resync":
            feeder.request("log_reset")
        elif kind == "cancel":
            try:
                request_cancel(self.run.store, self.run.id, actor_of(self.current_user))
                feeder.request("cancel:requested")
            except TrainerError as exc:
                feeder.request(f"cancel:{exc}")
        else:
            raise ValueError(f"unknown message type {kind!r}: cancel or log_resync")
