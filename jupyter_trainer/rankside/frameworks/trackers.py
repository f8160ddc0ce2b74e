"""What MLflow's and W&B's calls in a rank become in the run (``mlflow_hooks``, ``wandb_hooks``).

- a metric (``mlflow.log_metric``, ``wandb.log``): the run's metric of that name, on the rank
  that logged it, at the step it was logged with;
- a param (``mlflow.log_param``, ``wandb.config``): the run's tag ``param.NAME`` (the last
  value wins; anything that looks like a secret masked); the MLflow mirror sends it back as
  the MLflow param ``NAME``;
- a tag (``mlflow.set_tag``): the run's tag ``NAME``.

Where the call goes besides: ``$JUPYTER_TRAINER_TRACKERS`` of the rank, read at each call. Unset or
``both`` (the default): the tracker gets the call as the code configured it. ``here``: the
call is recorded here only, and the tracker gets nothing (an MLflow call is not made; a
``wandb.init`` starts a disabled W&B run, so ``wandb.log`` and the rest do nothing there).

A call is recorded even when the tracker then refuses it; a value that cannot be recorded is
dropped. Standard library only: copied into every snapshot, and it never imports a tracker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from ..rank import runtime
from ..redaction.redact import redact_object, redact_text
from . import autolog

SWITCH = "JUPYTER_TRAINER_TRACKERS"  # "both" (the default) or "here"
BOTH, HERE = "both", "here"
PARAM = "param."  # the run's tag of a tracker's param NAME is "param.NAME"
TAG_CHARS = 5000  # MLflow's longest tag value: a longer one is cut
_warned: set[str] = set()


def only_here() -> bool:
    """Whether the tracker calls are recorded here only (``$JUPYTER_TRAINER_TRACKERS=here``)."""
    value = os.environ.get(SWITCH)
    if not value or value == BOTH:
        return False
    if value == HERE:
        return True
    if value not in _warned:
        _warned.add(value)
        print(
            f"[jt] {SWITCH}={value!r} is neither 'both' nor 'here': tracker calls go to the "
            "tracker and to the run",
            file=sys.stderr,
            flush=True,
        )
    return False


def metrics(step: Any, values: Any, source: str) -> None:
    """Tracker ``source``'s metrics at ``step`` (None: no step), their numbers only; a value
    the code has just logged through another tracker is not recorded twice."""
    try:
        autolog.report(step, dict(values), source)
    except Exception:
        pass


def texts(step: Any, values: Mapping[str, Any]) -> None:
    """A tracker's values as metrics: numbers charted, text kept as the last value."""
    try:
        kept = {
            str(k): v if autolog._number(v) else redact_text(_short(v))
            for k, v in values.items()
            if v is not None
        }
        if kept:
            runtime.log(step=None if step is None else int(step), **kept)
    except Exception:
        pass


def params(values: Any) -> None:
    """A tracker's params as the run's tags ``param.NAME``."""
    tags(values, PARAM)


def tags(values: Any, prefix: str = "") -> None:
    """A tracker's tags (``prefix`` before each name), secrets masked: every reader of the
    run reads its tags."""
    try:
        shown = {
            str(k): redact_object(v, k if isinstance(k, str) else None)
            for k, v in dict(values).items()
        }
        if shown:
            runtime.tag(**{f"{prefix}{k}": redact_text(_short(v)) for k, v in shown.items()})
    except Exception:
        pass


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= TAG_CHARS else text[: TAG_CHARS - 3] + "..."


def flat(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings as one level of names joined with dots, as W&B shows them."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def called_from(packages: tuple[str, ...]) -> bool:
    """Whether the patched function calling this was called by code of ``packages`` (the
    tracker itself, or a framework that reports through its own hook)."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return isinstance(caller, str) and caller.startswith(packages)
