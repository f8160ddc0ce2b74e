"""Start one rank of a run: ``python -u code/_jt/boot.py ENTRY [ARGS...]``.

Every launcher (torchrun, mpirun, horovodrun, plain python) starts this file, copied into the
run's snapshot as ``code/_jt/boot.py`` beside a fallback copy of the runtime in
``code/_jt/jupyter_trainer/``. It maps ranks (by importing the runtime), sends this rank's
stdout/stderr to ``logs/rank-<r>.log``, records the rank's start and end in
``ranks/rank-<r>.json`` (exit code, and the error and traceback of a crash), then runs ENTRY as
``__main__`` the way ``python ENTRY ARGS`` would, from the node's private working directory
``work/node-<n>/``: a copy of the snapshot (never the snapshot itself, which stays as
captured), where ``./outputs`` is the run's ``outputs/`` and ``./logs`` its ``logs/user/``.
Standard library only; of jupyter_trainer it imports only the runtime and ``rank_death`` (the
rank's death watcher)."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import re
import runpy
import signal
import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

_HERE, _TRACEBACK_CHARS = os.path.dirname(os.path.abspath(__file__)), 8000
_CELL_MARKER = "# --- cell ---"  # capture.cellscript.CELL_MARKER
_exit_code: int | None = None  # the rank's exit code, once main() has returned


def _shim_last() -> None:
    """Let an installed jupyter_trainer win; the copy beside this file is only a fallback."""
    here = os.path.realpath(_HERE)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or os.curdir) != here]
    sys.path.append(_HERE)


def _keep_earlier_attempt(record_path: str, rank: int, attempt: int) -> None:
    """Move an earlier attempt's record of this rank to ``rank-<r>.attempt-<k>.json``."""
    try:
        with open(record_path, encoding="utf-8") as f:
            earlier = json.load(f).get("attempt", 0)
        if isinstance(earlier, int) and earlier < attempt:
            kept = os.path.join(os.path.dirname(record_path), f"rank-{rank}.attempt-{earlier}.json")
            os.replace(record_path, kept)
    except (OSError, ValueError, AttributeError):
        pass


def _redirect_output(log_path: str) -> None:
    _flush_stdio()
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            pass


def _error_line(exc: BaseException) -> str:
    name, module = type(exc).__qualname__, type(exc).__module__
    if module not in ("builtins", "__main__"):
        name = f"{module}.{name}"
    message = " ".join(str(exc).split())
    line = f"{name}: {message}" if message else name
    return line[:1000]


def _debug(
    exc: BaseException,
    record_path: str | None,
    run_dir: str | None,
    rank: int,
    frames: list[dict[str, Any]],
) -> str | None:
    """Under ``--debug``: wait for a debugger to attach to the rank that raised ``exc`` and
    run its post-mortem (``debugger.post_mortem``); how that ended, or None without one."""
    if record_path is None or isinstance(exc, KeyboardInterrupt) or exc.__traceback__ is None:
        return None
    try:
        from jupyter_trainer.rankside.debug import debugger
        from jupyter_trainer.rankside.rank import run_inputs

        limit = (run_inputs.from_spec(run_dir, "watch") or {}).get("debug")
    except (ImportError, RuntimeError):  # an older installed rank side, or no spec
        return None
    if not isinstance(limit, (int, float)) or limit <= 0:
        return None
    last = frames[-1] if frames else {}
    file = str(last.get("file"))
    shown = f"{file}, line " if "/" not in file else f"{os.path.basename(file)}:"
    place = f" at {shown}{last.get('line')}" if last else ""
    where = f"rank {rank}: {_error_line(exc)[:200]}{place}"
    try:
        return debugger.post_mortem(record_path, float(limit), exc.__traceback__, where)
    except Exception as failed:  # the rank's failure must be recorded all the same
        print(f"[jt] the debugger failed: {failed!r}", file=sys.stderr)
        return None


def _cell_run() -> Any:
    """The rank side's runner of a cell's script by its parts, or None (an older installed
    rank side, which runs the script whole)."""
    try:
        from jupyter_trainer.rankside.rank import cell_run
    except ImportError:
        return None
    return cell_run


def _is_entry(entry: str) -> Callable[[str], bool]:
    """Whether a frame's file is the entry's code: the script, or a part of a cell's script
    compiled under its cell's name (``cell_run``)."""
    cell_run = _cell_run()
    return (lambda file: cell_run.is_part(file, entry)) if cell_run else entry.__eq__


def _user_traceback(exc: BaseException, entry: str, run_dir: str | None) -> str:
    """The traceback from the entry's first frame on (boot and runpy frames dropped), with
    the frames of a notebook cell given as the cell's own lines (``_cell_lines``)."""
    import traceback

    tb, ours = exc.__traceback__, _is_entry(entry)
    while tb is not None and not ours(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(exc), exc, tb or exc.__traceback__))
    cell_run = _cell_run()
    return _cell_lines(cell_run.cited(text) if cell_run else text, entry, run_dir)


