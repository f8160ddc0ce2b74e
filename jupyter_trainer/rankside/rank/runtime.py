"""What a training script sees of jupyter_trainer: ranks, params, outputs, metric logging.

``from jupyter_trainer import runtime as jt`` inside the training code. This module is copied
into every run's snapshot and imported on nodes where jupyter_trainer is not installed, so it
uses the standard library only and imports nothing else of the package.

At import it maps the launcher's rank variables (Open MPI, Horovod, Slurm, PMI) onto the
``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` names torch's ``env://`` rendezvous reads, so an unchanged
``torch.distributed.init_process_group()`` works under ``mpirun``. It runs in a rank process,
never in the kernel, which is why writing ``os.environ`` here is right.

``log`` and ``progress`` never touch the disk on the caller's thread: they append a tuple to a
deque that a daemon thread turns into JSON lines (``events/rank-<r>.jsonl``) every 0.25 s.
Pending events are written at exit, on an unhandled exception and on SIGTERM. Outside a run
(``JT_RUN_DIR`` unset) everything still works: ``log`` prints at most one line a second.
"""

from __future__ import annotations

import atexit
import collections
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from jupyter_trainer.rankside.observe import system
from jupyter_trainer.rankside.rank import event_lines, launcher_env, preemption

if TYPE_CHECKING:
    from jupyter_trainer.rankside.rank import rank_files

__all__ = [  # noqa: F822 (run_dir, params and the like resolve in __getattr__)
    "AccelerateTracker",
    "LightningLogger",
    "TransformersCallback",
    "attempt",
    "backend",
    "checkpoint",
    "checkpoint_dir",
    "data",
    "export_onnx",
    "flush",
    "in_run",
    "load_carried",
    "load_checkpoint",
    "local_rank",
    "local_world_size",
    "log",
    "node_rank",
    "outputs_dir",
    "params",
    "preempted",
    "progress",
    "rank",
    "run_dir",
    "run_id",
    "save_checkpoint",
    "tag",
    "world_size",
]

FLUSH_INTERVAL = 0.25  # seconds between background writes of buffered events
_CHUNK = 4096  # events encoded per os.write
_SIGTERM_GRACE = 2.0  # seconds the main thread gets to handle SIGTERM before the flusher does


# --- rank mapping -----------------------------------------------------------------------------


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return default


launcher_env.map_ranks(os.environ)

rank: int = _env_int("RANK", 0)
world_size: int = _env_int("WORLD_SIZE", 1)
local_rank: int = _env_int("LOCAL_RANK", 0)
local_world_size: int = _env_int("LOCAL_WORLD_SIZE", world_size if world_size > 0 else 1)
node_rank: int = _env_int("GROUP_RANK", _env_int("NODE_RANK", 0))
run_id: str | None = os.environ.get("JT_RUN_ID") or None
backend: str | None = os.environ.get("JT_BACKEND") or None
_run_dir: str | None = os.environ.get("JT_RUN_DIR") or None  # ``run_dir``, before pathlib
in_run: bool = _run_dir is not None
# Which start of the run this is: 0, then 1, 2, ... after a rank failed and every rank was
# started again (by torchrun's own restart, or by the supervisor for the other launchers).
attempt: int = _env_int("JT_ATTEMPT", 0) + _env_int("TORCHELASTIC_RESTART_COUNT", 0)
# True once a preemption was announced to this rank (SIGUSR1): checkpoint, then return.
preempted = preemption.preempted


# --- lazily computed attributes -------------------------------------------------------------


def _read_spec(key: str) -> Any:
    import jupyter_trainer.rankside.rank.run_inputs as run_inputs

    return run_inputs.from_spec(_run_dir, key)


