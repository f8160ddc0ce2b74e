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

- MLflow's ``log_metric``/``log_metrics``/``log_param(s)``/``set_tag(s)`` and W&B's
  ``wandb.log``/``wandb.config``/``wandb.summary``: ``mlflow_hooks``, ``wandb_hooks`` (what
  each becomes, and ``$JUPYTER_TRAINER_TRACKERS=here`` that keeps them from the tracker: ``trackers``).

- transformers ``Trainer`` and Accelerate: ``hf_hooks`` (``accelerate_state`` keeps
  Accelerate's ``save_state`` folders); Lightning's ``Trainer``, Fabric and loggers:
  ``lightning_hooks``. Their own TensorBoard writers are not reported a second time: a
  ``SummaryWriter`` call made from inside one of these frameworks is left to that
  framework's hook.

A report never breaks the user's training: a value that cannot be recorded is dropped.
Standard library only: copied into every snapshot.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from typing import Any

from ..rank import runtime
from ..redaction.redact import redact_object, redact_text
from .import_hooks import when_imported

AUTOLOG_KEY = "autolog"  # watch.autolog of spec.json: false with --no-autolog
FRAMEWORKS = (
    "transformers.",
    "accelerate.",
    "lightning.",
    "lightning_fabric.",
    "pytorch_lightning.",
)
_installed = False


def enabled(run_dir: str | None) -> bool:
    """Whether this run captures framework calls: yes unless it was started with
    ``--no-autolog`` (``watch.autolog`` false in its spec.json), and never outside a run."""
    if not run_dir:
        return False
    from ..rank import run_inputs

    try:
        watch = run_inputs.from_spec(run_dir, "watch")
    except RuntimeError:
        return True
    return not isinstance(watch, dict) or watch.get(AUTOLOG_KEY, True) is not False


def install(run_dir: str | None = None) -> bool:
    """Register the hooks of every framework; False (and nothing registered) when the run
    does not capture them."""
    run_dir = run_dir if run_dir is not None else os.environ.get("JT_RUN_DIR")
    global _installed
    if not enabled(run_dir):
        return False
    for module, wheres in HOOKS.items():
        for where in (wheres,) if isinstance(wheres, str) else wheres:
            when_imported(module, functools.partial(_patch, where))
    _installed = True
    return True


def active() -> bool:
    """Whether this rank's framework calls are captured (``install`` ran and said yes)."""
    return _installed


def _patch(where: str, module: Any) -> None:
    name, _, function = where.partition(":")
    try:
        getattr(importlib.import_module(f"{__package__}.{name}"), function)(module)
    except Exception as exc:
        warn(f"{module.__name__}: {exc}")


def warn(message: str) -> None:
    """Say once on the rank's stderr that a framework could not be hooked; training goes on."""
    print(f"[jt] autolog left {message} alone", file=sys.stderr, flush=True)


_last: dict[str, tuple[str, Any, Any]] = {}  # metric -> (source, value, step) last reported


def report(step: Any, values: dict[str, Any], source: str | None = None) -> None:
    """One metric event from a framework's call, its numbers only; dropped rather than
    ever raising. ``source`` (``tensorboard``, ``mlflow``, ``wandb``) names a logger the
    code may call twice for one value (``writer.add_scalar`` then ``mlflow.log_metric``, as
    MLflow's own examples do): the second report of it is left out (``_twice``)."""
    try:
        numbers = {str(k): _scalar(v) for k, v in values.items() if _number(v)}
        if source is not None:
            numbers = {k: v for k, v in numbers.items() if not _twice(k, v, step, source)}
        if numbers:
            runtime.log(step=None if step is None else int(step), **numbers)
    except Exception:
        pass


def _twice(name: str, value: Any, step: Any, source: str) -> bool:
    """Whether ``source`` reports the value another source has just reported for ``name``
    (the same value, at the same step or one of them without a step)."""
    last = _last.get(name)
    if (
        last is not None
        and last[0] != source
        and last[1] == value
        and (step is None or last[2] is None or step == last[2])
    ):
        return True
    _last[name] = (source, value, step)
    return False


def _number(value: Any) -> bool:
    if isinstance(value, (bool, str, bytes)) or value is None:
        return False
    try:
        float(value)
    except (TypeError, ValueError, RuntimeError):
        return False
    return True


def _scalar(value: Any) -> Any:
    """A tensor's number as it is now: it may be updated in place before it is written."""
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def progress(done: Any, total: Any) -> None:
    """Progress from a framework's step counts; a total that is unknown or endless is none."""
    try:
        last = float(total) if total is not None else None
        runtime.progress(float(done), last if last and 0 < last < float("inf") else None)
    except Exception:
        pass


def tag_params(prefix: str, values: Any) -> None:
    """A framework's arguments as the run's tags ``PREFIX.NAME`` (rank 0's only), their
    secrets masked (``redact``: a tag is read by everyone who reads the run)."""
    if runtime.rank != 0:
        return
    try:
        shown = {
            k: redact_object(v, k if isinstance(k, str) else None) for k, v in dict(values).items()
        }
        runtime.tag(**{f"{prefix}.{k}": redact_text(_short(v)) for k, v in shown.items()})
    except Exception:
        pass


def _short(value: Any) -> str:
    text = str(getattr(value, "value", value))
    return text if len(text) <= 300 else text[:297] + "..."


def kept_dir(path: Any, default: str) -> str:
    """Where a framework's relative output folder is kept: under the run's ``checkpoints/``,
    since the rank's working folder is removed when the run ends. Absolute paths stay."""
    path = os.fspath(path) if path else default
    relative = os.path.normpath(path)
    if os.path.isabs(path) or relative.split(os.sep)[0] in (os.curdir, os.pardir):
        return path
    return os.path.join(str(runtime.checkpoint_dir), relative)


def should_resume(folder: str) -> bool:
    """Whether a framework resumes from its newest checkpoint in ``folder``: the folder is
    this run's (an earlier attempt or ``resume`` filled it), or this start is a restart."""
    if runtime.attempt > 0:
        return True
    home = os.path.realpath(str(runtime.checkpoint_dir))
    return os.path.realpath(folder).startswith(home + os.sep)


def unpatched(module: Any, name: str, mark: str = "_jt_autolog") -> Any:
    """Class ``name`` of ``module`` if it has not been patched yet (by the patch that
    ``mark`` names), else None; marked as patched from now on (a module imported twice is
    patched once)."""
    cls = getattr(module, name, None)
    if cls is None or getattr(cls, mark, False):
        return None
    setattr(cls, mark, True)
    return cls


def patch_summary_writer(module: Any) -> None:
    """``SummaryWriter.add_scalar`` and ``add_scalars`` also report to the run."""
    cls = unpatched(module, "SummaryWriter")
    if cls is None:
        return
    add_scalar, add_scalars = cls.add_scalar, cls.add_scalars

    @functools.wraps(add_scalar)
    def logged_scalar(
        self: Any, tag: Any, scalar_value: Any, global_step: Any = None, *args: Any, **kw: Any
    ) -> Any:
        result = add_scalar(self, tag, scalar_value, global_step, *args, **kw)
        if not from_framework():
            report(global_step, {str(tag): scalar_value}, "tensorboard")
        return result

    @functools.wraps(add_scalars)
    def logged_scalars(
        self: Any, main_tag: Any, values: Any, global_step: Any = None, *args: Any, **kw: Any
    ) -> Any:
        result = add_scalars(self, main_tag, values, global_step, *args, **kw)
        if from_framework():
            return result
        try:
            named = {f"{main_tag}/{name}": value for name, value in dict(values).items()}
        except (TypeError, ValueError):
            return result
        report(global_step, named, "tensorboard")
        return result

    cls.add_scalar, cls.add_scalars = logged_scalar, logged_scalars


def from_framework() -> bool:
    """Whether the patched method calling this was called by a framework that reports
    through its own hook (a logger called by Fabric or the Trainer, a writer called by a
    logger), rather than by the rank's own code."""
    caller = sys._getframe(2).f_globals.get("__name__", "")
    return isinstance(caller, str) and caller.startswith(FRAMEWORKS)


HOOKS: dict[str, str | tuple[str, ...]] = {  # module: "file:function"(s) of this folder
    # that patch it once it is imported
    "torch.utils.tensorboard.writer": "autolog:patch_summary_writer",
    "tensorboardX.writer": "autolog:patch_summary_writer",
    "transformers.trainer": "hf_hooks:patch_trainer",
    "accelerate.accelerator": ("hf_hooks:patch_accelerator", "accelerate_state:patch"),
    "lightning.pytorch.trainer.trainer": "lightning_hooks:patch_trainer",
    "pytorch_lightning.trainer.trainer": "lightning_hooks:patch_trainer",
    "lightning.fabric.fabric": "lightning_hooks:patch_fabric",
    "lightning_fabric.fabric": "lightning_hooks:patch_fabric",
    "lightning.fabric.loggers": "lightning_hooks:patch_loggers",
    "lightning_fabric.loggers": "lightning_hooks:patch_loggers",
    "lightning.pytorch.loggers": "lightning_hooks:patch_loggers",
    "pytorch_lightning.loggers": "lightning_hooks:patch_loggers",
    "mlflow": "mlflow_hooks:patch",
    "wandb": "wandb_hooks:patch",
}