def _cell_of(entry: str, run_dir: str | None) -> tuple[int, str] | None:
    """The line of ``_CELL_MARKER`` in a cell's script capture and the cell's name, or None
    when ``entry`` is not one."""
    if os.path.basename(entry) != "cell.py" or os.path.basename(os.path.dirname(entry)) != "_jt":
        return None
    try:
        with open(entry, encoding="utf-8") as f:
            marker = f.read().splitlines().index(_CELL_MARKER) + 1
    except (OSError, ValueError):
        return None
    cell = None
    try:
        with open(os.path.join(run_dir or "", "spec.json"), encoding="utf-8") as f:
            cell = json.load(f).get("origin", {}).get("cell")
    except (OSError, ValueError, AttributeError):
        pass
    return marker, f"Cell In [{cell}]" if isinstance(cell, int) else "the cell"


def _frames(exc: BaseException, entry: str, run_dir: str | None) -> list[dict[str, Any]]:
    """The failure's frames with their variables (``frame_locals``), a cell's lines as the
    editor numbers them."""
    try:
        from jupyter_trainer.rankside.debug import frame_locals
    except ImportError:  # an older installed rank side
        return []
    cell = _cell_of(entry, run_dir)

    def place(file: str, line: int) -> tuple[str, int]:
        if cell is not None and file == entry and line > cell[0]:
            return cell[1], line - cell[0]
        return file, line

    try:
        return frame_locals.failure_frames(exc, _is_entry(entry), place)
    except Exception as failed:
        print(f"[jt] cannot record the frames' variables: {failed}", file=sys.stderr)
        return []


def _cell_lines(text: str, entry: str, run_dir: str | None) -> str:
    """``File ".../_jt/cell.py", line 31`` -> ``Cell In [7], line 3``: the cell follows
    ``_CELL_MARKER`` verbatim in the script capture made of it, and the run's origin says
    which execution of the notebook it was. Lines above the marker (the parameters and the
    notebook definitions the run carries) keep the script's name."""
    cell = _cell_of(entry, run_dir)
    if cell is None:
        return text
    marker, name = cell

    def mapped(match: re.Match) -> str:
        line = int(match.group(1))
        return f"{name}, line {line - marker}" if line > marker else match.group(0)

    return re.sub(r'File "%s", line (\d+)' % re.escape(entry), mapped, text)


def _gpu_oom(exc: BaseException) -> dict[str, Any]:
    """What the rank's GPU held when PyTorch ran out of its memory (rankside/observe/system.py)."""
    try:
        from jupyter_trainer.rankside.observe import system
    except ImportError:  # an older installed rank side
        return {}
    return system.gpu_oom(exc)


def _exit_status(code: Any) -> int:
    if code is None or isinstance(code, int):
        return code or 0
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


def _leave_together(rank_env: Any, rank_death: Any, ranks: str | None) -> None:
    """A rank whose code ended well leaves the rendezvous store only with its peers
    (``launcher_env.leave_with_peers``; its peers' records are in ``ranks``)."""
    leave = getattr(rank_env, "leave_with_peers", None)  # absent from an older rank side
    try:
        if leave is not None:
            leave(rank_death, ranks)
    except Exception as exc:
        print(f"[jt] leaving the rendezvous store failed: {exc}", file=sys.stderr)


