"""MLflow's fluent calls in a rank report to the run (``autolog``; what each becomes:
``trackers``).

``mlflow.log_metric(key, value, step)`` and ``log_metrics(values, step)`` become metrics at
``step`` on the rank that called them; ``log_param``/``log_params`` the tags ``param.NAME``;
``set_tag``/``set_tags`` the tags ``NAME``. Then the call goes on to MLflow, unless:

- ``$JUPYTER_TRAINER_TRACKERS=here``: MLflow gets nothing;
- no tracking URI is configured (neither ``$MLFLOW_TRACKING_URI`` nor
  ``mlflow.set_tracking_uri``) and no MLflow run was started: the call is recorded here
  only, and nothing is made.

With no tracking URI configured, MLflow's default store would be ``./mlflow.db`` (and
``./mlruns`` for artifacts) in the rank's working folder: one folder for all the ranks of a
node, whose first ``start_run`` calls race to create the same database and fail
(``duplicate column name``), and a private copy removed when the run ends. So the rank's
default store is ``outputs/mlflow/rank-R/`` instead (``mlflow.db`` and ``artifacts/``), made
only for code that starts MLflow runs of its own and kept with the run's outputs; an empty
one is removed when the rank exits.

A call made by a framework that reports through its own hook (transformers' and
Accelerate's MLflow integrations) is not recorded a second time. MLflow's own autolog
flavours that log through ``mlflow.log_metrics`` are recorded; those that write with
``MlflowClient`` directly are not. Standard library only: the module patched is the one the
rank's code imported.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
from collections.abc import Callable
from typing import Any

from ..rank import runtime
from . import autolog, trackers

UTILS = "mlflow.tracking._tracking_service.utils"  # where MLflow keeps its tracking URI
FUNCTIONS = ("log_metric", "log_metrics", "log_param", "log_params", "set_tag", "set_tags")


def patch(module: Any) -> None:
    """``mlflow.log_metric`` and the rest (in ``mlflow`` and ``mlflow.tracking.fluent``)
    also report to the run."""
    fluent: Any = sys.modules.get("mlflow.tracking.fluent")
    if fluent is None or getattr(fluent, "_jt_autolog", False):
        return
    fluent._jt_autolog = True
    try:
        _default_store(module)
    except Exception as exc:
        autolog.warn(f"mlflow's default store: {exc}")
    for name in FUNCTIONS:
        original = getattr(fluent, name, None)
        if original is None:
            continue
        wrapped = globals()[f"_{name}"](original, fluent)
        setattr(fluent, name, wrapped)
        if getattr(module, name, None) is original:
            setattr(module, name, wrapped)


_store: dict[str, str] = {}  # "uri": the rank's default store, when it is the one in use


def _default_store(module: Any) -> None:
    """Point MLflow at ``outputs/mlflow/rank-R/`` when no tracking URI is configured."""
    utils: Any = sys.modules.get(UTILS)
    if utils is None or utils.is_tracking_uri_set() or not runtime.in_run:
        return
    folder = os.path.join(str(runtime.outputs_dir), "mlflow", f"rank-{runtime.rank}")
    os.makedirs(folder, exist_ok=True)
    atexit.register(_drop_if_empty, folder)
    if hasattr(utils, "DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH"):  # a new store's artifact root
        utils.DEFAULT_LOCAL_FILE_AND_ARTIFACT_PATH = os.path.join(folder, "artifacts")
    _store["uri"] = "sqlite:///" + os.path.join(folder, "mlflow.db")
    # As the variable, not set_tracking_uri: a URI the code sets later, either way, wins.
    os.environ["MLFLOW_TRACKING_URI"] = _store["uri"]


def _drop_if_empty(folder: str) -> None:
    for path in (folder, os.path.dirname(folder)):
        try:
            os.rmdir(path)
        except OSError:
            return


def _to_mlflow(fluent: Any, kw: dict[str, Any]) -> bool:
    """Whether the call goes on to MLflow (see the module's docstring)."""
    if trackers.only_here():
        return False
    if kw.get("run_id") is not None:
        return True
    try:
        if fluent.active_run() is not None:
            return True
        utils = sys.modules[UTILS]
        if _store and utils.get_tracking_uri() == _store["uri"]:
            return False  # no URI of the code's: no run of its own to log to
        return bool(utils.is_tracking_uri_set())
    except Exception:
        return True  # an MLflow this code does not know: as it would have been


def _ours() -> bool:
    return not trackers.called_from(autolog.FRAMEWORKS)


def _log_metric(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def log_metric(key: Any, value: Any, step: Any = None, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.metrics(step, {key: value}, "mlflow")
        return original(key, value, step, *args, **kw) if _to_mlflow(fluent, kw) else None

    return log_metric


def _log_metrics(original: Callable[..., Any], fluent: Any) -> Callable[..., Any]:
    @functools.wraps(original)
    def log_metrics(metrics: Any, step: Any = None, *args: Any, **kw: Any) -> Any:
        if _ours():
            trackers.metrics(step, metrics, "mlflow")
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
