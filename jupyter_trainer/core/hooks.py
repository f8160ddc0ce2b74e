"""Calls a lower layer makes into a higher one, wired by the package when it is imported.

``Run.monitor()`` and ``Sweep.monitor()`` belong to the Python API, but what they show is
a front end's (the widget in a notebook, text elsewhere). The API asks here; the package's
``__init__`` registers the front ends' monitors, so no layer imports one above it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import TrainerError

_monitors: dict[str, Callable[..., Any]] = {}


def set_monitor(kind: str, show: Callable[..., Any]) -> None:
    """``show(obj, **options)`` is the monitor of a ``kind`` ("run" or "sweep")."""
    _monitors[kind] = show


def monitor(kind: str, obj: Any, **options: Any) -> Any:
    try:
        show = _monitors[kind]
    except KeyError:
        raise TrainerError(
            f"no monitor for a {kind} is set up; import jupyter_trainer first"
        ) from None
    return show(obj, **options)
