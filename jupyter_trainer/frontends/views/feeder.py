"""Keeps one view of a run current: the loop that both the widget and the Lab view run.

A ``ViewFeeder`` owns a daemon thread that reads the run store through a ``RunFeed`` and
hands what changed to ``publish`` as one dict per update (``info``, ``state``, ``progress``,
``metrics``, ``texts``, ``system``, ``charts``, ``log``, ``loading``, ``notice``,
``cancel_state``).
It publishes at most four updates a second, sends big chart payloads at most once a second,
and stops once the run has ended and its last update is out, or on ``stop()``. The viewer's
requests (other charts, another rank's log, a log resync) only set flags and wake it.

The notebook widget publishes into its traits (kernel messages); the server's view socket
publishes into a WebSocket (``server.view``). Both front ends draw the same run view.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ...core.errors import TrainerError
from . import system_view
from .feed import RunFeed

UPDATE_INTERVAL = 0.25  # seconds between updates: at most 4 a second
BIG_CHARTS = 64 << 10  # chart payloads above this are re-sent at most once a second
HISTORY_STEP = 4 << 20  # bytes of event history read between two updates while catching up
CLOCK_REFRESH = 5.0  # seconds between state updates while nothing changes (viewer clock)
PROGRESS_REFRESH = 1.0  # seconds between looks at the rate while no progress comes

Publish = Callable[[dict[str, Any]], None]


class FeedThread:
    """What a view's feeder (of a run here, of a sweep in ``frontends.views.sweep_feeder``) does
    alike: its ``_loop`` runs on a daemon thread of its own from ``start()`` until it is
    done or ``stop()``; a request wakes it (``_wake``); ``finished`` is set once its last
    update is out; ``publish`` is called on that thread with each update."""

    def __init__(self, publish: Publish, name: str) -> None:
        self.publish = publish
        self.finished = threading.Event()
        self.updates_sent = 0
        self.on_done: Callable[[], None] | None = None
        self._name = name
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        raise NotImplementedError


class ViewFeeder(FeedThread):
    """The feeder thread of one view of a run."""

    def __init__(self, run: Any, publish: Publish, *, name: str = "jt-view") -> None:
        super().__init__(publish, name)
        self.feed = feed = RunFeed(run)
        try:
            feed.follower.state = run.store.current_state(run.id) or {"status": "unknown"}
        except TrainerError:  # a damaged record: the first poll puts the message in the notice
            feed.follower.state = {"status": "unknown"}
        self.chart_options: dict[str, Any] = {"x": "step", "agg": "ranks", "selected": None}
        self.log_selection = "all"
        self.text = f"run {run.id} {feed.follower.state.get('status')}"
        self._requests: set[str] = set()
        self._feeding = False
        self._last_push = 0.0
        self._last_state_push = 0.0
        self._chart_bytes = 0
        self._notice = ""
        self._log_sent = 0
        self._log_gen = 0
        self._sent_log_selection: str | None = None  # the first log payload is a reset
        self._system_sent = 0  # figures sent in the System section so far
        self._progress_sent: dict[str, Any] | None = None
        self._progress_looked = 0.0

    def first(self) -> dict[str, Any]:
        """What to show at once, before the thread has read anything."""
        self._last_push = time.monotonic()  # that was an update: the next one waits its turn
        return {
            "run_id": self.feed.run.id,
            "info": self.feed.info(),
            "state": self.feed.state_payload(),
            "loading": True,
        }

    def start(self) -> None:
        self._feeding = True
        super().start()

    def request(self, what: str) -> None:
        """Ask for ``charts``, ``log_reset`` or ``cancel:<outcome>`` in the next update; once
        the thread has stopped (the run ended) it is answered here."""
        with self._lock:
            self._requests.add(what)
            feeding = self._feeding
        if feeding:
            self._wake.set()
            return
        with self._lock:
            requests, self._requests = self._requests, set()
            if requests and not self._stop.is_set():
                self._push(set(), requests, charts="charts" in requests)

    def _loop(self) -> None:
        feed = self.feed
        dirty = {"state", "data", "charts", "logs", "info"}
        requests: set[str] = set()
        last_charts = 0.0
        while not self._stop.is_set():
            try:
                changed = feed.poll(HISTORY_STEP)
                notice = ""
            except Exception as exc:  # the run was deleted, a file is unreadable, ...
                changed, notice = {}, f"cannot read the run: {type(exc).__name__}: {exc}"
            if notice != self._notice:
                self._notice = notice
                dirty.add("notice")
            dirty.update(k for k, v in changed.items() if v)
            if changed.get("data"):
                dirty.add("charts")
            if changed.get("state"):
                dirty |= {"info", "data"}  # the environment record; no ETA once it has ended
            with self._lock:
                requests |= self._requests
                self._requests = set()
            done = feed.finished and not feed.behind and not notice
            now = time.monotonic()
            if not feed.finished and now - self._last_state_push > CLOCK_REFRESH:
                dirty.add("state")  # its "now" keeps the viewer's clock right, and shows it alive
            if not feed.finished and now - self._progress_looked > PROGRESS_REFRESH:
                self._progress_looked = now  # no report for a while: the rate falls, then stalls
                if feed.progress_payload() != self._progress_sent:
                    dirty.add("progress")
            if now - self._last_push >= UPDATE_INTERVAL and (dirty or requests):
                charts = "charts" in requests or (
                    "charts" in dirty and (done or now - last_charts >= self._chart_interval())
                )
                self._push(dirty, requests, charts=charts)
                if charts:
                    last_charts = now
                dirty = {"charts"} if "charts" in dirty and not charts else set()
                requests = set()
            if done and not dirty and not requests:
                with self._lock:
                    if not self._requests:
                        self._feeding = False
                        break
                continue
            if feed.behind:
                time.sleep(0.001)  # catching up on history: let other threads run
                continue
            if dirty or requests:
                timeout = max(0.01, self._last_push + UPDATE_INTERVAL - time.monotonic())
            else:
                timeout = 2.0 if notice else UPDATE_INTERVAL
            self._wake.wait(timeout)
            self._wake.clear()
        self._feeding = False
        if not self._stop.is_set():
            self.text = feed.text()
            if self.on_done is not None:
                self.on_done()
        self.finished.set()

    def _chart_interval(self) -> float:
        return 1.0 if self._chart_bytes > BIG_CHARTS else UPDATE_INTERVAL

    def _push(self, dirty: set[str], requests: set[str], charts: bool) -> None:
        """Publish what changed as one update."""
        feed = self.feed
        out: dict[str, Any] = {}
        if "info" in dirty:
            out["info"] = feed.info()
        if "state" in dirty:
            out["state"] = feed.state_payload()
            self._last_state_push = time.monotonic()
        if "data" in dirty or "progress" in dirty:
            out["progress"] = self._progress_sent = feed.progress_payload()
        if "data" in dirty:
            out["metrics"] = feed.metrics_payload()
            out["texts"] = feed.texts_payload()
            if system_view.samples(feed.follower) != self._system_sent:
                out["system"] = system_view.system_payload(feed.follower)
                self._system_sent = out["system"]["samples"]
        if charts:
            out["charts"] = feed.chart_payload(dict(self.chart_options))
            self._chart_bytes = sum(
                len(s["x"]) + len(s["y"])
                for c in out["charts"]["charts"].values()
                for s in c["series"]
            )
        if "notice" in dirty:
            out["notice"] = self._notice
        for request in requests:
            if request.startswith("cancel:"):
                out["cancel_state"] = request.split(":", 1)[1]
        selection = self.log_selection
        if "log_reset" in requests or selection != self._sent_log_selection:
            self._log_gen += 1
            self._log_sent = 0
            reset = True
        else:
            reset = False
        payload, self._log_sent = feed.log_payload(selection, self._log_sent, self._log_gen, reset)
        self._sent_log_selection = selection
        if payload is not None:
            out["log"] = payload
        out["loading"] = feed.behind
        self.text = feed.text()
        self.publish(out)
        self._last_push = time.monotonic()
        self.updates_sent += 1
