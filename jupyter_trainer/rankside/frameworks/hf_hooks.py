"""Hugging Face ``transformers.Trainer`` and Accelerate report to the run (``autolog``).

- ``Trainer``: every ``log`` (loss, learning rate, grad norm, eval metrics) becomes metrics
  at the trainer's ``global_step``; progress comes from ``state.max_steps``; the
  ``TrainingArguments`` that differ from their defaults become tags ``transformers.NAME`` (set
  by rank 0). A relative ``output_dir`` is kept under the run's ``checkpoints/`` (the rank's
  working folder is removed when the run ends, and nothing is made in it), and ``train()``
  resumes from the newest ``checkpoint-*`` there: after a restart, and in a run started with
  ``resume``.
- Accelerate: ``Accelerator.log(values, step)`` becomes metrics on every rank that calls
  it, and ``init_trackers``' ``config`` becomes tags ``accelerate.NAME``; its ``save_state``
  folders: ``accelerate_state``.

For explicit use, with or without autolog: ``jt.TransformersCallback`` (a ``TrainerCallback``)
and ``jt.AccelerateTracker`` (``Accelerator(log_with=jt.AccelerateTracker())``). Either one
next to autolog reports once, not twice. Standard library only at import: the framework's
classes are built on first use, from the framework the rank's code has already imported.
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from ..redaction.redact import redact
from . import autolog

_classes: dict[str, type] = {}
DEFAULT_OUTPUT = "trainer_output"  # TrainingArguments' output_dir when none is given


def callback_class() -> type:
    """``TransformersCallback``: a ``transformers.TrainerCallback`` that reports to the run."""
    if "callback" not in _classes:
        base = importlib.import_module("transformers").TrainerCallback

        class TransformersCallback(base):  # type: ignore[misc,valid-type]
            """Reports a ``Trainer``'s logs, progress and arguments to this run."""

            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.is_world_process_zero:
                    autolog.tag_params("transformers", changed_arguments(args))
                autolog.progress(state.global_step, state.max_steps)

            def on_log(
                self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any
            ) -> None:
                autolog.report(state.global_step, dict(logs or {}))

            def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                autolog.progress(state.global_step, state.max_steps)

        _classes["callback"] = TransformersCallback
    return _classes["callback"]


def tracker_class() -> type:
    """``AccelerateTracker``: an Accelerate ``GeneralTracker`` that reports to the run."""
    if "tracker" not in _classes:
        base = importlib.import_module("accelerate.tracking").GeneralTracker

        class AccelerateTracker(base):  # type: ignore[misc,valid-type]
            """``Accelerator(log_with=jt.AccelerateTracker())``: reports ``accelerator.log``
            to this run (autolog, when on, already does: then this adds nothing)."""

            name = "jupyter_trainer"
            requires_logging_directory = False

            def __init__(self, run_name: str = "") -> None:
                super().__init__()

            @property
            def tracker(self) -> Any:
                return None

            def store_init_configuration(self, values: dict[str, Any]) -> None:
                if not autolog.active():
                    autolog.tag_params("accelerate", values)

            def log(self, values: dict[str, Any], step: int | None = None, **kw: Any) -> None:
                if not autolog.active():
                    autolog.report(step, values)

        _classes["tracker"] = AccelerateTracker
    return _classes["tracker"]


def changed_arguments(args: Any) -> dict[str, Any]:
    """The plain fields of a ``TrainingArguments`` (numbers, strings, lists of them) whose
    values differ from their defaults, anything that looks like a secret masked."""
    import dataclasses

    changed: dict[str, Any] = {}
    try:
        fields = dataclasses.fields(args)
    except TypeError:
        return changed
    for field in fields:
        if field.name.startswith("_") or not field.init:
            continue
        if field.default is not dataclasses.MISSING:
            default = field.default
        elif field.default_factory is not dataclasses.MISSING:
            default = field.default_factory()
        else:
            default = None
        value = getattr(args, field.name, default)
        value = getattr(value, "value", value)  # an enum, by its value
        if not _plain(value) or _same(value, default):
            continue
        changed[field.name] = redact(value, field.name)
    return changed


