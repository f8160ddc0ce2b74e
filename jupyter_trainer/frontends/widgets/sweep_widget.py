"""The live sweep monitor: the sweep's view (an anywidget) and, below it, the run monitor of
the trial a person clicked.

``SweepMonitor`` is an ipywidgets ``VBox``. Its first child, ``SweepView``, draws the sweep
(header, best-so-far and parallel-coordinates charts, trials table) from traits that one
``SweepFeeder`` thread keeps current: it reads the sweep's state about twice a second and
sends only what changed, and it stops once the sweep has ended (or its driver is gone) and
that last state is out. A click on a trial row arrives as a comm message; the monitor then
shows a ``RunMonitor`` of that trial's run as its second child, closing the one before.
Like ``RunMonitor``, the widgets take their messages on the subshell the front end chose,
so Cancel and a click work while ``%%train`` blocks the kernel's main thread.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Callable

import anywidget
import ipywidgets
import traitlets as t

from ..views.sweep_charts import sweep_chart_data
from ..views.sweep_text import sweep_text
from .widget import (RunMonitor, _route_messages_to_front_end_subshell, _view_asset,
                     display_updatable, update_displays)

POLL_S = 0.5          # seconds between two reads of the sweep's state
UNREADABLE_POLL_S = 2.0
FINAL = ("completed", "canceled", "failed", "interrupted")  # nothing more will change
SPEC_KEYS = ("name", "space", "metric", "goal", "trials", "parallel", "sampler", "prune",
             "prune_after", "objective", "timeout")
HIDDEN_STATE = ("values", "driver", "storage")  # big, or of no use to the view

Publish = Callable[[dict[str, Any]], None]

_LIVE: "weakref.WeakSet[SweepMonitor]" = weakref.WeakSet()


def live_sweep_monitors() -> list["SweepMonitor"]:
    """Sweep monitors of this kernel that have not been closed (for tests and tools)."""
    return [m for m in list(_LIVE) if not m._closed]


def view_state(state: dict[str, Any]) -> dict[str, Any]:
    """The sweep's state as the view needs it: each trial without its metric's history."""
    out = {k: v for k, v in state.items() if k not in HIDDEN_STATE}
    out["trials"] = [{k: v for k, v in trial.items() if k not in HIDDEN_STATE}
                     for trial in state.get("trials", [])]
    return out


class SweepFeeder:
    """Reads a sweep's state on its own thread and publishes what changed (``state``,
    ``charts``, ``notice``); ``publish`` is called on that thread."""

    def __init__(self, sweep: Any, publish: Publish, *, interval: float = POLL_S) -> None:
        self.sweep = sweep
        self.publish = publish
        self.interval = interval
        self.spec = sweep.sweeps.read_spec(sweep.id)
        self.finished = threading.Event()  # set once the sweep's last state is out
        self.updates_sent = 0
        self.text = f"sweep {sweep.id}"
        self.last_state: dict[str, Any] = {}
        self.on_done: Callable[[], None] | None = None
        self._sent: dict[str, Any] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    @property
    def notice(self) -> str:
        """Why the sweep cannot be read now ("" while it can)."""
        return self._sent.get("notice", "")

    def first(self) -> dict[str, Any]:
        """Everything the view shows, read now (the widget's first message carries it)."""
        changes = self._read()
        with self._lock:
            self._sent.update(changes)
        if "state" in changes:
            changes["state"] = {**changes["state"], "now": time.time()}
        changes["spec"] = {k: self.spec[k] for k in SPEC_KEYS if k in self.spec}
        changes["sweep_id"] = self.sweep.id
        return changes

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=f"jt-sweep-{self.sweep.id}",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def refresh(self) -> None:
        """Read the state again now: on the thread while it runs, else here (a sweep
        canceled after its driver was gone changes once more after the thread stopped)."""
        if self._thread is not None and self._thread.is_alive():
            self._wake.set()
        elif not self._stop.is_set():
            self._send(self._read())

    def _read(self) -> dict[str, Any]:
        """What changed since the last update (all of it, the first time)."""
        try:
            state = self.sweep.state
        except Exception as exc:  # the sweep was deleted, its state is unreadable, ...
            return self._diff({"notice": f"cannot read the sweep: {type(exc).__name__}: {exc}"})
        self.last_state = state
        return self._diff({"state": view_state(state), "charts": sweep_chart_data(state, self.spec),
                           "notice": ""})

    def _diff(self, payload: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            return {k: v for k, v in payload.items() if self._sent.get(k, None) != v}

    def _send(self, changes: dict[str, Any]) -> None:
        with self._lock:
            if not changes:
                return
            self._sent.update(changes)
            if "state" in changes:  # the viewer's clock: running trials' durations
                changes["state"] = {**changes["state"], "now": time.time()}
            try:
                self.text = sweep_text(self.sweep)
            except Exception:  # unreadable now; the notice says why
                pass
            self.publish(changes)
            self.updates_sent += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            changes = self._read()
            self._send(changes)
            status = self.last_state.get("status")
            if status in FINAL and not self._sent.get("notice"):
                break
            self._wake.wait(UNREADABLE_POLL_S if self._sent.get("notice") else self.interval)
            self._wake.clear()
        if not self._stop.is_set() and self.on_done is not None:
            self.on_done()
        self.finished.set()


class SweepView(anywidget.AnyWidget):
    """The sweep's own view: header, charts and trials table (``labextension/src/view/
    sweepview.ts``). Its requests (``cancel``, ``open`` a trial) go to the ``SweepMonitor``."""

    _esm = _view_asset("sweep.js")
    _css = _view_asset("widget.css")

    sweep_id = t.Unicode("").tag(sync=True)
    spec = t.Dict().tag(sync=True)
    state = t.Dict().tag(sync=True)
    charts = t.Dict().tag(sync=True)
    notice = t.Unicode("").tag(sync=True)
    cancel_state = t.Unicode("").tag(sync=True)
    selected = t.Int(None, allow_none=True).tag(sync=True)  # the trial shown below

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _route_messages_to_front_end_subshell(self)


class SweepMonitor(ipywidgets.VBox):
    """A sweep's live monitor: ``display(SweepMonitor(sweep))``."""

    def __init__(self, sweep: Any, *, interval: float = POLL_S, **kwargs: Any) -> None:
        self._closed = False
        self._sweep = sweep
        self._lock = threading.RLock()
        self._handles: list[Any] = []
        self._feeder = feeder = SweepFeeder(sweep, self._publish, interval=interval)
        self.view = SweepView(**feeder.first())
        self._text = feeder.text = sweep_text(sweep)
        self.trial_monitor: RunMonitor | None = None
        super().__init__(children=(self.view,), **kwargs)
        self.add_class("jt-sweep-monitor")
        _route_messages_to_front_end_subshell(self)
        self.view.on_msg(self._on_front_end_message)
        feeder.on_done = self._refresh_displays
        _LIVE.add(self)
        feeder.start()

    # -- the sweep ---------------------------------------------------------------------
    @property
    def sweep(self) -> Any:
        return self._sweep

    @property
    def feeder(self) -> SweepFeeder:
        return self._feeder

    @property
    def updates_sent(self) -> int:
        return self._feeder.updates_sent

    @property
    def finished(self) -> threading.Event:
        """Set once the sweep's last state is out."""
        return self._feeder.finished

    def wait_final(self, timeout: float = 10.0) -> bool:
        """Block until the view shows the sweep's final state (True) or ``timeout``."""
        return self.finished.wait(timeout)

    def close(self) -> None:
        self._closed = True
        self._feeder.stop()
        with self._lock:
            monitor, self.trial_monitor = self.trial_monitor, None
        if monitor is not None:
            monitor.close()
        self.view.close()
        super().close()

    def _publish(self, changes: dict[str, Any]) -> None:
        if self._closed:
            return
        with self.view.hold_sync():
            for name, value in changes.items():
                setattr(self.view, name, value)
        self._text = self._feeder.text

    # -- a trial's run -----------------------------------------------------------------
    def open_trial(self, number: int) -> RunMonitor | None:
        """Show the run monitor of trial ``number`` below the sweep (the one shown before is
        closed); None (and a notice) if that trial has no run yet."""
        trial = next((tr for tr in self._sweep.state["trials"] if tr["number"] == number), None)
        run = next((r for r in self._sweep.trials() if trial and r.id == trial.get("run")), None)
        if run is None:
            self.view.notice = f"trial {number} has no run yet"
            return None
        with self._lock:
            old = self.trial_monitor
            if old is not None and old.run is not None and old.run.id == run.id:
                return old
            monitor = RunMonitor(run)
            self.trial_monitor = monitor
            self.view.notice = self._feeder.notice
            self.children = (self.view, monitor)
            self.view.selected = number
        if old is not None:
            old.close()
        return monitor

    def close_trial(self) -> None:
        """Take the trial's run monitor away."""
        with self._lock:
            old, self.trial_monitor = self.trial_monitor, None
            self.children = (self.view,)
            self.view.selected = None
        if old is not None:
            old.close()

    # -- front-end requests ------------------------------------------------------------
    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or self._closed:
            return
        kind = content.get("type")
        if kind == "cancel":
            self.view.cancel_state = "requested"
            threading.Thread(target=self._cancel, name=f"jt-sweep-cancel-{self._sweep.id}",
                             daemon=True).start()
        elif kind == "open" and isinstance(content.get("number"), int):
            self.open_trial(content["number"])
        elif kind == "close_trial":
            self.close_trial()

    def _cancel(self) -> None:
        from ...core.errors import TrainerError

        try:
            self._sweep.cancel(wait=False, reason="canceled from the notebook (Cancel button)")
        except TrainerError as exc:
            self.view.cancel_state = str(exc)
        self._feeder.refresh()

    # -- text/plain and display --------------------------------------------------------
    def __repr__(self) -> str:
        return f"<SweepMonitor {self._text.splitlines()[0] if self._text else ''}>"

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any] | None:
        if self._closed:
            return None
        data = super()._repr_mimebundle_(**kwargs)
        data["text/plain"] = self._text  # the trials table now, not at creation
        return data

    def _ipython_display_(self) -> None:
        """Display with a display id, so the saved text/plain can be brought up to date."""
        data = self._repr_mimebundle_()
        if data is not None:
            self._handles.append(display_updatable(data))

    def _refresh_displays(self) -> None:
        self._text = self._feeder.text
        if self._closed:  # closing took its bundle away
            return
        data = self._repr_mimebundle_()
        if data is not None:
            update_displays(self._handles, data)
