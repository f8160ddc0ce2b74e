"""Lightning's ``Trainer``, Fabric and loggers report to the run (``autolog``),
``lightning``, ``pytorch_lightning`` and ``lightning_fabric`` alike.

- Everything ``self.log`` and the trainer's loggers receive becomes metrics, on every rank,
  at the step Lightning logs them with; the hyperparameters a logger receives
  (``save_hyperparameters``) become tags ``lightning.NAME`` (set by rank 0).
- Progress comes from the trainer's ``global_step`` of its ``estimated_stepping_batches``.
- A ``default_root_dir`` left out or relative is kept under the run's ``checkpoints/`` (the
  rank's working folder is removed when the run ends), and ``fit`` resumes from the newest
  ``.ckpt`` there: after a restart, and in a run started with ``resume``.
- Fabric's ``log`` and ``log_dict`` become metrics on every rank at their step, whether or
  not Fabric was given loggers; a logger's ``log_metrics`` called by the rank's own code does
  too. A logger called by the Trainer or by Fabric is not reported a second time.
- A ``Trainer`` or ``Fabric`` that sees one process in a run of several ranks (``devices``
  left to "auto" on CPU) would train the whole dataset on every rank: it stops the rank at
  once with what to set.

For explicit use: ``Trainer(logger=jt.LightningLogger())``. Next to autolog it reports once.
Standard library only at import: the classes are built from the package the rank's code
imported.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any

from . import autolog

PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_classes: dict[tuple[str, str], type] = {}


def package_of(module_name: str) -> str:
    return "pytorch_lightning" if module_name.startswith("pytorch_lightning") else PACKAGES[0]


def logger_class(package: str | None = None) -> type:
    """``LightningLogger`` of ``package`` (the one the rank's code imported, by default)."""
    package = package or next((p for p in PACKAGES if p in sys.modules), PACKAGES[0])
    if (package, "logger") not in _classes:
        import importlib

        base = importlib.import_module(f"{package}.loggers").Logger

        class LightningLogger(base):  # type: ignore[misc,valid-type]
            """Reports ``self.log`` metrics and hyperparameters to this run, from every rank."""

            @property
            def name(self) -> str:
                return ""

            @property
            def version(self) -> str:
                return ""

            def log_hyperparams(self, params: Any, *args: Any, **kw: Any) -> None:
                autolog.tag_params("lightning", flat(params))

            def log_metrics(self, metrics: dict[str, Any], step: int | None = None) -> None:
                autolog.report(step, metrics)

        _classes[(package, "logger")] = LightningLogger
    return _classes[(package, "logger")]


def progress_class(package: str) -> type:
    if (package, "progress") not in _classes:
        import importlib

        base = importlib.import_module(f"{package}.callbacks").Callback

        class ReportProgress(base):  # type: ignore[misc,valid-type]
            def on_train_start(self, trainer: Any, *args: Any) -> None:
                autolog.progress(trainer.global_step, trainer.estimated_stepping_batches)

            def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
                autolog.progress(trainer.global_step, trainer.estimated_stepping_batches)

        _classes[(package, "progress")] = ReportProgress
    return _classes[(package, "progress")]


def flat(params: Any) -> dict[str, Any]:
    """Hyperparameters as one level of names: a Namespace or mapping, nested ones joined
    with dots."""
    if not isinstance(params, dict):
        params = vars(params) if hasattr(params, "__dict__") else {}
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in flat(value).items()})
        else:
            out[str(key)] = value
    return out


def patch_trainer(module: Any) -> None:
    """``Trainer`` gets the logger and the progress callback, keeps its root folder in the
    run, and ``fit`` resumes from the newest checkpoint there."""
    cls = autolog.unpatched(module, "Trainer")
    if cls is None:
        return
    package = package_of(module.__name__)
    init, fit = cls.__init__, cls.fit

    @functools.wraps(init)
    def reporting_init(self: Any, *args: Any, **kw: Any) -> None:
        kw["default_root_dir"] = autolog.kept_dir(kw.get("default_root_dir"), "lightning")
        init(self, *args, **kw)
        refuse_one_of_many(self, "Trainer")
        try:
            ours = logger_class(package)
            if not any(isinstance(logger, ours) for logger in self.loggers):
                self.loggers = [*self.loggers, ours()]
            self.callbacks.append(progress_class(package)())
        except Exception as exc:
            autolog.warn(f"{package}.Trainer: {exc}")

    @functools.wraps(fit)
    def resuming_fit(self: Any, *args: Any, **kw: Any) -> Any:
        if len(args) < 5 and kw.get("ckpt_path") is None:
            found = newest_checkpoint(self.default_root_dir)
            if found:
                print(f"[jt] resuming the Lightning Trainer from {found}", flush=True)
                kw["ckpt_path"] = found
        return fit(self, *args, **kw)

    cls.__init__, cls.fit = reporting_init, resuming_fit


