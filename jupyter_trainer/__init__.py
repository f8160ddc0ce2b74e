"""jupyter_trainer: distributed PyTorch training, native to Jupyter.

``import jupyter_trainer as jt`` stays cheap: the API, IPython and torch are imported only
when first used.
"""

from __future__ import annotations

from typing import Any

from .core import hooks
from .core.version import __version__ as __version__

_API = {"submit", "rerun", "resume", "diff", "get_run", "runs", "Run"}
_SWEEP_API = {"sweep", "sweeps", "get_sweep", "Sweep"}
_MODEL_API = {"models", "get_model", "delete_model", "Model"}
_CHECK_API = {"check", "CheckResult"}
_SESSION_API = {"session", "sessions", "start_session", "Session"}
__all__ = sorted(  # noqa: PLE0605
    _API
    | _SWEEP_API
    | _MODEL_API
    | _CHECK_API
    | _SESSION_API
    | {"load_ipython_extension", "__version__"}
)


def __getattr__(name: str) -> Any:
    if name in _API:
        from .api import runs as api

        return getattr(api, name)
    if name in _SWEEP_API:
        from .api.sweeps import functions as sweep_api

        return getattr(sweep_api, name)
    if name in _MODEL_API:
        from .api import models as model_registry

        return getattr(model_registry, name)
    if name in _CHECK_API:
        from .api import check as checks

        return getattr(checks, name)
    if name in _SESSION_API:
        from .api import sessions

        return getattr(sessions, name)
    raise AttributeError(f"module 'jupyter_trainer' has no attribute {name!r}")


def _run_monitor(run: Any, **options: Any) -> Any:
    from .frontends.widgets import monitor

    return monitor(run, **options)


def _sweep_monitor(sweep: Any, **options: Any) -> Any:
    from .frontends.widgets.sweep import sweep_monitor

    return sweep_monitor(sweep, **options)


hooks.set_monitor("run", _run_monitor)
hooks.set_monitor("sweep", _sweep_monitor)


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_trainer``: register ``%%train``, ``%train`` and ``%environment``."""
    from .frontends.magics import register

    register(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    pass


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """The prebuilt JupyterLab extension inside the package (``jupyter labextension develop``)."""
    return [{"src": "frontends/labextension", "dest": "jupyter-trainer-labextension"}]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    """The REST API (``jupyter_trainer.frontends.server``), enabled automatically on install."""
    return [{"module": "jupyter_trainer.frontends.server"}]
