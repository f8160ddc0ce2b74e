"""Framework code reports to the run with no extra line (``--no-autolog`` turns it off).

The boot script calls ``install`` before the rank's code runs. For each framework below it
only registers an import hook (``import_hooks.when_imported``): the framework is patched the
moment the rank's own code imports it, and a rank that never imports one loads nothing
more. What each patch reports goes through ``runtime.log``, so every rank reports as
itself, into this run, with no tracker run of its own.

- TensorBoard: ``SummaryWriter.add_scalar(tag, value, global_step)`` becomes the metric
  ``tag`` at step ``global_step``, and ``add_scalars(main_tag, {name: value}, step)`` the
  metrics ``main_tag/name``; the writer still writes its event files as before. Both
  ``torch.utils.tensorboard`` and ``tensorboardX`` are patched, and so is every library
  that writes through them (the TensorBoard loggers of Lightning and of transformers).

A report never breaks the user's training: a value that cannot be recorded is dropped.
Standard library only: copied into every snapshot.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from . import runtime
from .import_hooks import when_imported

AUTOLOG_KEY = "autolog"  # watch.autolog of spec.json: false with --no-autolog


def enabled(run_dir: str | None) -> bool:
    """Whether this run captures framework calls: yes unless it was started with
    ``--no-autolog`` (``watch.autolog`` false in its spec.json), and never outside a run."""
    if not run_dir:
        return False
    from . import run_inputs

    try:
        watch = run_inputs.from_spec(run_dir, "watch")
    except RuntimeError:
        return True
    return not isinstance(watch, dict) or watch.get(AUTOLOG_KEY, True) is not False


def install(run_dir: str | None = None) -> bool:
    """Register the hooks of every framework; False (and nothing registered) when the run
    does not capture them."""
    run_dir = run_dir if run_dir is not None else os.environ.get("JT_RUN_DIR")
    if not enabled(run_dir):
        return False
    for module, patch in HOOKS.items():
        when_imported(module, patch)
    return True


def report(step: Any, values: dict[str, Any]) -> None:
    """One metric event from a framework's call; dropped rather than ever raising."""
    try:
        runtime.log(step=None if step is None else int(step), **values)
    except Exception:
        pass


def patch_summary_writer(module: Any) -> None:
    """``SummaryWriter.add_scalar`` and ``add_scalars`` also report to the run."""
    cls = getattr(module, "SummaryWriter", None)
    if cls is None or getattr(cls, "_jt_autolog", False):
        return
    add_scalar, add_scalars = cls.add_scalar, cls.add_scalars

    @functools.wraps(add_scalar)
    def logged_scalar(
        self: Any, tag: Any, scalar_value: Any, global_step: Any = None, *args: Any, **kw: Any
    ) -> Any:
        result = add_scalar(self, tag, scalar_value, global_step, *args, **kw)
        report(global_step, {str(tag): scalar_value})
        return result

    @functools.wraps(add_scalars)
    def logged_scalars(
        self: Any, main_tag: Any, values: Any, global_step: Any = None, *args: Any, **kw: Any
    ) -> Any:
        result = add_scalars(self, main_tag, values, global_step, *args, **kw)
        try:
            named = {f"{main_tag}/{name}": value for name, value in dict(values).items()}
        except (TypeError, ValueError):
            return result
        report(global_step, named)
        return result

    cls.add_scalar, cls.add_scalars = logged_scalar, logged_scalars
    cls._jt_autolog = True


HOOKS = {
    "torch.utils.tensorboard.writer": patch_summary_writer,
    "tensorboardX.writer": patch_summary_writer,
}
