"""MLflow's fluent calls in a rank report to the run (``autolog``; what each becomes:
``trackers``).

``mlflow.log_metric(key, value, step)`` and ``log_metrics(values, step)`` become metrics at
``step`` on the rank that called them; ``log_param``/``log_params`` the tags ``param.NAME``;
``set_tag``/``set_tags`` the tags ``NAME``. Then the call goes on to MLflow, unless:

- ``$JUPYTER_TRAINER_TRACKERS=here``: MLflow gets nothing;
- no tracking URI is configured (neither ``$MLFLOW_TRACKING_URI`` nor
  ``mlflow.set_tracking_uri``) and no MLflow run was started: MLflow would make its default
  store (``mlflow.db``, ``mlruns/``) in the rank's working folder, a private copy removed
  when the run ends, each rank its own. The call is recorded here only, so nothing is made
  and nothing is lost. A run the code started (``mlflow.start_run``) gets its calls.

A call made by a framework that reports through its own hook (transformers' and
Accelerate's MLflow integrations) is not recorded a second time. MLflow's own autolog
flavours that log through ``mlflow.log_metrics`` are recorded; those that write with
``MlflowClient`` directly are not. Standard library only: the module patched is the one the
rank's code imported.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from . import autolog, trackers

FUNCTIONS = ("log_metric", "log_metrics", "log_param", "log_params", "set_tag", "set_tags")


def patch(module: Any) -> None:
    """``mlflow.log_metric`` and the rest (in ``mlflow`` and ``mlflow.tracking.fluent``)
    also report to the run."""
    fluent: Any = sys.modules.get("mlflow.tracking.fluent")
    if fluent is None or getattr(fluent, "_jt_autolog", False):
        return
    fluent._jt_autolog = True
    for name in FUNCTIONS:
        original = getattr(fluent, name, None)
        if original is None:
            continue
        wrapped = globals()[f"_{name}"](original, fluent)
        setattr(fluent, name, wrapped)
        if getattr(module, name, None) is original:
            setattr(module, name, wrapped)


def _to_mlflow(fluent: Any, kw: dict[str, Any]) -> bool:
    """Whether the call goes on to MLflow (see the module's docstring)."""
    if trackers.only_here():
        return False
    if kw.get("run_id") is not None:
        return True
    try:
        utils = sys.modules["mlflow.tracking._tracking_service.utils"]
        return bool(utils.is_tracking_uri_set() or fluent.active_run() is not None)
    except Exception:
        return True  # an MLflow this code does not know: as it would have been


def _ours() -> bool:
    return not trackers.called_from(autolog.FRAMEWORKS)


def _log_metric(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def log_metric(key: Any, value: Any, step: Any = None, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.metrics(step, {key: value})
        return original(key, value, step, *args, **kw) if _to_mlflow(fluent, kw) else None

    return log_metric


def _log_metrics(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def log_metrics(metrics: Any, step: Any = None, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.metrics(step, metrics)
        return original(metrics, step, *args, **kw) if _to_mlflow(fluent, kw) else None

    return log_metrics


def _log_param(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def log_param(key: Any, value: Any, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.params({key: value})
        return original(key, value, *args, **kw) if _to_mlflow(fluent, kw) else value

    return log_param


def _log_params(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def log_params(params: Any, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.params(params)
        return original(params, *args, **kw) if _to_mlflow(fluent, kw) else None

    return log_params


def _set_tag(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_tag(key: Any, value: Any, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.tags({key: value})
        return original(key, value, *args, **kw) if _to_mlflow(fluent, kw) else None

    return set_tag


def _set_tags(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def set_tags(tags: Any, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.tags(tags)
        return original(tags, *args, **kw) if _to_mlflow(fluent, kw) else None

    return set_tags
