"""Weights & Biases calls in a rank report to the run (``autolog``; what each becomes:
``trackers``).

- ``wandb.log(data, step=None, commit=None)`` (and ``run.log``): the numbers of ``data``
  become metrics at the step W&B gives them (``step`` when given, else the run's current
  step, which moves on as W&B moves it), nested mappings named ``outer.inner`` as W&B shows
  them;
- ``wandb.init(config=...)`` and every later ``wandb.config`` update (``config.lr = ...``,
  ``config["lr"] = ...``, ``update``, ``setdefaults``): the tags ``param.NAME``;
- ``wandb.summary[NAME] = value`` and ``summary.update``: the metric ``summary/NAME``.

W&B still gets every call as the code configured it (online, ``WANDB_MODE=offline``,
``disabled``). With ``$JUPYTER_TRAINER_TRACKERS=here``, ``wandb.init`` starts a disabled W&B run instead
(W&B's own no-op mode: no files, no network), so the calls reach the run only. A call made by
a framework that reports through its own hook (transformers' and Lightning's W&B loggers) is
not recorded twice; W&B's own calls to itself are not recorded. Standard library only.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any

from . import autolog, trackers

WANDB = ("wandb.",)  # W&B's own modules: their calls to config and summary are its own
NOT_OURS = WANDB + autolog.FRAMEWORKS
INIT_HOMES = ("wandb", "wandb.sdk", "wandb.sdk.wandb_init")


def patch(module: Any) -> None:
    """``wandb.init``, ``Run.log``, ``Config`` and ``Summary`` also report to the run."""
    init_module: Any = sys.modules.get("wandb.sdk.wandb_init")
    if init_module is None or getattr(init_module, "_jt_autolog", False):
        return
    init_module._jt_autolog = True
    original = init_module.init
    wrapped = _init(original)
    for home in INIT_HOMES:
        found: Any = sys.modules.get(home)
        if found is not None and getattr(found, "init", None) is original:
            found.init = wrapped
    for where, name in (
        ("wandb.sdk.wandb_run", "Run"),
        ("wandb.sdk.lib.noop_run", "NoopRun"),
    ):
        cls = _unpatched(sys.modules.get(where), name)
        if cls is not None and "log" in vars(cls):
            cls.log = _log(cls.log)
    config = _unpatched(sys.modules.get("wandb.sdk.wandb_config"), "Config")
    if config is not None:
        _patch_config(config)
    for where, name in (
        ("wandb.sdk.wandb_summary", "Summary"),
        ("wandb.sdk.lib.disabled", "SummaryDisabled"),
    ):
        cls = _unpatched(sys.modules.get(where), name)
        if cls is not None:
            _patch_summary(cls)


def _unpatched(module: Any, name: str) -> Any:
    """Class ``name`` of ``module`` unless it was patched already, marked as patched now: its
    own mark, not one a base class it inherits from carries (``NoopRun`` is a ``Run``)."""
    cls = getattr(module, name, None)
    if cls is None or vars(cls).get("_jt_autolog"):
        return None
    cls._jt_autolog = True
    return cls


def _init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def init(*args: Any, **kw: Any) -> Any:
        if trackers.only_here():
            kw["mode"] = "disabled"
            kw.pop("settings", None)  # its mode would say otherwise
        run = original(*args, **kw)
        try:
            trackers.params(trackers.flat(dict(run.config.items())))
        except Exception:
            pass
        return run

    return init


def _log(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def log(self: Any, data: Any, step: Any = None, commit: Any = None, *a: Any, **kw: Any) -> Any:
        ours = not trackers.called_from(autolog.FRAMEWORKS)
        current = self.__dict__.get("_jt_step", getattr(self, "_starting_step", 0) or 0)
        result = original(self, data, step, commit, *a, **kw)
        try:
            after = current  # how W&B moves its step (``Run._log``)
            if step is not None and step > after:
                after = int(step)
            if (step is None and commit is None) or commit:
                after += 1
            self.__dict__["_jt_step"] = after
        except Exception:
            pass
        if ours and isinstance(data, Mapping):
            trackers.metrics(current if step is None else step, trackers.flat(data), "wandb")
        return result

    return log


def _patch_config(cls: Any) -> None:
    setitem, update, setdefaults = cls.__setitem__, cls.update, cls.setdefaults

    def tagged(self: Any, key: Any, val: Any) -> None:
        setitem(self, key, val)
        if not trackers.called_from(NOT_OURS) and not str(key).startswith("_"):
            trackers.params(trackers.flat({str(key): val}))

    @functools.wraps(update)
    def tagged_update(self: Any, d: Any, *args: Any, **kw: Any) -> Any:
        result = update(self, d, *args, **kw)
        if not trackers.called_from(NOT_OURS):
            _config_params(d)
        return result

    @functools.wraps(setdefaults)
    def tagged_setdefaults(self: Any, d: Any, *args: Any, **kw: Any) -> Any:
        kept = {k: v for k, v in _mapping(d).items() if k not in self}
        result = setdefaults(self, d, *args, **kw)
        if not trackers.called_from(NOT_OURS):
            _config_params(kept)
        return result

    cls.__setitem__ = cls.__setattr__ = functools.wraps(setitem)(tagged)
    cls.update, cls.setdefaults = tagged_update, tagged_setdefaults


def _mapping(d: Any) -> dict[str, Any]:
    """A config update's values: a mapping, or an object's fields (``argparse.Namespace``)."""
    if isinstance(d, Mapping):
        return {str(k): v for k, v in d.items()}
    return {str(k): v for k, v in getattr(d, "__dict__", {}).items()}


def _config_params(d: Any) -> None:
    try:
        values = {k: v for k, v in _mapping(d).items() if not k.startswith("_")}
        trackers.params(trackers.flat(values))
    except Exception:
        pass


def _patch_summary(cls: Any) -> None:
    setitem, update = cls.__setitem__, cls.update

    def summed(self: Any, key: Any, val: Any) -> None:
        setitem(self, key, val)
        if not trackers.called_from(NOT_OURS):
            _summary({key: val})

    @functools.wraps(update)
    def summed_update(self: Any, d: Any = (), *args: Any, **kw: Any) -> Any:
        result = update(self, d, *args, **kw)
        if not trackers.called_from(NOT_OURS):
            _summary({**_mapping(d), **kw})
        return result

    cls.__setitem__ = cls.__setattr__ = functools.wraps(setitem)(summed)
    cls.update = summed_update


def _summary(values: Mapping[Any, Any]) -> None:
    try:
        named = trackers.flat({str(k): v for k, v in values.items()})
        trackers.texts(None, {f"summary/{k}": v for k, v in named.items()})
    except Exception:
        pass