def newest_checkpoint(root: Any) -> str | None:
    """The newest ``.ckpt`` under ``root`` when the trainer should resume from it."""
    if not root or not autolog.should_resume(str(root)):
        return None
    from ..rank import rank_files

    found = [path for _, path in rank_files.framework_checkpoints(str(root))]
    return next((path for path in reversed(found) if path.endswith(".ckpt")), None)


def refuse_one_of_many(framework: Any, name: str) -> None:
    """Stop the rank (``SystemExit`` with one line, which becomes the run's error) when the
    run has several ranks but ``framework`` sees a world of one: each rank would train the
    whole dataset as its own rank 0, and every series would look healthy. Failing here,
    before any step, with the arguments to set, costs the user less than a warning in a log
    nobody reads while the run trains twice."""
    from ..rank import runtime

    try:
        seen = int(getattr(framework, "world_size", 1))
        accelerator = type(framework.accelerator).__name__
    except Exception:
        return
    ranks = runtime.world_size
    if ranks <= 1 or seen != 1:
        return
    per_node = max(runtime.local_world_size, 1)
    nodes = max(ranks // per_node, 1)
    device = "cpu" if accelerator.startswith("CPU") else "gpu"
    fix = f'accelerator="{device}", devices={per_node}, strategy="ddp"'
    fix += f", num_nodes={nodes}" if nodes > 1 else ""
    where = f"{per_node} on each of {nodes} nodes" if nodes > 1 else "on one node"
    raise SystemExit(
        f"[jt] this run has {ranks} ranks ({where}) but the Lightning {name} sees one process"
        f" (world size 1), so every rank would train the whole dataset on its own: set"
        f" {name}({fix})"
    )


def patch_fabric(module: Any) -> None:
    """``Fabric.log_dict`` (and ``log``, which calls it) reports to the run; a ``Fabric`` that
    sees one process of several ranks stops (``refuse_one_of_many``); ``Fabric.save`` and
    ``load`` with a relative path use the run's ``checkpoints/`` (``autolog.kept_dir``),
    since the working folder is removed when the run ends, and ``resume`` copies the newest
    ``.ckpt`` there."""
    cls = autolog.unpatched(module, "Fabric")
    if cls is None:
        return
    init, log_dict, save, load = cls.__init__, cls.log_dict, cls.save, cls.load

    @functools.wraps(save)
    def keeping_save(self: Any, path: Any, *args: Any, **kw: Any) -> Any:
        return save(self, _kept(path), *args, **kw)

    @functools.wraps(load)
    def finding_load(self: Any, path: Any, *args: Any, **kw: Any) -> Any:
        kept = _kept(path)
        return load(self, kept if os.path.exists(kept) else path, *args, **kw)

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kw: Any) -> None:
        init(self, *args, **kw)
        refuse_one_of_many(self, "Fabric")

    @functools.wraps(log_dict)
    def reporting_log_dict(self: Any, metrics: Any, step: Any = None, *a: Any, **kw: Any) -> Any:
        result = log_dict(self, metrics, step, *a, **kw)
        try:
            autolog.report(step, dict(metrics))
        except (TypeError, ValueError):
            pass
        return result

    cls.__init__, cls.log_dict = checked_init, reporting_log_dict
    cls.save, cls.load = keeping_save, finding_load


def _kept(path: Any) -> Any:
    """A relative checkpoint path under the run's ``checkpoints/``; anything else as given."""
    try:
        return autolog.kept_dir(os.path.expanduser(os.fspath(path)), "")
    except TypeError:
        return path


def patch_loggers(module: Any) -> None:
    """Every logger class of a ``loggers`` package reports what the rank's own code passes to
    its ``log_metrics``; what the Trainer or Fabric passes is reported by their hooks."""
    base = getattr(module, "Logger", None)
    if not isinstance(base, type):
        return
    for found in vars(module).values():
        if isinstance(found, type) and issubclass(found, base) and "log_metrics" in vars(found):
            cls: Any = found
            if not vars(cls).get("_jt_autolog", False):
                cls._jt_autolog = True
                cls.log_metrics = _reporting_log_metrics(cls.log_metrics)


def _reporting_log_metrics(log_metrics: Any) -> Any:
    @functools.wraps(log_metrics)
    def reporting(self: Any, metrics: Any, step: Any = None, *a: Any, **kw: Any) -> Any:
        result = log_metrics(self, metrics, step, *a, **kw)
        if not autolog.from_framework():
            try:
                autolog.report(step, dict(metrics))
            except (TypeError, ValueError):
                pass
        return result

    return reporting
