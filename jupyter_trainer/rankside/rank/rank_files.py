"""Files a rank writes besides its events: log time marks, its heartbeat and checkpoints.

Used by ``runtime`` inside the ranks, so, like it, this module is copied into every run's
snapshot and uses the standard library only (torch is used when the training code has
imported it). The store reads the same layouts: ``CHECKPOINT`` names a complete checkpoint.
"""

from __future__ import annotations

import importlib
import os
import pickle
import re
import sys
import time
from typing import Any, NamedTuple

from jupyter_trainer.rankside.host import atomic
from jupyter_trainer.rankside.rank import event_lines

MARK_S = 0.05  # at most this often, a rank notes how long its log is and when
CHECKPOINT = re.compile(r"step-(\d+)\.(pt|pkl)")  # a temporary file starts with "."
HF_CHECKPOINT = re.compile(r"checkpoint-(\d+)")  # a transformers Trainer's checkpoint folder


# --- log times -----------------------------------------------------------------------------


class LogMarks:
    """``logs/rank-<r>.times``: lines of "<log size> <unix time>". A reader gives each log
    line the time of the last mark at or before its offset, which puts the ranks' log
    history in one time order (``log_tail.LogTimes``)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.last = 0.0

    def note(self) -> None:
        now = time.time()
        if now - self.last < MARK_S:
            return
        self.last = now
        try:
            os.write(self.fd, b"%d %.3f\n" % (os.fstat(1).st_size, now))
        except OSError:
            pass


def mark_output(times_path: str) -> None:
    """Note times for this rank's log (its stdout and stderr, fds 1 and 2) in ``times_path``."""
    marks = LogMarks(times_path)
    sys.stdout = MarkedStream(sys.stdout, marks)
    sys.stderr = MarkedStream(sys.stderr, marks)


class MarkedStream:
    """``sys.stdout``/``sys.stderr`` of a rank whose output goes to its log: a write first
    notes the log's length and the time (``LogMarks``); everything else is the stream's."""

    def __init__(self, stream: Any, marks: LogMarks) -> None:
        self._stream = stream
        self._marks = marks

    def write(self, text: str) -> int:
        self._marks.note()
        return self._stream.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


# --- heartbeat -----------------------------------------------------------------------------

BEAT_S = 1.0  # at most this often the flusher rewrites events/rank-<r>.beat


class Heartbeat:
    """``events/rank-<r>.beat``: this rank is alive, and its last step and when it was logged.
    The supervisor reads it to name a rank that stopped making progress. The runtime's
    flusher thread notes each event it writes and beats; the training loop never waits."""

    def __init__(self, path: str, pid: int, attempt: int) -> None:
        self.path, self.pid, self.attempt = path, pid, attempt
        self.last = 0.0
        self.step: int | None = None  # the step of the last metric event that had one
        self.done: Any = None  # the last progress report's ``done``
        self.progress: float | None = None  # when the last event was logged

    def note(self, event: event_lines.Event) -> None:
        """Remember the newest event written."""
        kind, t, a, _ = event
        self.progress = t
        if kind is event_lines.METRIC:
            if a is not None:
                self.step = event_lines.step_number(a)
        elif kind is event_lines.PROGRESS:
            self.done = event_lines.number(a)

    def beat(self, now: float) -> None:
        if now - self.last < BEAT_S:
            return
        self.last = now
        record = {
            "pid": self.pid,
            "attempt": self.attempt,
            "step": self.step,
            "done": self.done,
            "progress": self.progress,
            "beat": now,
        }
        try:
            write_beat(self.path, record)
        except (OSError, TypeError, ValueError):
            pass


def write_beat(path: str, record: dict[str, Any]) -> None:
    """Replace ``path`` (``events/rank-<r>.beat``) with ``record``, whole: a reader never sees
    half of it."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic.write_json_atomic(path, record)


# --- checkpoints ---------------------------------------------------------------------------


class Checkpoint(NamedTuple):
    """What ``load_checkpoint`` found: the step it was saved at, the object, and its file."""

    step: int
    state: Any
    path: str


def checkpoints(folder: str) -> list[tuple[int, str]]:
    """The complete checkpoints in ``folder``, oldest step first."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = [
        (int(m.group(1)), os.path.join(folder, name))
        for name in names
        if (m := CHECKPOINT.fullmatch(name))
    ]
    return sorted(found)


ACCELERATE_NEWEST = ".accelerate-state"  # the newest save_state's folder, relative to it


def framework_checkpoints(root: str) -> list[tuple[int, str]]:
    """What frameworks saved under ``root``, as ``(mtime_ns, path)``, oldest first: the
    ``checkpoint-N`` folders of a transformers ``Trainer`` that hold its ``trainer_state.json``
    (written last, so the folder is complete), Lightning's ``.ckpt`` files that are whole
    (``torch.save`` writes a zip, whose directory comes last: a file cut short has none), and
    the newest Accelerate ``save_state`` folder under ``root`` that ``ACCELERATE_NEWEST``
    names (written once the save has returned, so that folder is complete)."""
    found = []
    for folder, subs, names in os.walk(root):
        subs[:] = [s for s in subs if not s.startswith(".")]
        paths = [os.path.join(folder, n) for n in names if n.endswith(".ckpt") and n[0] != "."]
        if ACCELERATE_NEWEST in names:
            paths.extend(filter(None, [accelerate_state(folder, root)]))
        if HF_CHECKPOINT.fullmatch(os.path.basename(folder)) and "trainer_state.json" in names:
            paths.append(folder)
            subs[:] = []
        for path in paths:
            if os.path.islink(path):
                continue  # a link may point anywhere: never resumed from or copied
            if path.endswith(".ckpt") and not _whole_zip(path):
                continue  # cut short (its writer was killed), or not torch.save's
            try:
                found.append((os.stat(path).st_mtime_ns, path))
            except OSError:
                continue
    return sorted(found)


