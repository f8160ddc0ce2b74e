"""The error family every layer raises.

Core code (capture, launch, targets, store, supervisor) raises these and nothing
Jupyter-specific; only the front ends (magics, monitor, server, CLI) turn them into a
notebook message, an HTTP status or an exit code. Each message names the problem and,
where there is one, the fix.
"""

from __future__ import annotations


class TrainerError(Exception):
    """Base class of every error jupyter_trainer raises on purpose."""

    def _render_traceback_(self) -> list[str]:
        """How IPython shows this error: the message, not the package's internal frames."""
        return [f"{type(self).__name__}: {self}"]


class SpecError(TrainerError, ValueError):
    """A flag, option or value is invalid. Nothing was started."""


class CaptureError(TrainerError):
    """The cell or its context cannot be turned into a snapshot. Nothing was started."""


class EnvError(TrainerError):
    """An environment cannot be defined, locked or realised."""


class TargetError(TrainerError):
    """A target is unknown, misconfigured or cannot run what was asked."""


class LaunchError(TrainerError):
    """The launch command could not be built or started."""


class MissingExtra(TrainerError, ImportError):
    """An optional feature's packages are not installed; the message names the extra."""


class InvalidRunId(SpecError):
    """A run id is not a safe path segment."""


class RunNotFound(TrainerError, LookupError):
    """No run with this id exists in the store."""


class SweepNotFound(RunNotFound):
    """No sweep with this id exists in the store."""


class ModelNotFound(TrainerError, LookupError):
    """No registered model with this name, or no such version of it."""


class StoreError(TrainerError):
    """The run store cannot be read or written (an unwritable folder, a broken index)."""


class NotOwner(TrainerError):
    """What was asked belongs to another user (a model version they registered)."""


class Untrusted(StoreError):
    """A file that would decide what runs as this user (a target, an environment, a run's
    record of its processes) could have been written by someone else: another member owns
    it, others may write it, or it is a link. ``path`` is the file."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class RecordDamaged(StoreError):
    """A run's record file (its ``spec.json`` or ``state.json``) is missing or cannot be read.

    The message names the file, what is wrong with it and what ``jupyter-trainer doctor
    --fix`` does about it; ``path`` is the file and ``problem`` what is wrong with it."""

    def __init__(self, message: str, *, run_id: str, path: str, problem: str) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.path = path
        self.problem = problem


class DiskFull(StoreError):
    """The run store's file system is full (or the user's quota is spent)."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path


class RunStateError(TrainerError):
    """The run is not in a state that allows the operation (for example, cancel a finished run)."""


class RunFailed(TrainerError):
    """Raised by ``Run.wait()`` when the run ended ``failed`` or ``lost``."""

    def __init__(
        self,
        message: str,
        *,
        run_id: str,
        status: str,
        failed_rank: int | None = None,
        traceback: str | None = None,
    ) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.status = status
        self.failed_rank = failed_rank
        self.traceback = traceback
        self.traceback_shown = False  # a view above shows it: IPython's error leaves it out

    def _render_traceback_(self) -> list[str]:
        lines = super()._render_traceback_()
        who = f"rank {self.failed_rank}" if self.failed_rank is not None else "the run"
        if self.traceback and self.traceback_shown:
            lines.append(f"(the traceback of {who} is shown above)")
        elif self.traceback:
            tail = self.traceback.rstrip().splitlines()[-25:]
            lines += ["", f"Traceback of {who} (last {len(tail)} lines):", *tail]
        return lines


class RunCanceled(RunFailed):
    """Raised by ``Run.wait()`` when the run was canceled."""


class CellFailed(TrainerError):
    """A live session's cell raised (or was interrupted) on some ranks; the session goes on.
    The message holds each failing rank's traceback, with the cell's own name and lines."""

    def __init__(self, message: str, *, ranks: list[int], interrupted: bool = False) -> None:
        super().__init__(message)
        self.ranks = ranks
        self.interrupted = interrupted

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


class SessionEnded(TrainerError):
    """The live session has ended (stopped, idle, a rank died) or did not become ready."""
