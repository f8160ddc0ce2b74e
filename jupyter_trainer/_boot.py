"""Start one rank of a run: ``python -u code/_jt/boot.py ENTRY [ARGS...]``.

Every launcher (torchrun, mpirun, horovodrun, plain python) starts this file, copied into the
run's snapshot as ``code/_jt/boot.py`` beside a fallback copy of the runtime in
``code/_jt/jupyter_trainer/``. It maps ranks (by importing the runtime), sends this rank's
stdout/stderr to ``logs/rank-<r>.log``, records the rank's start and end in
``ranks/rank-<r>.json`` (exit code, and the error and traceback of a crash), then runs ENTRY as
``__main__`` the way ``python ENTRY ARGS`` would. Standard library only; it imports nothing of
jupyter_trainer but its runtime.
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import socket
import sys
import time
import traceback
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_TRACEBACK_CHARS = 8000


def _shim_last() -> None:
    """Let an installed jupyter_trainer win; the copy beside this file is only a fallback."""
    here = os.path.realpath(_HERE)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    sys.path.append(_HERE)


def _write_json(path: str, record: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def _redirect_output(log_path: str) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass


def _force_backend(backend: str) -> None:
    """Make ``init_process_group()`` without a backend use the one the user forced."""
    import functools

    import torch.distributed as dist

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args and args[0] is None:
            args = (backend, *args[1:])
        elif not args and kwargs.get("backend") is None:
            kwargs["backend"] = backend
        return original(*args, **kwargs)

    dist.init_process_group = init_process_group


def _error_line(exc: BaseException) -> str:
    name = type(exc).__qualname__
    module = type(exc).__module__
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    message = " ".join(str(exc).split())
    line = f"{name}: {message}" if message else name
    return line[:1000]


def _user_traceback(exc: BaseException, entry: str) -> str:
    """The traceback from the entry's first frame on (boot and runpy frames dropped)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != entry:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)  # what python does for sys.exit("message")
    return 1


def _release_process_group() -> None:
    """Destroy a process group the entry left open, so Gloo/NCCL threads stop before exit.

    Without this, a rank that ends while its backend's threads are still running can abort
    in C++ teardown ("terminate called without an active exception") after its work is done.
    """
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception as exc:
        print(f"[jt] destroying the process group failed: {exc}", file=sys.stderr)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: boot.py ENTRY [ARGS...]", file=sys.stderr)
        return 2
    _shim_last()
    from jupyter_trainer import runtime  # maps RANK/WORLD_SIZE/... into os.environ

    run_dir = os.environ.get("JT_RUN_DIR") or None
    record: dict[str, Any] = {}
    record_path = None
    if run_dir:
        logs = os.path.join(run_dir, "logs")
        ranks = os.path.join(run_dir, "ranks")
        os.makedirs(logs, exist_ok=True)
        os.makedirs(ranks, exist_ok=True)
        _redirect_output(os.path.join(logs, f"rank-{runtime.rank}.log"))
        record_path = os.path.join(ranks, f"rank-{runtime.rank}.json")
        record = {"rank": runtime.rank, "local_rank": runtime.local_rank,
                  "world_size": runtime.world_size, "pid": os.getpid(),
                  "host": socket.gethostname(), "started": time.time()}
        _write_json(record_path, record)

    boot_pid = os.getpid()

    def finish(exit_code: int, **extra: Any) -> None:
        try:
            runtime.flush()
        except Exception as exc:
            print(f"[jt] flushing events failed: {exc}", file=sys.stderr)
        if record_path is not None and os.getpid() == boot_pid:
            record.update(ended=time.time(), exit_code=exit_code, **extra)
            try:
                _write_json(record_path, record)
            except OSError as exc:
                print(f"[jt] cannot record the rank's end: {exc}", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass

    def on_terminate(signum: int) -> None:
        # Called by the runtime's SIGTERM handler once the events are written.
        if os.getpid() != boot_pid:
            return
        name = signal.Signals(signum).name
        print(f"[jt] rank {runtime.rank} terminated by {name}", file=sys.stderr)
        finish(128 + signum, signal=name)
        os._exit(128 + signum)

    hooks = getattr(runtime, "_terminate_hooks", None)
    if hooks is not None:
        hooks.append(on_terminate)

    if os.environ.get("JT_BACKEND_OVERRIDE") == "1" and os.environ.get("JT_BACKEND"):
        _force_backend(os.environ["JT_BACKEND"])

    code_root = os.path.dirname(_HERE)
    entry = argv[0] if os.path.isabs(argv[0]) else os.path.join(code_root, argv[0])
    entry = os.path.abspath(entry)
    in_jt = os.path.commonpath([entry, os.path.abspath(_HERE)]) == os.path.abspath(_HERE)
    sys.argv = [entry, *argv[1:]]
    sys.path.insert(0, code_root if in_jt else os.path.dirname(entry))

    try:
        runpy.run_path(entry, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc.code)
        if code == 0:
            _release_process_group()
        finish(code)
        return code
    except BaseException as exc:
        code = 128 + signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
        tb = _user_traceback(exc, entry)
        print(tb, end="", file=sys.stderr)
        finish(code, error=_error_line(exc), traceback=tb[-_TRACEBACK_CHARS:])
        return code
    _release_process_group()
    finish(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
