"""The live run monitor: an anywidget whose state a background thread keeps current.

One daemon thread per widget (the feeder) reads the run store through a ``RunFeed`` and is
the only writer of the widget's traits while it runs. It publishes at most four updates a
second, each one comm message holding every changed trait (``hold_sync``), and stops once
the run has ended and its last update is out, or when the widget is closed. It never prints
and never uses an Output widget. The front end's requests (Cancel, another rank's log,
other charts) arrive as comm messages and only set flags and wake the feeder.

Why anywidget: one ES module and one CSS file, shipped in this package, run unchanged in
JupyterLab 4, Notebook 7 and VS Code; anywidget's own front end comes in its wheel, so
nothing is fetched or built at run time and there is no second npm package to version.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
import weakref
from pathlib import Path
from typing import Any, Callable

import anywidget
import traitlets as t

from .feed import RunFeed

STATIC = Path(__file__).parent / "static"
# ES modules concatenated into the widget's single ESM, dependencies first. They stay
# separate files (chart.js and logview.js import nothing from the widget) for reuse.
ESM_PARTS = ("ansi.js", "chart.js", "logview.js", "form.js", "monitor.js")
UPDATE_INTERVAL = 0.25   # seconds between updates: at most 4 a second
BIG_CHARTS = 64 << 10    # chart payloads above this are re-sent at most once a second
HISTORY_STEP = 4 << 20   # bytes of event history read between two updates while catching up
CLOCK_REFRESH = 5.0      # seconds between state updates while nothing changes (kernel clock)

_LIVE: "weakref.WeakSet[RunMonitor]" = weakref.WeakSet()


def bundle_esm() -> str:
    """The widget's ESM: the modules in ``ESM_PARTS``, local imports removed."""
    local_import = re.compile(r'^import\s+\{[^}]*\}\s+from\s+"\./[\w.-]+\.js";\s*$', re.M)
    return "\n".join(f"// ---- {name} ----\n" + local_import.sub("", (STATIC / name).read_text())
                     for name in ESM_PARTS)


def live_monitors() -> list["RunMonitor"]:
    """Monitor widgets of this kernel that have not been closed (for tests and tools)."""
    return [m for m in list(_LIVE) if not m._closed]


