"""Accelerate's checkpoints live with the run and drive its restarts (``autolog``).

- ``accelerator.save_state("folder")`` with a relative folder saves under the run's
  ``checkpoints/`` (the rank's working folder is removed when the run ends), as does the
  ``project_dir`` of ``ProjectConfiguration(automatic_checkpoint_naming=True)``. Absolute
  folders stay where they are.
- ``accelerator.load_state("folder")`` with a relative folder reads it from there too.
- ``accelerator.load_state()`` with no folder (Accelerate refuses that unless its automatic
  naming is on) loads the newest state this run has: one it saved before a restart, or the
  one ``resume`` copied from the run it resumes; with none (a first start) it loads nothing
  and says so. A script calls it once before its loop, and objects given to
  ``register_for_checkpointing`` (a step counter) come back with the model and optimizer.

Which state is the newest is written by the main process once its ``save_state`` has
returned (``rank_files.ACCELERATE_NEWEST``), so a rank killed while saving leaves the one
before it as the newest; ``resume`` copies that folder alone, to the same place, and the new
run reads it as its newest until it saves its own. Standard library only: copied into every
snapshot.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from ..rank import rank_files
from . import autolog

NEWEST = rank_files.ACCELERATE_NEWEST  # in checkpoints/


def patch(module: Any) -> None:
    """``Accelerator.save_state`` and ``load_state`` keep relative folders in the run, and
    ``load_state()`` finds the newest state of the run."""
    cls = autolog.unpatched(module, "Accelerator", mark="_jt_state")
    if cls is None:
        return
    save_state, load_state = cls.save_state, cls.load_state

    @functools.wraps(save_state)
    def keeping_save_state(self: Any, output_dir: Any = None, *a: Any, **kw: Any) -> Any:
        if output_dir is None:
            _keep_project_dir(self)
        else:
            output_dir = autolog.kept_dir(os.path.expanduser(os.fspath(output_dir)), "")
        saved = save_state(self, output_dir, *a, **kw)
        if getattr(self, "is_main_process", True):
            _note_newest(saved or output_dir)
        return saved

    @functools.wraps(load_state)
    def finding_load_state(self: Any, input_dir: Any = None, *a: Any, **kw: Any) -> Any:
        if input_dir is not None:
            given = os.path.expanduser(os.fspath(input_dir))
            kept = autolog.kept_dir(given, "")
            if os.path.isdir(kept) or not os.path.isdir(given):
                input_dir = kept
        elif self.project_configuration.automatic_checkpoint_naming:
            _keep_project_dir(self)
        else:
            input_dir = newest_state()
            if not input_dir:
                print("[jt] no Accelerate state in this run yet: starting afresh", flush=True)
                return None
            print(f"[jt] resuming Accelerate from {input_dir}", flush=True)
        return load_state(self, input_dir, *a, **kw)

    cls.save_state, cls.load_state = keeping_save_state, finding_load_state


def _keep_project_dir(accelerator: Any) -> None:
    """A relative ``project_dir`` (where automatic naming saves) in the run's checkpoints."""
    config = accelerator.project_configuration
    if config.project_dir and not os.path.isabs(os.fspath(config.project_dir)):
        config.project_dir = autolog.kept_dir(config.project_dir, "")


def _note_newest(folder: Any) -> None:
    from ..host.atomic import write_atomic
    from ..rank import runtime

    try:
        home = str(runtime.checkpoint_dir)
        path = os.path.abspath(os.fspath(folder))
        inside = os.path.commonpath([path, os.path.abspath(home)]) == os.path.abspath(home)
        os.makedirs(home, exist_ok=True)
        write_atomic(os.path.join(home, NEWEST), os.path.relpath(path, home) if inside else path)
    except Exception as exc:
        autolog.warn(f"accelerate save_state's folder ({exc})")


def newest_state() -> str | None:
    """The folder of the newest ``save_state`` of this run, if there is one."""
    from ..rank import runtime

    return rank_files.newest_accelerate_state(str(runtime.checkpoint_dir))