def _flush_stdio() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _leave_before_native_teardown() -> None:
    """The last atexit handler (threads joined, other handlers run): exit past C++ static
    destructors, where torch 2.13 can abort a finished rank ("terminate called without an
    active exception", 1 two-rank Gloo run in 30 here, even after destroy_process_group)."""
    if _exit_code is not None and "torch" in sys.modules:
        gc.collect()  # close the files that only reference cycles still hold
        _flush_stdio()
        os._exit(_exit_code & 0xFF)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: boot.py ENTRY [ARGS...]", file=sys.stderr)
        return 2
    atexit.register(_leave_before_native_teardown)  # first registered, so it runs last
    _shim_last()
    sys.dont_write_bytecode = True  # no __pycache__ in the snapshot from the runtime's copy
    from jupyter_trainer.rankside.observe import death_watch as rank_death
    from jupyter_trainer.rankside.rank import runtime  # maps RANK/WORLD_SIZE/... into os.environ

    sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)

    run_dir = os.environ.get("JT_RUN_DIR") or None
    try:  # the secret variables spec.json records redacted (absent from an older rank side)
        from jupyter_trainer.rankside.rank import run_secrets
    except ImportError:
        pass
    else:
        run_secrets.into_environment(run_dir)
    record: dict[str, Any] = {}
    record_path = None
    if run_dir:
        logs, ranks = os.path.join(run_dir, "logs"), os.path.join(run_dir, "ranks")
        os.makedirs(logs, exist_ok=True)
        os.makedirs(ranks, exist_ok=True)
        _redirect_output(os.path.join(logs, f"rank-{runtime.rank}.log"))
        from jupyter_trainer.rankside.rank import rank_files

        if hasattr(rank_files, "mark_output"):  # an older installed rank side has no log times
            rank_files.mark_output(os.path.join(logs, f"rank-{runtime.rank}.times"))
        record_path = os.path.join(ranks, f"rank-{runtime.rank}.json")
        attempt = getattr(runtime, "attempt", 0)
        record = {
            "rank": runtime.rank,
            "local_rank": runtime.local_rank,
            "world_size": runtime.world_size,
            "pid": os.getpid(),
            "host": rank_death.hostname(),
            "started": time.time(),
            "attempt": attempt,
        }
        if os.environ.get("SLURMD_NODENAME"):  # Slurm's name of the node, which srun takes
            record["slurm_node"] = os.environ["SLURMD_NODENAME"]
        # an older installed rank side has no lock: its watcher writes in its own time
        locked = getattr(rank_death, "records_locked", lambda _: contextlib.nullcontext())
        with locked(ranks):
            if attempt:
                _keep_earlier_attempt(record_path, runtime.rank, attempt)
            rank_death.write_json(record_path, record)
        if attempt:
            rank_death.watch_death(record_path, attempt)
        else:
            rank_death.watch_death(record_path)
    launchers = rank_death.launcher_chain(os.environ.get("JT_RUN_ID", ""))

    def evidence() -> dict[str, Any]:
        """Taken the moment this rank fails: which peers were already dying, and whether
        this rank's launcher was already gone (see ``rank_death.failure_evidence``)."""
        if record_path is None:
            return {}
        try:
            recorder(f"failed-{runtime.rank}")  # every rank's collectives, into the run folder
            return rank_death.failure_evidence(
                os.path.dirname(record_path), runtime.rank, launchers
            )
        except Exception as exc:  # the rank's own end must be recorded all the same
            print(f"[jt] cannot look at the other ranks: {exc!r}", file=sys.stderr)
            return {}

    boot_pid = os.getpid()
    ending: dict[str, Any] = {}  # the end the rank records: its exit code, and what it saw

    def record_end() -> None:
        if record_path is not None and os.getpid() == boot_pid:
            record.setdefault("ended", time.time())
            record.update(ending)
            try:
                rank_death.write_json(record_path, record)
            except OSError as exc:
                print(f"[jt] cannot record the rank's end: {exc}", file=sys.stderr)

    def finish(exit_code: int, **extra: Any) -> None:
        ending.update(exit_code=exit_code, **extra)
        try:
            runtime.flush()
        except Exception as exc:
            print(f"[jt] flushing events failed: {exc}", file=sys.stderr)
        record_end()
        _flush_stdio()

    def end_well(release_group: bool = True) -> None:
        if release_group:
            _release_process_group()
        finish(0)
        _leave_together(rank_env, rank_death, record_path and os.path.dirname(record_path))

    def on_terminate(signum: int) -> None:
        # Called by the runtime's SIGTERM handler once the events are written.
        if os.getpid() != boot_pid:
            return
        if ending:
            # The code has ended and its end is recorded, or being recorded: a SIGTERM now
            # comes from whoever ends the run after it (its launcher, the supervisor), while
            # this rank waits for its peers to leave the store or is still exiting. Its own
            # end stands, and so does its exit code.
            record_end()
            _flush_stdio()
            os._exit(ending["exit_code"] & 0xFF)
        name = signal.Signals(signum).name
        seen = evidence()
        print(f"[jt] rank {runtime.rank} terminated by {name}", file=sys.stderr)
        finish(128 + signum, signal=name, **seen)
        os._exit(128 + signum)

    real_exit = os._exit

    def exit_from_code(status: int) -> NoReturn:
        """``os._exit`` as the rank's code calls it (to skip a backend's slow teardown, for
        example): the rank's end is recorded first, as any other end, and a good one leaves
        the rendezvous store with its peers. Forked children (DataLoader workers) and the
        ends this module records itself exit at once."""
        try:
            if os.getpid() == boot_pid and not ending:
                if status & 0xFF == 0:
                    end_well(release_group=False)  # the code meant to skip the teardown
                else:
                    failed_at = time.time()
                    error = f"the code called os._exit({status})"
                    print(f"[jt] rank {runtime.rank}: {error}", file=sys.stderr)
                    finish(status & 0xFF, failed_at=failed_at, error=error, **evidence())
        finally:
            real_exit(status)

    os._exit = exit_from_code
    hooks = getattr(runtime, "_terminate_hooks", None)
    if hooks is not None:
        hooks.append(on_terminate)
    if hasattr(runtime, "_start_heartbeat"):
        runtime._start_heartbeat()

    from jupyter_trainer.rankside.rank import launcher_env as rank_env
    from jupyter_trainer.rankside.rank import workdir as rank_workdir

    if os.environ.get("JT_BACKEND_OVERRIDE") == "1" and os.environ.get("JT_BACKEND"):
        rank_env.force_backend(os.environ["JT_BACKEND"])
    rank_env.join_before_returning()
    rank_env.separate_restarts()
    rank_env.host_store_on_held_port()
    if hasattr(rank_env, "keep_rendezvous_stores"):  # absent from an older installed rank side
        rank_env.keep_rendezvous_stores()
    recorder = getattr(rank_env, "flight_recorder", lambda why=None: None)  # as above
    recorder()
    try:  # framework calls report to the run (absent from an older installed rank side)
        from jupyter_trainer.rankside.frameworks import autolog
    except ImportError:
        pass
    else:
        autolog.install(run_dir)

    snapshot = os.path.dirname(_HERE)
    code_root = snapshot
    if run_dir and record_path is not None:  # the ranks run from the node's private copy
        try:
            code_root, record["workdir"] = rank_workdir.enter_workdir(
                run_dir,
                os.path.realpath(snapshot),
                rank_workdir.node_key(runtime.world_size, runtime.local_world_size),
            )
        except OSError as exc:
            message = f"cannot make the node's working directory: {exc}"
            print(f"[jt] {message}", file=sys.stderr)
            finish(1, error=message)
            return 1
        rank_death.write_json(record_path, record)
        sys.path[:] = [os.path.join(code_root, "_jt") if p == _HERE else p for p in sys.path]
    entry = argv[0]
    if os.path.isabs(entry) and os.path.commonpath([os.path.abspath(entry), snapshot]) == snapshot:
        entry = os.path.relpath(entry, snapshot)
    entry = os.path.abspath(os.path.join(code_root, entry))
    jt_dir = os.path.join(code_root, "_jt")
    in_jt = os.path.commonpath([entry, jt_dir]) == jt_dir
    try:
        from jupyter_trainer.rankside.rank import script_args

        sys.argv = [entry, *script_args.resolved(argv[1:], runtime)]
    except KeyError as exc:
        message = str(exc.args[0] if exc.args else exc)
        print(f"[jt] {message}", file=sys.stderr)
        finish(2, error=message)
        return 2
    sys.path.insert(0, code_root if in_jt else os.path.dirname(entry))
    v1 = os.path.join(jt_dir, "azureml_v1")
    if os.path.isdir(v1):  # Azure ML SDK v1's script side, ahead of an installed azureml
        sys.path.insert(1, v1)

    from jupyter_trainer.rankside.rank import stderr_tail

    said = sys.stderr = stderr_tail.Tail(sys.stderr)
    cell_run = _cell_run()
    parts = cell_run.parts_of(entry) if cell_run else None
    try:
        if parts is None:
            runpy.run_path(entry, run_name="__main__")
        else:  # a notebook cell's script: each part under its cell's name and lines
            cell_run.run(entry, run_dir, parts)
    except SystemExit as exc:
        failed_at = time.time()
        code = _exit_status(exc.code)
        if code == 0:
            end_well()
        else:  # no exception to show: what the script last said is its error
            last = said.last_line()
            error = f"rank {runtime.rank} exited with code {code}" + (f": {last}" if last else "")
            tail = {"traceback": said.text()} if last else {}
            finish(code, failed_at=failed_at, error=error, **tail, **evidence())
        return code
    except BaseException as exc:
        failed_at = time.time()  # before the traceback is formatted: the failure's own time
        seen = evidence()
        code = 128 + signal.SIGINT if isinstance(exc, KeyboardInterrupt) else 1
        tb = _user_traceback(exc, entry, run_dir)
        print(tb, end="", file=sys.stderr)
        frames = _frames(exc, entry, run_dir)
        debugged = _debug(exc, record_path, run_dir, runtime.rank, frames)
        finish(
            code,
            failed_at=failed_at,
            error=_error_line(exc),
            traceback=tb[-_TRACEBACK_CHARS:],
            frames=frames,
            **seen,
            **_gpu_oom(exc),
            **({"debugged": debugged} if debugged else {}),
        )
        return code
    end_well()
    return 0


if __name__ == "__main__":
    _exit_code = main(sys.argv[1:])
    sys.exit(_exit_code)