class RunMonitor(anywidget.AnyWidget):
    """A run's live monitor, or a launch form that becomes one (``mode``)."""

    _esm = bundle_esm()
    _css = STATIC / "monitor.css"

    key = t.Unicode(help="unique per widget: what its views share in the page").tag(sync=True)
    mode = t.Unicode("monitor").tag(sync=True)
    run_id = t.Unicode("").tag(sync=True)
    info = t.Dict().tag(sync=True)
    state = t.Dict().tag(sync=True)
    progress = t.Dict().tag(sync=True)
    metrics = t.List().tag(sync=True)
    texts = t.Dict().tag(sync=True)  # text metrics: name -> {rank: last value}
    charts = t.Dict().tag(sync=True)
    chart_options = t.Dict({"x": "step", "agg": "ranks", "selected": None}).tag(sync=True)
    log = t.Dict().tag(sync=True)
    log_selection = t.Unicode("all").tag(sync=True)
    loading = t.Bool(False).tag(sync=True)
    notice = t.Unicode("").tag(sync=True)
    cancel_state = t.Unicode("").tag(sync=True)
    form = t.Dict().tag(sync=True)
    form_errors = t.Dict().tag(sync=True)
    form_busy = t.Bool(False).tag(sync=True)

    def __init__(self, run: Any = None, *, launcher: Any = None, **kwargs: Any) -> None:
        if launcher is not None:  # in the first message, so the form shows at once
            kwargs.update(mode="form", form=launcher.schema())
        super().__init__(key=uuid.uuid4().hex, **kwargs)
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[Any] = []
        self._feed: RunFeed | None = None
        self._run: Any = None
        self._launcher = launcher
        self._text = "run monitor"
        self._requests: set[str] = set()
        self._lock = threading.Lock()
        self._feeding = False
        self._last_push = 0.0
        self._last_state_push = 0.0
        self._notice = ""
        self._log_sent = 0
        self._log_gen = 0
        self._sent_log_selection: str | None = None  # the first log payload is a reset
        self.finished = threading.Event()  # set once the last update of a run is out
        self.updates_sent = 0
        self.on_msg(self._on_front_end_message)
        self.observe(self._on_option_change, names=["chart_options", "log_selection"])
        _route_messages_to_front_end_subshell(self)
        _LIVE.add(self)
        if launcher is not None:
            self._text = launcher.text()
        if run is not None:
            self.attach(run)

    # -- the run -----------------------------------------------------------------------
    @property
    def run(self) -> Any:
        return self._run

    def attach(self, run: Any) -> None:
        """Follow ``run`` from now on: its whole history first, then what it adds."""
        self._run = run
        self._feed = RunFeed(run)
        state = run.state
        with self.hold_sync():
            self.run_id = run.id
            self.mode = "monitor"
            self._feed.follower.state = state
            self.info = self._feed.info()
            self.state = self._feed.state_payload()
            self.loading = True
        self._last_push = time.monotonic()  # that was an update: the next one waits its turn
        self._text = f"run {run.id} {state.get('status')}"
        self._feeding = True
        self._thread = threading.Thread(target=self._feed_loop, name=f"jt-monitor-{run.id}",
                                        daemon=True)
        self._thread.start()

    def wait_final(self, timeout: float = 10.0) -> bool:
        """Block until the feeder has published the run's final state (True) or timeout."""
        return self.finished.wait(timeout)

    def close(self) -> None:
        self._closed = True
        self._stop.set()
        self._wake.set()
        super().close()

    # -- text/plain and display --------------------------------------------------------
    def __repr__(self) -> str:
        return f"<RunMonitor {self._text.splitlines()[0] if self._text else ''}>"

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        data["text/plain"] = self._text  # what the run looks like now, not at creation
        return data, metadata

    def _ipython_display_(self) -> None:
        """Display with a display id, so the saved text/plain can be brought up to date."""
        from IPython.display import display

        bundle = self._repr_mimebundle_()
        if bundle is None:
            return
        data, metadata = bundle
        self._handles.append(display(data, metadata=metadata, raw=True, display_id=True))

    def _refresh_displays(self) -> None:
        bundle = self._repr_mimebundle_()
        if bundle is None:
            return
        data, metadata = bundle
        for handle in self._handles:
            try:
                handle.update(data, metadata=metadata, raw=True)
            except Exception:  # the kernel is shutting down; the state is saved anyway
                pass

    # -- front-end requests ------------------------------------------------------------
    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "cancel":
            self._cancel()
        elif kind == "log_resync":
            self._request("log_reset")
        elif kind == "launch" and self._launcher is not None:
            self._launch(content.get("values") or {}, content.get("options") or {})

    def _on_option_change(self, change: dict[str, Any]) -> None:
        self._request("charts" if change["name"] == "chart_options" else "log_reset")

    def _request(self, what: str) -> None:
        with self._lock:
            self._requests.add(what)
            feeding = self._feeding
        if feeding:
            self._wake.set()
        elif self._feed is not None:
            self._serve()

    def _cancel(self) -> None:
        from ..errors import TrainerError

        if self._run is None:
            return
        try:
            self._run.cancel(wait=False)
            self._request("cancel:requested")
        except TrainerError as exc:
            self._request(f"cancel:{exc}")

    def _launch(self, values: dict[str, Any], options: dict[str, Any]) -> None:
        if self.form_busy or self._run is not None:
            return
        errors = self._launcher.check(values, options)
        if errors:
            self.form_errors = errors
            return
        self.form_errors = {}
        self.form_busy = True

        def submit() -> None:
            try:
                run = self._launcher.submit(values, options)
            except Exception as exc:  # shown in the form; nothing was started
                with self.hold_sync():
                    self.form_busy = False
                    self.form_errors = {"_": f"{type(exc).__name__}: {exc}"}
                return
            self.form_busy = False
            self.attach(run)

        threading.Thread(target=submit, name="jt-launch", daemon=True).start()

    # -- the feeder thread -------------------------------------------------------------
    def _feed_loop(self) -> None:
        feed = self._feed
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
                dirty.add("state")  # its "now" keeps a reloaded page's clocks right
            if now - self._last_push >= UPDATE_INTERVAL and (dirty or requests):
                charts = "charts" in requests or ("charts" in dirty and (
                    done or now - last_charts >= self._chart_interval()))
                self._push(feed, dirty, requests, charts=charts)
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
                time.sleep(0.001)  # catching up on history: let the kernel's thread run
                continue
            if dirty or requests:
                timeout = max(0.01, self._last_push + UPDATE_INTERVAL - time.monotonic())
            else:
                timeout = 2.0 if notice else UPDATE_INTERVAL
            self._wake.wait(timeout)
            self._wake.clear()
        self._feeding = False
        if not self._stop.is_set():
            self._text = feed.text()
            self._refresh_displays()
        self.finished.set()

    def _serve(self) -> None:
        """Answer front-end requests once the feeder has stopped (the run has ended)."""
        with self._lock:
            requests, self._requests = self._requests, set()
            if requests and self._feed is not None and not self._closed:
                self._push(self._feed, set(), requests, charts="charts" in requests)

    def _chart_interval(self) -> float:
        size = sum(len(s["x"]) + len(s["y"]) for c in self.charts.get("charts", {}).values()
                   for s in c["series"])
        return 1.0 if size > BIG_CHARTS else UPDATE_INTERVAL

    def _push(self, feed: RunFeed, dirty: set[str], requests: set[str], charts: bool) -> None:
        """Publish what changed as one comm message."""
        with self.hold_sync():
            if "info" in dirty:
                self.info = feed.info()
            if "state" in dirty:
                self.state = feed.state_payload()
                self._last_state_push = time.monotonic()
            if "data" in dirty:
                self.progress = feed.progress_payload()
                self.metrics = feed.metrics_payload()
                self.texts = feed.texts_payload()
            if charts:
                self.charts = feed.chart_payload(dict(self.chart_options))
            if "notice" in dirty:
                self.notice = self._notice
            for request in requests:
                if request.startswith("cancel:"):
                    self.cancel_state = request.split(":", 1)[1]
            selection = self.log_selection
            reset = "log_reset" in requests or selection != self._sent_log_selection
            if reset:
                self._log_gen += 1
                self._log_sent = 0
            payload, self._log_sent = feed.log_payload(selection, self._log_sent, self._log_gen, reset)
            self._sent_log_selection = selection
            if payload is not None:
                self.log = payload
            self.loading = feed.behind
        self._text = feed.text()
        self._last_push = time.monotonic()
        self.updates_sent += 1


def _route_messages_to_front_end_subshell(widget: RunMonitor) -> None:
    """Let the Cancel button work while ``%%train`` blocks the kernel's main thread.

    JupyterLab >= 4.4 sends widget messages over a kernel subshell (its "comms over
    subshells" setting), which ipykernel >= 7 handles in their own thread. ipykernel routes a
    comm's messages to the subshell that last published on it, though, and our feeder thread
    publishes with the main shell's context, so the messages would queue behind the blocked
    cell. Routing each message to the subshell the front end chose keeps them flowing. With
    an older front end or kernel there is no such hook, and Cancel acts once the cell ends
    (the notebook's Stop button cancels a waiting run in any version).
    """
    comm = getattr(widget, "comm", None)
    if comm is not None and hasattr(comm, "_reply_subshell_for"):
        route: Callable[[Any, Any], Any] = lambda _data, default: default  # noqa: E731
        comm._reply_subshell_for = route