def _plain(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return bool(value) and all(_plain(v) for v in value)
    return isinstance(value, (str, int, float, bool))


def _same(value: Any, default: Any) -> bool:
    default = getattr(default, "value", default)
    try:
        return bool(value == default) or (not value and not default)
    except Exception:
        return False


def patch_trainer(module: Any) -> None:
    """``Trainer`` gets the callback, keeps a relative ``output_dir`` in the run, and resumes
    from its newest checkpoint there."""
    cls = autolog.unpatched(module, "Trainer")
    if cls is None:
        return
    init, train = cls.__init__, cls.train

    @functools.wraps(init)
    def reporting_init(self: Any, *args: Any, **kw: Any) -> None:
        given = kw["args"] if "args" in kw else args[1] if len(args) > 1 else None
        made_default = given is None and not os.path.lexists(DEFAULT_OUTPUT)
        if given is not None:  # before __init__, which makes the folder
            try:
                given.output_dir = autolog.kept_dir(given.output_dir, DEFAULT_OUTPUT)
            except Exception as exc:
                autolog.warn(f"transformers.Trainer: {exc}")
        init(self, *args, **kw)
        if made_default:  # the arguments __init__ made for itself: their folder, if empty
            try:
                os.rmdir(DEFAULT_OUTPUT)
            except OSError:
                pass
        try:
            self.args.output_dir = autolog.kept_dir(self.args.output_dir, DEFAULT_OUTPUT)
            callback = callback_class()
            if not any(isinstance(c, callback) for c in self.callback_handler.callbacks):
                self.add_callback(callback)
        except Exception as exc:
            autolog.warn(f"transformers.Trainer: {exc}")

    @functools.wraps(train)
    def resuming_train(self: Any, resume_from_checkpoint: Any = None, *a: Any, **kw: Any) -> Any:
        if resume_from_checkpoint is None:
            resume_from_checkpoint = newest_checkpoint(self.args.output_dir)
            if resume_from_checkpoint:
                print(f"[jt] resuming the Trainer from {resume_from_checkpoint}", flush=True)
        return train(self, resume_from_checkpoint, *a, **kw)

    cls.__init__, cls.train = reporting_init, resuming_train


def newest_checkpoint(output_dir: Any) -> str | None:
    """The ``checkpoint-N`` of ``output_dir`` with the highest step when the trainer should
    resume from it: its folder is this run's (filled by an earlier attempt or by
    ``resume``), or this start is a restart."""
    if not output_dir or not autolog.should_resume(str(output_dir)):
        return None
    from ..rank import rank_files

    steps = []
    for _, path in rank_files.framework_checkpoints(str(output_dir)):
        named = rank_files.HF_CHECKPOINT.fullmatch(os.path.basename(path))
        if named and os.path.dirname(path) == os.path.normpath(str(output_dir)):
            steps.append((int(named.group(1)), path))
    return max(steps)[1] if steps else None


def patch_accelerator(module: Any) -> None:
    """``Accelerator.log`` and ``init_trackers`` also report to the run, on every rank."""
    cls = autolog.unpatched(module, "Accelerator")
    if cls is None:
        return
    log, init_trackers = cls.log, cls.init_trackers

    @functools.wraps(log)
    def reporting_log(self: Any, values: Any, step: Any = None, *a: Any, **kw: Any) -> Any:
        result = log(self, values, step, *a, **kw)
        autolog.report(step, dict(values or {}))
        return result

    @functools.wraps(init_trackers)
    def reporting_init_trackers(
        self: Any, project_name: Any, config: Any = None, *a: Any, **kw: Any
    ) -> Any:
        result = init_trackers(self, project_name, config, *a, **kw)
        if config and getattr(self, "is_main_process", True):
            autolog.tag_params("accelerate", dict(config))
        return result

    cls.log, cls.init_trackers = reporting_log, reporting_init_trackers
