"""The live run monitor: an anywidget whose state a ``ViewFeeder`` keeps current.

The feeder's thread (``frontends.views.feeder``) is the only writer of the widget's traits while it
runs: each update is one comm message holding every changed trait (``hold_sync``). It never
prints and never uses an Output widget. The front end's requests (Cancel, another rank's
log, other charts) arrive as comm messages and only set flags and wake the feeder.

Why anywidget: one ES module and one CSS file, shipped in this package, run unchanged in
JupyterLab 4, Notebook 7 and VS Code; anywidget's own front end comes in its wheel, so
nothing is fetched or built at run time. The ES module is the run view that the lab
extension's build bundles (``labextension/src/view``), the same one the Lab panel shows.
"""

from __future__ import annotations

import threading
import uuid
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anywidget
import traitlets as t

from ..views.feeder import ViewFeeder

STATIC = Path(__file__).parent / "static"  # the lab extension's build writes the view here
MISSING_VIEW = """export default { render({ el }) { el.textContent = %r; } };"""

RUN_MIME = "application/vnd.jupyter-trainer.run+json"  # labextension/src/runoutput.ts

_LIVE: weakref.WeakSet[RunMonitor] = weakref.WeakSet()


def view_asset(name: str) -> str:
    """A built file of the run view, or (for the ESM) one that says how to build it."""
    path = STATIC / name
    if path.is_file():
        return path.read_text()
    if name.endswith(".js"):
        return MISSING_VIEW % (
            f"The jupyter_trainer run view is not built ({path} is missing): "
            "run `npm run build` in labextension/, or reinstall the package."
        )
    return ""


def live_monitors() -> list[RunMonitor]:
    """Monitor widgets of this kernel that have not been closed (for tests and tools)."""
    return [m for m in list(_LIVE) if not m._closed]


class RunMonitor(anywidget.AnyWidget):
    """A run's live monitor, or a launch form that becomes one (``mode``)."""

    _esm = view_asset("widget.js")
    _css = view_asset("widget.css")

    key = t.Unicode(help="unique per widget: what its views share in the page").tag(sync=True)
    mode = t.Unicode("monitor").tag(sync=True)
    run_id = t.Unicode("").tag(sync=True)
    info = t.Dict().tag(sync=True)
    state = t.Dict().tag(sync=True)
    progress = t.Dict().tag(sync=True)
    metrics: t.List[dict[str, Any]] = t.List().tag(sync=True)  # metrics_payload()
    texts = t.Dict().tag(sync=True)  # text metrics: name -> {rank: last value}
    system = t.Dict().tag(sync=True)  # views.system_view.system_payload()
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
        self._handles: list[Any] = []
        self._feeder: ViewFeeder | None = None
        self._run: Any = None
        self._launcher = launcher
        self._text = launcher.text() if launcher is not None else "run monitor"
        self._unattached = threading.Event()  # never set: no run, no last update
        self.on_msg(self._on_front_end_message)
        self.observe(self._on_option_change, names=["chart_options", "log_selection"])
        route_messages_to_front_end_subshell(self)
        _LIVE.add(self)
        if run is not None:
            self.attach(run)

    # -- the run -----------------------------------------------------------------------
    @property
    def run(self) -> Any:
        return self._run

    @property
    def updates_sent(self) -> int:
        return self._feeder.updates_sent if self._feeder is not None else 0

    def attach(self, run: Any) -> None:
        """Follow ``run`` from now on: its whole history first, then what it adds."""
        self._run = run
        feeder = ViewFeeder(run, self._publish, name=f"jt-monitor-{run.id}")
        feeder.chart_options = dict(self.chart_options)
        feeder.log_selection = self.log_selection
        feeder.on_done = self._refresh_displays
        with self.hold_sync():
            self.mode = "monitor"
            for name, value in feeder.first().items():
                setattr(self, name, value)
        self._text = feeder.text
        self._feeder = feeder
        feeder.start()

    @property
    def finished(self) -> threading.Event:
        """Set once the last update of the run is out."""
        return self._feeder.finished if self._feeder is not None else self._unattached

    def wait_final(self, timeout: float = 10.0) -> bool:
        """Block until the feeder has published the run's final state (True) or timeout."""
        return self.finished.wait(timeout)

    def close(self) -> None:
        self._closed = True
        if self._feeder is not None:
            self._feeder.stop()
        super().close()

    def _publish(self, changes: dict[str, Any]) -> None:
        if self._closed:
            return
        with self.hold_sync():
            for name, value in changes.items():
                setattr(self, name, value)
        self._text = self._feeder.text if self._feeder is not None else self._text

    # -- text/plain and display --------------------------------------------------------
    def __repr__(self) -> str:
        return f"<RunMonitor {self._text.splitlines()[0] if self._text else ''}>"

    def _repr_mimebundle_(self, **kwargs: Any):
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle
        data["text/plain"] = self._text  # what the run looks like now, not at creation
        if self.run_id:  # the lab extension shows the run from the server once the model is gone
            data[RUN_MIME] = {"run_id": self.run_id}
        return data, metadata

    def _ipython_display_(self) -> None:
        """Display with a display id, so the saved text/plain can be brought up to date."""
        bundle = self._repr_mimebundle_()
        if bundle is not None:
            self._handles.append(display_updatable(*bundle))

    def _refresh_displays(self) -> None:
        if self._feeder is not None:
            self._text = self._feeder.text
        bundle = self._repr_mimebundle_()
        if bundle is not None:
            update_displays(self._handles, *bundle)

    # -- front-end requests ------------------------------------------------------------
    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict):
            return
        kind = content.get("type")
        if kind == "cancel":
            self._cancel()
        elif kind == "log_resync" and self._feeder is not None:
            self._feeder.request("log_reset")
        elif kind == "launch" and self._launcher is not None:
            self._launch(content.get("values") or {}, content.get("options") or {})

    def _on_option_change(self, change: dict[str, Any]) -> None:
        feeder = self._feeder
        if feeder is None:
            return
        feeder.chart_options = dict(self.chart_options)
        feeder.log_selection = self.log_selection
        feeder.request("charts" if change["name"] == "chart_options" else "log_reset")

    def _cancel(self) -> None:
        from ...core.errors import TrainerError

        if self._run is None or self._feeder is None:
            return
        try:
            self._run.cancel(wait=False, reason="canceled from the notebook (Cancel button)")
            self._feeder.request("cancel:requested")
        except TrainerError as exc:
            self._feeder.request(f"cancel:{exc}")

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


def display_updatable(data: dict[str, Any], metadata: dict[str, Any] | None = None) -> Any:
    """Display a widget's bundle with a display id: the handle that can update it later."""
    from IPython.display import display

    return display(data, metadata=metadata or {}, raw=True, display_id=True)


def update_displays(
    handles: list[Any], data: dict[str, Any], metadata: dict[str, Any] | None = None
) -> None:
    """Bring every display of a widget up to date (its text/plain, as saved notebooks keep)."""
    for handle in handles:
        try:
            handle.update(data, metadata=metadata or {}, raw=True)
        except Exception:  # the kernel is shutting down; the state is saved anyway
            pass


def route_messages_to_front_end_subshell(widget: Any) -> None:
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
        route: Callable[[Any, Any], Any] = lambda _data, default: default
        comm._reply_subshell_for = route
