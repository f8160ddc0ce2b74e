"""PyTorch's Flight Recorder in every rank, and its dumps into the run folder.

torch keeps a ring buffer of the last ``TORCH_FR_BUFFER_SIZE`` collectives of each process
group (operation, sequence number, group, tensor sizes and dtypes, when it was entered,
whether it completed), for Gloo as for NCCL; ``install`` turns it on before the rank's code
makes a group: ``JUPYTER_TRAINER_FLIGHT_RECORDER`` entries (``DEFAULT_ENTRIES``; 0 turns it
off), unless the run's environment sets ``TORCH_FR_BUFFER_SIZE`` itself.

A dump is ``collectives/rank-<r>.json`` in the run folder: this rank's recorder, taken by a
thread of its own (``jt-collectives``), which runs while the main thread waits inside a
collective (torch lets go of the GIL there). It dumps

- when asked: a ``collectives/request`` file in the run folder (the supervisor writes it when
  its stall watch fires, ``jupyter-trainer hang`` when a user asks);
- when this rank has waited in one collective for the stall timeout (on a node whose run
  folder the supervisor cannot write to, this is how a hang is seen there);
- when the rank fails or is ended by a signal (``dump_now``, from the boot script), and as its
  code ends well (a record of how late each rank came to each collective).

Whatever starts a dump on one rank is passed to all the others through the run's rendezvous
store (key ``jt/collectives/request``), so every rank of every node dumps at once.
Standard library only; torch is imported only once the rank's code has imported it.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
from typing import Any

BUFFER_ENV = "TORCH_FR_BUFFER_SIZE"
SWITCH_ENV = "JUPYTER_TRAINER_FLIGHT_RECORDER"  # entries to keep; 0: off
DEFAULT_ENTRIES = 2000
KEEP_ENTRIES = 500  # the newest entries a dump writes, per rank
POLL_S = 0.5
STORE_KEY = "jt/collectives/request"
FAILED, END = "failed-", "end"  # the dumps at a failure (boot.py) and at the code's end
DEFAULT_WAIT_S = 300.0  # a wait in one collective that dumps, without a stall timeout

_state: dict[str, Any] = {"run_dir": None, "done": set(), "wait": None}
_lock = threading.Lock()


def entries() -> int:
    """How many collectives the recorder keeps, as the environment asks (0: off)."""
    for name in (BUFFER_ENV, SWITCH_ENV):
        text = os.environ.get(name, "").strip()
        if text:
            try:
                return max(0, int(text))
            except ValueError:
                print(f"[jt] {name}={text!r} is not a whole number; recorder off", file=sys.stderr)
                return 0
    return DEFAULT_ENTRIES


def install(run_dir: str | None) -> None:
    """Turn the recorder on for the groups this rank will make, and start the dump thread."""
    size = entries()
    if size <= 0:
        os.environ[BUFFER_ENV] = "0"
        return
    os.environ[BUFFER_ENV] = str(size)
    if not run_dir or os.environ.get("WORLD_SIZE", "1") in ("", "0", "1"):
        return
    _state["run_dir"] = run_dir
    _state["wait"] = _wait_limit(run_dir)
    threading.Thread(target=_loop, name="jt-collectives", daemon=True).start()
    from ..frameworks.import_hooks import when_imported

    when_imported("torch.distributed", _dump_before_destroy)


def _dump_before_destroy(dist: Any) -> None:
    """``destroy_process_group()`` of the default group dumps first (the end's record)."""
    original = dist.destroy_process_group

    def destroy_process_group(group: Any = None) -> Any:
        if group is None:
            try:
                dump_now(END, share=False)
            except Exception as exc:  # the group goes all the same
                print(f"[jt] collective dump failed: {exc!r}", file=sys.stderr)
        return original(group)

    destroy_process_group.__doc__ = original.__doc__
    setattr(dist, "destroy_process_group", destroy_process_group)  # noqa: B010


def _wait_limit(run_dir: str) -> float:
    try:
        with open(os.path.join(run_dir, "spec.json"), encoding="utf-8") as fh:
            stall = float((json.load(fh).get("watch") or {}).get("stall_timeout") or 0)
    except (OSError, ValueError, TypeError, AttributeError):
        stall = 0.0
    return stall if stall > 0 else DEFAULT_WAIT_S


def _dist() -> Any:
    """torch.distributed with a default group, or None (not imported, or no group yet)."""
    dist = sys.modules.get("torch.distributed")
    try:
        return dist if dist is not None and dist.is_initialized() else None
    except Exception:
        return None


def _store(dist: Any) -> Any:
    try:
        return dist.distributed_c10d._get_default_store()
    except Exception:
        return None


def _entered(trace: dict[str, Any]) -> dict[str, Any]:
    """The newest collective each group has entered."""
    status = trace.get("pg_status") or {}
    return {pg: s.get("last_enqueued_collective") for pg, s in sorted(status.items())}


def _pass_on(dist: Any, why: str) -> None:
    """Ask every other rank for a dump too, through the rendezvous store."""
    store = _store(dist)
    try:
        if store is not None:
            store.set(STORE_KEY, why)
    except Exception:  # the store's host is gone: this rank's dump stands alone
        pass


def _trace(include_collectives: bool = True) -> bytes:
    """torch's own JSON dump of this process's recorder (every group's)."""
    import torch._C._distributed_c10d as c10d

    dump: Any = c10d._dump_fr_trace_json  # type: ignore[attr-defined]  # torch's stubs lack it
    return bytes(dump(include_collectives))


def _loop() -> None:
    waiting: tuple[Any, float] | None = None  # (pg, seq) this rank waits in, and since when
    while True:
        time.sleep(POLL_S)
        dist = _dist()
        if dist is None:
            continue
        try:
            asked = _asked(dist)
            if asked is None:
                waiting, asked = _waited(waiting)
            if asked is not None:
                dump_now(asked)
        except Exception as exc:  # a dump that fails must not end the watch
            print(f"[jt] collective dump failed: {exc!r}", file=sys.stderr)


def _asked(dist: Any) -> str | None:
    """A request not yet answered: from the run folder's file, else from the store."""
    path = os.path.join(_state["run_dir"], "collectives", "request")
    try:
        with open(path, encoding="utf-8") as fh:
            found = fh.read().strip()
    except OSError:
        found = ""
    if found and found not in _state["done"]:
        return found
    store = _store(dist)
    if store is not None and store.check([STORE_KEY]):
        found = store.get(STORE_KEY).decode(errors="replace")
        if found not in _state["done"]:
            return found
    return None


def _waited(
    waiting: tuple[Any, float] | None,
) -> tuple[tuple[Any, float] | None, str | None]:
    """Whether this rank has waited in one collective for the wait limit (a request if so)."""
    status = json.loads(_trace(include_collectives=False)).get("pg_status") or {}
    open_now = sorted(
        (pg, int(s.get("last_enqueued_collective", -1)))
        for pg, s in status.items()
        if int(s.get("last_enqueued_collective", -1)) > int(s.get("last_completed_collective", -1))
    )
    if not open_now:
        return None, None
    key = tuple(open_now)
    if waiting is None or waiting[0] != key:
        return (key, time.monotonic()), None
    if time.monotonic() - waiting[1] < _state["wait"]:
        return waiting, None
    pg, seq = open_now[0]
    return waiting, f"wait-{pg}-{seq}"


def dump_now(why: str, share: bool = True) -> str | None:
    """Write this rank's recorder to ``collectives/rank-<r>.json`` and, with ``share``, pass
    ``why`` on to the other ranks (once per ``why``); the file's path, or None without a run
    folder or a group."""
    run_dir = _state["run_dir"]
    dist = _dist()
    if run_dir is None or dist is None:
        return None
    with _lock:
        if share and why in _state["done"]:
            return None
        _state["done"].add(why)
        if share:  # by a thread of its own: a store whose host is gone blocks its caller
            threading.Thread(target=_pass_on, args=(dist, why), daemon=True).start()
        trace = json.loads(_trace())
        entered = json.dumps(_entered(trace))
        if why.startswith(FAILED) and entered == _state.get("entered"):
            # nothing entered since the last dump, which shows the wait; ended, the rank's
            # recorder counts that collective as completed
            return None
        if why != END:
            _state["entered"] = entered
        trace["entries"] = (trace.get("entries") or [])[-KEEP_ENTRIES:]
        rank = int(os.environ.get("RANK", "0"))
        record = {
            "version": 1,
            "rank": rank,
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "taken": time.time(),
            "why": why,
            "trace": trace,
        }
        folder = os.path.join(run_dir, "collectives")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"rank-{rank}.json")
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
        return path
