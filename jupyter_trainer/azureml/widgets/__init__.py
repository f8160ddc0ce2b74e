"""``azureml.widgets.RunDetails``: the run's monitor (stage, progress, per-rank logs, live
charts), or for a HyperDrive run the sweep's: ``Run.monitor()``. In a notebook front end it
is the widget, displayed; under papermill or in a terminal, the text monitor, which follows
the run to its end and prints its summary."""

from __future__ import annotations

from typing import Any


class RunDetails:
    def __init__(self, run_instance: Any) -> None:
        inner = getattr(run_instance, "run", None)
        if inner is None:
            inner = getattr(run_instance, "sweep", None)
        if inner is None or not hasattr(inner, "monitor"):
            raise TypeError(f"RunDetails shows a submitted run, not {run_instance!r}")
        self.run_instance = run_instance
        self._inner = inner

    def show(self) -> None:
        shown = self._inner.monitor()
        if callable(getattr(shown, "_repr_mimebundle_", None)):  # the widget: display it
            from IPython.display import display

            display(shown)

    def get_widget_data(self, widget_settings: Any = None) -> dict[str, Any]:
        return {"status": self.run_instance.get_status()}


__all__ = ["RunDetails"]