def accelerate_state(home: str, within: str) -> str | None:
    """The folder ``home``'s ``ACCELERATE_NEWEST`` names, when it is a folder inside
    ``within`` (a state saved elsewhere is not the run's to copy)."""
    try:
        with open(os.path.join(home, ACCELERATE_NEWEST), encoding="utf-8") as fh:
            noted = fh.read().strip()
    except (OSError, UnicodeDecodeError):
        return None
    folder = os.path.normpath(os.path.join(home, noted))
    inside = os.path.realpath(folder).startswith(os.path.realpath(within) + os.sep)
    return folder if noted and inside and os.path.isdir(folder) else None


ACCELERATE_MARK = "random_states_0.pkl"  # every save_state writes it, on its main process


def newest_accelerate_state(home: str) -> str | None:
    """The newest Accelerate ``save_state`` folder of a run's ``checkpoints/`` (``home``):
    the one ``ACCELERATE_NEWEST`` names, else (a resumed run holds the copied state and no
    note yet) the newest folder under ``home`` that holds a state."""
    noted = accelerate_state(home, home)
    if noted:
        return noted
    found = []
    for folder, subs, names in os.walk(home):
        subs[:] = [s for s in subs if not s.startswith(".")]
        if ACCELERATE_MARK in names:
            try:
                found.append((os.stat(os.path.join(folder, ACCELERATE_MARK)).st_mtime_ns, folder))
            except OSError:
                continue
    return max(found)[1] if found else None


def newest_checkpoint(home: str) -> str:
    """The newest checkpoint of a run's ``checkpoints/`` (``home``), as a path: the complete
    ``jt.save_checkpoint`` file of the highest step, else the newest a framework saved, else
    an Accelerate state; "" when there is none (a first start)."""
    found = checkpoints(home)
    if found:
        return found[-1][1]
    saved = framework_checkpoints(home)
    if saved:
        return saved[-1][1]
    return newest_accelerate_state(home) or ""


def _whole_zip(path: str) -> bool:
    import zipfile  # only where a framework saved checkpoints

    return zipfile.is_zipfile(path)


def checkpoint_step(step: Any, keep: int) -> int:
    """``save_checkpoint``'s ``step`` as a whole number (a 0-d tensor or numpy integer too);
    raises on a step or ``keep`` it cannot use."""
    whole = step if type(step) is int else event_lines.step_number(step)
    if whole is None:
        raise TypeError("save_checkpoint(obj, step): step must be a whole number")
    if whole < 0 or keep < 1:
        raise ValueError("save_checkpoint(obj, step, keep=K): step >= 0 and keep >= 1")
    return whole


def save_checkpoint(folder: str, obj: Any, step: int, keep: int) -> str:
    """Write ``obj`` as ``folder/step-<step>.pt`` (torch imported) or ``.pkl``: to a temporary
    name, synced, then renamed; then remove all but the newest ``keep``."""
    torch = sys.modules.get("torch")
    path = os.path.join(folder, f"step-{step}.{'pt' if torch is not None else 'pkl'}")
    tmp = os.path.join(folder, f".step-{step}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            if torch is not None:
                torch.save(obj, fh)
            else:
                pickle.dump(obj, fh, protocol=pickle.HIGHEST_PROTOCOL)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _sync_folder(folder)
    for _, old in checkpoints(folder)[:-keep]:
        if old != path:
            try:
                os.unlink(old)
            except OSError:
                pass
    return path


def read_latest_on_every_rank(folder: str, map_location: Any, rank: int, world_size: int) -> Any:
    """``read_latest`` on rank 0, broadcast to the others when torch.distributed is
    initialised with several ranks (only rank 0's node may have the file)."""
    dist = initialised_dist() if world_size > 1 else None
    if dist is None:
        return read_latest(folder, map_location)
    found = [read_latest(folder, map_location) if rank == 0 else None]
    dist.broadcast_object_list(found, src=0)
    return found[0]


def read_latest(folder: str, map_location: Any) -> Checkpoint | None:
    found = checkpoints(folder)
    if not found:
        return None
    step, path = found[-1]
    if path.endswith(".pt"):
        torch = importlib.import_module("torch")
        state = torch.load(path, map_location=map_location, weights_only=False)
    else:
        with open(path, "rb") as fh:
            state = pickle.load(fh)
    return Checkpoint(step, state, path)


def initialised_dist() -> Any:
    """``torch.distributed`` when the training code has initialised it, else None."""
    torch = sys.modules.get("torch")
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        return None
    return None


def _sync_folder(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