_ELSEWHERE = {  # "room.file:name" of the rank side, imported on first use only
    "save_checkpoint": "rank.rank_outputs:save_checkpoint",
    "load_checkpoint": "rank.rank_outputs:load_checkpoint",
    "export_onnx": "rank.rank_outputs:export_onnx",
    "checkpoint": "rank.dcp_checkpoint:checkpoint",
    "load_carried": "rank.run_inputs:load_carried",
    "breakpoint": "debug.debugger:rank_breakpoint",
}
_FRAMEWORK_CLASSES = {  # built from the framework, whose import is the caller's
    "TransformersCallback": "frameworks.hf_hooks:callback_class",
    "AccelerateTracker": "frameworks.hf_hooks:tracker_class",
    "LightningLogger": "frameworks.lightning_hooks:logger_class",
}


def __getattr__(name: str) -> Any:
    # Module attributes computed on first access, then cached as ordinary globals.
    if name == "params":
        found = _read_spec("params")
        value: Any = dict(found) if isinstance(found, dict) else {}
    elif name == "data":
        import jupyter_trainer.rankside.rank.data as rank_data

        value = rank_data.DataPaths(_read_spec("data") or [], rank_data.node_root(_run_dir))
    elif name in ("run_dir", "outputs_dir", "checkpoint_dir"):
        from pathlib import Path  # about 4 ms at a rank's start, so only when asked for

        value = Path(_run_dir) if _run_dir is not None else None
        if name != "run_dir":
            folder = "outputs" if name == "outputs_dir" else "checkpoints"
            value = (value or Path.cwd()) / folder
            value.mkdir(parents=True, exist_ok=True)
    elif name in _ELSEWHERE or name in _FRAMEWORK_CLASSES:
        import importlib

        where, _, attr = (_ELSEWHERE.get(name) or _FRAMEWORK_CLASSES[name]).partition(":")
        value = getattr(importlib.import_module(f"jupyter_trainer.rankside.{where}"), attr)
        value = value() if name in _FRAMEWORK_CLASSES else value
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# --- event buffer -----------------------------------------------------------------------------

_METRIC = event_lines.METRIC
_PROGRESS = event_lines.PROGRESS
_TAG = event_lines.TAG
_buf: collections.deque[event_lines.Event] = collections.deque()
_append = _buf.append
_time = time.time
_lock = threading.Lock()  # held while events are taken from _buf and written, keeps order
_lock_owner: int | None = None
_start_lock = threading.Lock()
_flusher: threading.Thread | None = None
_closed = False
_fd: int | None = None
_write_failed = False
_last_print = 0.0
_pid = os.getpid()


def log(step: int | None = None, **metrics: Any) -> None:
    """Record one metric event, e.g. ``log(step=i, loss=loss.item())``.

    Returns at once: the values are converted (``.item()``, ``float()``, else ``str()``) and
    written by a background thread, so pass a value that will not change afterwards (a
    tensor updated in place is read when it is written, not when it was logged).
    """
    if _run_dir is None:
        _print_outside(step, metrics)
        return
    _append((_METRIC, _time(), step, metrics))
    if _flusher is None:
        _start_flusher()


def progress(done: float, total: float | None = None) -> None:
    """Record how far the run is (``done`` of ``total`` steps); a no-op outside a run."""
    if _run_dir is None:
        return
    _append((_PROGRESS, _time(), done, total))
    if _flusher is None:
        _start_flusher()


def tag(**tags: Any) -> None:
    """Set tags on the run, e.g. ``tag(dataset="birds", stage="finetune")``: strings shown by
    ``show`` and ``Run.tags``; the last value set for a key wins. Outside a run, a no-op."""
    if _run_dir is None or not tags:
        return
    _append((_TAG, _time(), None, dict(tags)))
    if _flusher is None:
        _start_flusher()


def flush() -> None:
    """Write every buffered event now (blocks on the disk; the training loop never needs it)."""
    global _lock_owner
    if _run_dir is None:
        return
    with _lock:
        _lock_owner = threading.get_ident()
        try:
            _drain()
        finally:
            _lock_owner = None
    if _deferred_signal is not None and threading.current_thread() is threading.main_thread():
        _terminate(_deferred_signal)


