"""Keeps one view of a sweep current: the loop that both the sweep widget and the Lab's sweep
view run.

A ``SweepFeeder`` reads the sweep's state on its own thread about twice a second and hands
what changed to ``publish`` (``state``, ``charts``, ``notice``); it stops once the sweep has
ended (or its driver is gone) and that last state is out. The notebook's ``SweepView``
publishes into its traits (``monitor.sweep_widget``), the server's sweep socket into a
WebSocket (``server.sweeps``); both draw ``labextension/src/view/sweepview.ts``.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from .cost import sweep_cost
from .feeder import FeedThread, Publish
from .sweep_charts import reported, sweep_chart_data
from .sweep_text import sweep_text

POLL_S = 0.5  # seconds between two reads of the sweep's state
COST_S = 5.0  # seconds between two sums of the trials' cost (each trial's records are read)
UNREADABLE_POLL_S = 2.0
FINAL = ("completed", "canceled", "failed", "interrupted")  # nothing more will change
SPEC_KEYS = (
    "name",
    "space",
    "metric",
    "goal",
    "trials",
    "parallel",
    "sampler",
    "prune",
    "prune_after",
    "objective",
    "timeout",
)
HIDDEN_STATE = ("values", "driver", "storage")  # big, or of no use to the view


def view_state(state: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    """The sweep's state as the view needs it: each trial without its metric's history, with
    what a trial without an objective reported (``sweep_charts.reported``)."""
    objective = (spec or {}).get("objective") or "last"
    out = {k: v for k, v in state.items() if k not in HIDDEN_STATE}
    out["trials"] = [
        {
            **{k: v for k, v in trial.items() if k not in HIDDEN_STATE},
            "reported": reported(trial, objective),
        }
        for trial in state.get("trials", [])
    ]
    return out


class SweepFeeder(FeedThread):
    """Reads a sweep's state on its own thread and publishes what changed (``state``,
    ``charts``, ``notice``)."""

    def __init__(self, sweep: Any, publish: Publish, *, interval: float = POLL_S) -> None:
        super().__init__(publish, f"jt-sweep-{sweep.id}")
        self.sweep = sweep
        self.interval = interval
        self.spec = sweep.sweeps.read_spec(sweep.id)
        self.text = f"sweep {sweep.id}"
        self.last_state: dict[str, Any] = {}
        self._sent: dict[str, Any] = {}
        self._cost: tuple[float, str | None] = (float("-inf"), None)  # (when, words)

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
        return self._diff(
            {
                "state": {**view_state(state, self.spec), "cost": self.cost()},
                "charts": sweep_chart_data(state, self.spec),
                "notice": "",
            }
        )

    def cost(self) -> str | None:
        """What the trials have cost together (``cost.sweep_cost``), summed again every
        ``COST_S`` seconds while trials run; None where no trial's target has a price."""
        at, words = self._cost
        now = time.time()
        if now - at >= COST_S:
            try:
                words = sweep_cost(self.sweep.trials(), now)
            except Exception:  # the sweep's trials cannot be read now: the last sum stays
                return words
            self._cost = (now, words)
        return words

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
