"""``jt.checkpoint``: sharded checkpoints every rank writes in the background, through
``torch.distributed.checkpoint`` (DCP).

- ``jt.checkpoint.save(state_dict, step)``: every rank calls it with the same nested dict of
  tensors and plain values. It returns once the state is copied to host memory; the files
  are written by a background thread into ``checkpoint_dir/dcp/step-<step>/``: DCP's
  ``__<rank>_0.distcp`` shards and its ``.metadata``, then one ``done.<rank>`` per rank.
- ``jt.checkpoint.load(state_dict)``: fills ``state_dict`` in place from the newest complete
  checkpoint of the run (or of the run it resumes) and returns its step, or None. DCP
  reshards: a checkpoint saved at 2 ranks loads at 1 or at 4.
- ``jt.checkpoint.wait()``: blocks until this rank's saves are on disk. It also runs at exit.

A step folder is complete once its ``.metadata`` exists and a ``done.<r>`` for every rank
``r`` of the world that saved it (each names that world size). DCP writes ``.metadata`` on
rank 0 after every rank's shards are written; a rank writes its ``done`` file only after its
own save finished, so a folder that was being written when a rank died is never complete.

Standard library at import; torch is imported inside the functions (the rank side rule).
"""

from __future__ import annotations

import atexit
import json
import os
import re
import threading
import time
from typing import Any

from jupyter_trainer.rankside.rank import runtime
from jupyter_trainer.rankside.rank.dcp_complete import DONE, FOLDER, complete, saved_world

__all__ = ["checkpoint", "complete", "saved_world"]

_lock = threading.Lock()
_pending: list[threading.Thread] = []  # this rank's saves still being written
_failed: list[BaseException] = []  # a background save's error, raised by the next call
_group: Any = None  # a Gloo group of its own, so a background save's collectives never
_group_of: Any = None  # interleave with the training's on the default group
_exit_hook = False


def root() -> str:
    """This run's folder of sharded checkpoints (``checkpoint_dir/dcp``)."""
    return os.path.join(str(runtime.checkpoint_dir), FOLDER)


def step_folder(base: str, step: int) -> str:
    return os.path.join(base, f"step-{step}")


# --- save ------------------------------------------------------------------------------------


def save(state_dict: dict[str, Any], step: int) -> str:
    """Save ``state_dict`` as this rank's part of the checkpoint of ``step``; every rank calls
    it. Returns the step folder once the tensors are copied to host memory; the write goes on
    in the background (``wait`` blocks until it is on disk). A save still being written when
    the next one starts is waited for first, so at most one copy is held."""
    import jupyter_trainer.rankside.rank.rank_files as rank_files

    step = rank_files.checkpoint_step(step, 1)
    wait()
    dist, group = _dist_group()
    folder = step_folder(root(), step)
    _forget(folder, runtime.rank)
    if group is not None:
        dist.barrier(group=group)  # every old done file of this step is gone before any write
    os.makedirs(folder, exist_ok=True)
    world = dist.get_world_size() if group is not None else 1
    done = _start_write(state_dict, folder, group)
    thread = threading.Thread(
        target=_finish,
        args=(done, folder, step, world),
        name=f"jt-checkpoint-{step}",
        daemon=True,
    )
    with _lock:
        _pending.append(thread)
    thread.start()
    _at_exit()
    return folder


def _dist_group() -> tuple[Any, Any]:
    """torch.distributed and this module's Gloo group, or (dist, None) without several
    ranks. The group is made once (a collective: every rank's first save makes it)."""
    global _group, _group_of
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        _alone(dist)
        return dist, None
    default = dist.distributed_c10d._get_default_group()
    if _group is None or _group_of is not default:
        _group = dist.new_group(backend="gloo")
        _group_of = default
    return dist, _group


def _alone(dist: Any) -> None:
    """Raise where the run has several ranks but torch.distributed has not joined them: each
    rank would write the same files as rank 0 of a world of one."""
    joined = dist.is_available() and dist.is_initialized()
    if runtime.world_size > 1 and not joined:
        raise RuntimeError(
            f"jt.checkpoint: this run has {runtime.world_size} ranks; call "
            "torch.distributed.init_process_group() before saving or loading a checkpoint"
        )


def _start_write(state_dict: dict[str, Any], folder: str, group: Any) -> Any:
    """Copy the state to host memory and start writing it; returns what to wait on (a
    future with ``result()``)."""
    import torch.distributed.checkpoint as dcp

    writer = dcp.FileSystemWriter(folder)
    no_dist = group is None
    if hasattr(dcp, "async_save"):
        found = dcp.async_save(
            state_dict,
            storage_writer=writer,
            process_group=group,
            no_dist=no_dist,
            async_stager=_stager,
        )
        return getattr(found, "upload_completion", found)
    return _thread_save(dcp, state_dict, writer, group, no_dist)