def _print_outside(step: Any, metrics: dict[str, Any]) -> None:
    global _last_print
    now = _time()
    if now - _last_print < 1.0:
        return
    _last_print = now
    print(event_lines.outside_line(step, metrics), flush=True)


def _drain() -> None:
    """Encode and append everything buffered; caller holds ``_lock``."""
    popleft = _buf.popleft
    while _buf:
        lines = []
        event = None
        try:
            for _ in range(_CHUNK):
                event = popleft()
                try:
                    lines.append(event_lines.encode(event))
                except Exception as exc:  # one odd value must not cost the other events
                    lines.append(event_lines.error_line(_time(), exc))
        except IndexError:
            pass
        if event is not None:
            _heartbeat().note(event)
        _write("".join(lines).encode("utf-8"))


def _write(data: bytes) -> None:
    """Append whole lines to this rank's events file (O_APPEND, so forks can share it)."""
    global _fd, _write_failed
    try:
        if _fd is None:
            events = os.path.join(_run_dir, "events")  # type: ignore[arg-type]
            os.makedirs(events, exist_ok=True)
            _fd = os.open(
                os.path.join(events, f"rank-{rank}.jsonl"),
                os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                0o644,
            )
            if attempt:  # what follows in the shared file is this attempt's
                data = event_lines.attempt_line(_time(), attempt) + data
        view = memoryview(data)
        while view:
            view = view[os.write(_fd, view) :]
    except OSError as exc:
        if not _write_failed:
            _write_failed = True
            print(f"[jt] cannot write events: {exc}", file=sys.stderr, flush=True)


# --- heartbeat -------------------------------------------------------------------------------

_beat_on = os.environ.get("JT_HEARTBEAT", "1") != "0"
_heart: rank_files.Heartbeat | None = None  # made at the first event written or beat


def _heartbeat() -> rank_files.Heartbeat:
    global _heart
    if _heart is None:
        import jupyter_trainer.rankside.rank.rank_files as rank_files

        path = os.path.join(_run_dir, "events", f"rank-{rank}.beat")  # type: ignore[arg-type]
        _heart = rank_files.Heartbeat(path, _pid, attempt)
    return _heart


def _beat() -> None:
    """Rewrite this rank's heartbeat file (at most once a second; never in a forked child)."""
    if _beat_on and os.getpid() == _pid:
        _heartbeat().beat(_time())


def _waiting() -> None:
    """This rank waits for work it was not given yet (a live session between cells): it
    counts as progressing, so the supervisor's stall watch judges it only while it runs."""
    if _run_dir is not None and _beat_on:
        _heartbeat().progress = _time()


def _sample(last: bool = False) -> None:
    """This rank's system figures when due (rankside/observe/system.py), or with ``last`` as it
    exits, written apart from the event buffer: they are no sign of the training's progress."""
    if last:
        line = system.last_line(_pid, _time())
    else:
        line = system.due_line(_pid, local_rank, _run_dir, _time())
    if line:
        with _lock:
            _write(line)


def _start_flusher() -> None:
    global _flusher
    with _start_lock:
        if _flusher is None and not _closed:
            thread = threading.Thread(target=_flush_loop, name="jt-events", daemon=True)
            thread.start()
            _flusher = thread


def _flush_loop() -> None:
    import select

    while not _closed:
        if _wake_r is not None:
            try:
                ready, _, _ = select.select([_wake_r], [], [], FLUSH_INTERVAL)
                data = os.read(_wake_r, 512) if ready else b""
            except OSError:
                data = b""
            if signal.SIGTERM in data:
                _sigterm_from_flusher()
        else:
            time.sleep(FLUSH_INTERVAL)
        try:
            flush()
            _beat()
            _sample()
        except Exception:  # keep flushing: a failure here must not end event logging
            pass


# --- exit, exceptions, SIGTERM ----------------------------------------------------------------

# Called as hook(signum) on SIGTERM after the events are flushed and before the process ends;
# the boot script records the rank's end here. A hook may end the process itself.
_terminate_hooks: list[Callable[[int], None]] = []
_terminating = threading.Lock()
_deferred_signal: int | None = None
_wake_r: int | None = None
_wake_w: int | None = None


