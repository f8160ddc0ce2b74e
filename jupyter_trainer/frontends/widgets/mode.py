"""Which monitor a notebook gets: the live widget, or text plus static charts.

``JUPYTER_TRAINER_MONITOR`` decides: ``widget``, ``text`` or ``auto`` (the default). Auto
picks the widget when the code runs in a Jupyter kernel on behalf of a front end a person
is using, and text otherwise. The test for "a person is using it" is the execute request's
``allow_stdin``: JupyterLab, Notebook 7 and VS Code send ``true`` (they can answer
``input()``), while papermill, nbconvert and every other nbclient-based executor send
``false``. That holds even when papermill is started from inside a notebook, where
environment variables such as ``JPY_SESSION_NAME`` are inherited and would mislead.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

MODE_ENV = "JUPYTER_TRAINER_MONITOR"
MODES = ("auto", "widget", "text")


def kernel_shell() -> Any:
    """The IPython shell if this code runs inside a Jupyter kernel, else None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython else None
    return shell if shell is not None and getattr(shell, "kernel", None) is not None else None


def _front_end_takes_input(shell: Any) -> bool:
    try:
        parent = shell.kernel.get_parent("shell")
    except Exception:
        return False
    content = (parent or {}).get("content") or {}
    return bool(content.get("allow_stdin"))


def monitor_mode() -> str:
    """``"widget"`` or ``"text"`` for a monitor shown now (see the module docstring)."""
    value = os.environ.get(MODE_ENV, "auto").strip().lower() or "auto"
    if value not in MODES:
        warnings.warn(
            f"{MODE_ENV}={value!r} is not one of {', '.join(MODES)}; using auto", stacklevel=2
        )
        value = "auto"
    shell = kernel_shell()
    if shell is None:
        return "text"  # a terminal or plain IPython: there is nothing to draw a widget in
    if value != "auto":
        return value
    return "widget" if _front_end_takes_input(shell) else "text"


def takes_input() -> bool:
    """Whether a person can answer ``input()`` here: a terminal, or a notebook front end a
    person uses; not papermill, nbconvert or another executor (see the module docstring)."""
    shell = kernel_shell()
    return shell is None or _front_end_takes_input(shell)