class HostCopy:
    """Copies a state dict's tensors into host buffers it keeps from one save to the next
    (DCP's ``AsyncStager`` protocol). Reusing them spares the allocation and the first touch
    of fresh pages, which cost more than the copy itself; the price is one copy of the state
    held in host memory between saves. A save waits for the one before it, so a buffer is
    never refilled while it is being written."""

    _synchronize_after_execute = False
    should_synchronize_after_execute = False

    def __init__(self) -> None:
        self.buffers: dict[tuple[Any, ...], Any] = {}

    def stage(self, state_dict: Any) -> Any:
        return self.copy(state_dict, ())

    def copy(self, value: Any, path: tuple[Any, ...]) -> Any:
        import torch

        if isinstance(value, dict):
            return {k: self.copy(v, (*path, k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(self.copy(v, (*path, i)) for i, v in enumerate(value))
        if type(value) is torch.Tensor:
            return self.into_buffer(value, path)
        dtensor = _dtensor_class() if isinstance(value, torch.Tensor) else None
        if dtensor is not None and isinstance(value, dtensor):
            local = self.into_buffer(value.to_local(), path)
            return dtensor.from_local(
                local,
                value.device_mesh,
                value.placements,
                run_check=False,
                shape=value.shape,
                stride=value.stride(),
            )
        import copy

        return copy.deepcopy(value)  # another tensor subclass, or a plain value

    def into_buffer(self, tensor: Any, path: tuple[Any, ...]) -> Any:
        import torch

        buffer = self.buffers.get(path)
        if buffer is None or buffer.shape != tensor.shape or buffer.dtype != tensor.dtype:
            buffer = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu")
            self.buffers[path] = buffer
        return buffer.copy_(tensor.detach())

    def synchronize_staging(self) -> None:
        pass

    def close(self) -> None:
        pass


_stager = HostCopy()


def _dtensor_class() -> Any:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:
        return None
    return DTensor


def _thread_save(dcp: Any, state_dict: Any, writer: Any, group: Any, no_dist: bool) -> Any:
    """Where DCP has no ``async_save``: copy every tensor to host memory, then ``dcp.save``
    in a thread."""
    from concurrent.futures import Future

    staged = _stager.stage(state_dict)
    future: Future[Any] = Future()

    def write() -> None:
        try:
            future.set_result(
                dcp.save(staged, storage_writer=writer, process_group=group, no_dist=no_dist)
            )
        except BaseException as exc:
            future.set_exception(exc)

    threading.Thread(target=write, name="jt-checkpoint-write", daemon=True).start()
    return future


def _finish(future: Any, folder: str, step: int, world: int) -> None:
    """Wait for this rank's write, then mark its part done (last, atomically)."""
    try:
        future.result()
        record = {"step": step, "rank": runtime.rank, "world_size": world, "t": time.time()}
        _write_atomic(os.path.join(folder, DONE.format(rank=runtime.rank)), record)
    except BaseException as exc:
        with _lock:
            _failed.append(exc)


def _write_atomic(path: str, record: dict[str, Any]) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(record))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    try:
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _forget(folder: str, rank: int) -> None:
    """Remove this rank's done file of a step saved again (a restart repeats a step)."""
    try:
        os.unlink(os.path.join(folder, DONE.format(rank=rank)))
    except FileNotFoundError:
        pass


def wait() -> None:
    """Block until this rank's saves are written and marked done; raise a save's error."""
    while True:
        with _lock:
            if not _pending:
                break
            thread = _pending[0]
        thread.join()
        with _lock:
            if _pending and _pending[0] is thread:
                _pending.pop(0)
    with _lock:
        failed = list(_failed)
        _failed.clear()
    if failed:
        raise RuntimeError(f"jt.checkpoint.save failed in the background: {failed[0]!r}") from (
            failed[0]
        )


def _at_exit() -> None:
    """Register ``wait`` to run at exit, once (before the runtime's own exit flush)."""
    global _exit_hook
    if not _exit_hook:
        _exit_hook = True
        atexit.register(_wait_quietly)


def _wait_quietly() -> None:
    try:
        wait()
    except Exception as exc:
        import sys

        print(f"[jt] {exc}", file=sys.stderr, flush=True)


# --- what is complete --------------------------------------------------------------------------


def newest() -> tuple[int, str] | None:
    """The newest complete checkpoint of this run, else of the run it resumes."""
    found = complete(root())
    if found:
        return found[-1]
    lineage = _lineage()
    earlier = lineage.get("resumed_from") if isinstance(lineage, dict) else None
    run_dir = runtime._run_dir
    if (
        isinstance(earlier, str)
        and run_dir
        and re.fullmatch(r"[\w.-]+", earlier)
        and earlier.strip(".")
    ):
        runs = os.path.dirname(os.path.abspath(run_dir))
        found = complete(os.path.join(runs, earlier, "checkpoints", FOLDER))
        if found:
            return found[-1]
    return None


def _lineage() -> Any:
    import jupyter_trainer.rankside.rank.run_inputs as run_inputs

    return run_inputs.from_spec(runtime._run_dir, "lineage")


# --- load ------------------------------------------------------------------------------------


def load(state_dict: dict[str, Any]) -> int | None:
    """Fill ``state_dict`` in place from the newest complete checkpoint and return its step;
    None (``state_dict`` untouched) when there is none. Every rank calls it; with several
    ranks rank 0 picks the checkpoint so that all load the same one. DCP reshards: the world
    size may differ from the one that saved it."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    several = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    if not several:
        _alone(dist)
    wait()
    found = [newest() if runtime.rank == 0 or not several else None]
    if several:
        dist.broadcast_object_list(found, src=0)
    if found[0] is None:
        return None
    step, folder = found[0]
    dcp.load(state_dict, storage_reader=dcp.FileSystemReader(folder), no_dist=not several)
    return int(step)


class Checkpoints:
    """``jt.checkpoint``: ``save(state_dict, step)``, ``load(state_dict)``, ``wait()``."""

    save = staticmethod(save)
    load = staticmethod(load)
    wait = staticmethod(wait)

    @property
    def root(self) -> str:
        return root()

    def __repr__(self) -> str:
        return f"<jt.checkpoint: sharded checkpoints in {root()}>"


checkpoint = Checkpoints()