def _terminate(signum: int) -> None:
    """Flush, run the hooks, and die of ``signum`` (from the main thread) or exit 128+signum."""
    global _deferred_signal
    _deferred_signal = None
    if not _terminating.acquire(blocking=False):
        return  # the other thread is already ending the process
    if os.getpid() == _pid:
        try:
            flush()
        except Exception:
            pass
        for hook in list(_terminate_hooks):
            try:
                hook(signum)
            except Exception:
                pass
    if threading.current_thread() is threading.main_thread():
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the signal is delivered before this returns; belt and braces
    os._exit(128 + signum)


def _on_sigterm(signum: int, frame: Any) -> None:
    global _deferred_signal
    if os.getpid() != _pid:  # a forked child inherited the handler: just die as usual
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _lock_owner == threading.get_ident():
        _deferred_signal = signum  # we interrupted our own flush(); it ends the process after
        return
    _terminate(signum)


def _sigterm_from_flusher() -> None:
    """SIGTERM arrived; if the main thread is stuck in C code and cannot run the handler, end
    the process from here after a grace period."""
    time.sleep(_SIGTERM_GRACE)
    if signal.getsignal(signal.SIGTERM) is _on_sigterm and os.getpid() == _pid:
        _terminate(signal.SIGTERM)


def _at_exit() -> None:
    global _closed
    try:
        flush()
        try:
            _sample(last=True)  # after the events: they are not to wait for the figures
        except Exception:  # the figures at exit are not worth a traceback at exit
            pass
    finally:
        _closed = True


def _excepthook(exc_type: type, exc: BaseException, tb: Any) -> None:
    try:
        flush()
    except Exception:
        pass
    _previous_excepthook(exc_type, exc, tb)


def _after_fork_in_child() -> None:
    # A forked child (a DataLoader worker, say) holds a copy of the parent's pending events
    # and fds but not its thread. Start clean, and give the SIGTERM handling back: the
    # parent's flusher must never read the child's signals from a shared wakeup pipe.
    global _lock, _start_lock, _flusher, _lock_owner, _terminating, _wake_r, _wake_w
    _buf.clear()
    _lock, _start_lock, _terminating = threading.Lock(), threading.Lock(), threading.Lock()
    _lock_owner = None
    _flusher = None
    _terminate_hooks.clear()
    if _wake_r is not None:
        try:
            signal.set_wakeup_fd(-1)
            if signal.getsignal(signal.SIGTERM) is _on_sigterm:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:
            pass
        for fd in (_wake_r, _wake_w):
            try:
                os.close(fd)  # type: ignore[arg-type]
            except OSError:
                pass
        _wake_r = _wake_w = None


def _install() -> None:
    global _previous_excepthook, _wake_r, _wake_w
    atexit.register(_at_exit)
    _previous_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    os.register_at_fork(after_in_child=_after_fork_in_child)
    if threading.current_thread() is not threading.main_thread():
        return
    preemption.install()
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return  # someone else owns SIGTERM; leave it alone
    signal.signal(signal.SIGTERM, _on_sigterm)
    # A wakeup fd lets the flusher thread see SIGTERM even while the main thread sits in C
    # code (a hung collective) and so cannot run the Python handler.
    try:
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        if signal.set_wakeup_fd(w, warn_on_full_buffer=False) != -1:
            signal.set_wakeup_fd(-1)  # someone else uses it (not expected): leave theirs
            raise OSError("wakeup fd in use")
        _wake_r, _wake_w = r, w
    except (OSError, ValueError):
        pass


_previous_excepthook = sys.excepthook
if in_run:
    _install()


def _start_heartbeat() -> None:
    """Start the flusher now, not at the first event, so a rank that has not logged yet is
    still seen alive. The boot script calls this; importing the module starts no thread."""
    if _beat_on and in_run:
        _start_flusher()
