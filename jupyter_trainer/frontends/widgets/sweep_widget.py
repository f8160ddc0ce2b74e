"""The live sweep monitor: the sweep's view (an anywidget) and, below it, the run monitor of
the trial a person clicked.

``SweepMonitor`` is an ipywidgets ``VBox``. Its first child, ``SweepView``, draws the sweep
(header, best-so-far and parallel-coordinates charts, trials table) from traits that one
``SweepFeeder`` thread keeps current (``frontends.views.sweep_feeder``). A click on a trial row
arrives as a comm message; the monitor then shows a ``RunMonitor`` of that trial's run as
its second child, closing the one before.
Like ``RunMonitor``, the widgets take their messages on the subshell the front end chose,
so Cancel and a click work while ``%%train`` blocks the kernel's main thread.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import anywidget
import ipywidgets
import traitlets as t

from ..views.sweep_feeder import POLL_S, SweepFeeder
from ..views.sweep_text import sweep_text
from .widget import (
    RunMonitor,
    display_updatable,
    route_messages_to_front_end_subshell,
    update_displays,
    view_asset,
)

_LIVE: weakref.WeakSet[SweepMonitor] = weakref.WeakSet()


def live_sweep_monitors() -> list[SweepMonitor]:
    """Sweep monitors of this kernel that have not been closed (for tests and tools)."""
    return [m for m in list(_LIVE) if not m._closed]


class SweepView(anywidget.AnyWidget):
    """The sweep's own view: header, charts and trials table (``labextension/src/view/
    sweepview.ts``). Its requests (``cancel``, ``open`` a trial) go to the ``SweepMonitor``."""

    _esm = view_asset("sweep.js")
    _css = view_asset("widget.css")

    sweep_id = t.Unicode("").tag(sync=True)
    spec = t.Dict().tag(sync=True)
    state = t.Dict().tag(sync=True)
    charts = t.Dict().tag(sync=True)
    notice = t.Unicode("").tag(sync=True)
    cancel_state = t.Unicode("").tag(sync=True)
    selected = t.Int(None, allow_none=True).tag(sync=True)  # the trial shown below

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        route_messages_to_front_end_subshell(self)


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
        route_messages_to_front_end_subshell(self)
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
            self.children: tuple[ipywidgets.Widget, ...] = (self.view, monitor)
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
            threading.Thread(
                target=self._cancel, name=f"jt-sweep-cancel-{self._sweep.id}", daemon=True
            ).start()
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
