"""Lightning's ``Trainer`` reports to the run (``autolog``), ``lightning`` and
``pytorch_lightning`` alike.

- Everything ``self.log`` and the trainer's loggers receive becomes metrics, on every rank,
  at the step Lightning logs them with; the hyperparameters a logger receives
  (``save_hyperparameters``) become tags ``lightning.NAME`` (set by rank 0).
- Progress comes from the trainer's ``global_step`` of its ``estimated_stepping_batches``.
- A ``default_root_dir`` left out or relative is kept under the run's ``checkpoints/`` (the
  rank's working folder is removed when the run ends), and ``fit`` resumes from the newest
  ``.ckpt`` there: after a restart, and in a run started with ``resume``.

For explicit use: ``Trainer(logger=jt.LightningLogger())``. Next to autolog it reports once.
Standard library only at import: the classes are built from the package the rank's code
imported.
"""

from __future__ import annotations

import functools
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
    from . import rank_files

    found = [path for _, path in rank_files.framework_checkpoints(str(root))]
    return next((path for path in reversed(found) if path.endswith(".ckpt")), None)
