"""The supervisor's writes of its run's record: one at a time, kept on a full disk, and
written again when a reader would find them damaged.

The supervisor's main thread writes the state at each change; its heartbeat thread calls
``beat`` every second, which

- writes again a state that a full disk refused (``pending``), as soon as there is room;
- writes the state again if ``state.json`` went missing or was damaged while the run is
  unfinished, and the spec if ``spec.json`` was (the supervisor holds both in memory, and is
  the only writer of the state);
- tops the room reserved for a full disk back up (``store.reserve``) once there is space.

A full disk is noticed when a write fails for lack of space, or when the file system reports
no free block at all (``full_now``): the ranks may fill it while the supervisor writes
nothing. The supervisor then ends the run as failed with ``disk_full``'s error.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable

from ..core.errors import DiskFull, RecordDamaged
from ..core.records import StateRecord
from ..core.spec import RunSpec
from ..store import (
    ACTIVE,
    Store,
    json_text,
    load_spec,
    load_state,
    reserve,
    spec_record,
    write_json_atomic,
)

RESERVE_RETRY_S = 10.0  # how often a failed reservation is tried again
SETTLE_S = 10.0  # how long a state that could not be written is retried at the end


class StateWriter:
    def __init__(
        self, store: Store, run_id: str, spec: RunSpec, log: Callable[[str], None]
    ) -> None:
        self.store, self.run_id, self.spec, self.log = store, run_id, spec, log
        self.paths = store.paths(run_id)
        self.pending: StateRecord | None = None  # a state a full disk refused
        self.disk_full: str | None = None  # the run's error, once the disk filled
        self._lock = threading.RLock()
        self._last: StateRecord | None = None  # the last state written (or pending)
        self._written: tuple[int, int] | None = None  # (inode, size) of state.json as written
        self._spec_seen: tuple[int, int, int] | None = None
        self._reserved = 0.0  # when the reserve was last topped up

    # -- writes --------------------------------------------------------------------------
    def write(self, state: StateRecord) -> None:
        """Write ``state`` (a copy is kept); on a full disk keep it as ``pending``."""
        with self._lock:
            self._write(json.loads(json_text(state)))

    def _write(self, copy: StateRecord) -> None:
        self._last = copy
        try:
            full = self.store.write_state(self.run_id, copy, self.spec)
        except DiskFull as exc:
            self.pending = copy
            self._note_full(exc.path)
            return
        except OSError as exc:
            if not reserve.is_disk_full(exc):
                raise
            self.pending = copy
            self._note_full(exc.filename or str(self.paths.state))
            return
        self.pending = None
        if full:
            self._note_full(str(self.paths.state))
        self._written = _identity(self.paths.state)

    def _note_full(self, path: str) -> None:
        if self.disk_full is None:
            self.disk_full = reserve.disk_full_error(self.run_id, path)
            self.log(f"the disk is full ({path}); stopping the run")

    def full_now(self) -> str | None:
        """The disk-full error, if a write found the disk full or the file system holding
        the run has no free block now."""
        if self.disk_full is None and reserve.is_full(self.paths.root):
            self._note_full(str(self.paths.root))
        return self.disk_full

    def check(self) -> None:
        """Raise ``DiskFull`` if the disk is full (before starting anything more)."""
        message = self.full_now()
        if message is not None:
            raise DiskFull(message, path=str(self.paths.root))

    # -- the heartbeat's share -------------------------------------------------------------
    def reserve(self) -> None:
        """Reserve room for writes on a full disk (see ``store.reserve``); best effort."""
        self._reserved = time.monotonic()
        if not reserve.reserve(self.paths):
            self.log("no room to reserve for the run's state on a full disk yet")

    def beat(self) -> None:
        """Write a pending state, repair a damaged record, top the reserve up."""
        with self._lock:
            if self.pending is not None:
                self._write(self.pending)
                return
            if self._last is None or self._last.get("status") not in ACTIVE:
                return  # the record is final: others (the MLflow mirror) may add to it
            self._heal_state()
            self._heal_spec()
            if time.monotonic() - self._reserved > RESERVE_RETRY_S and not reserve.ready(
                self.paths
            ):
                self.reserve()

    def settle(self) -> bool:
        """At the end: retry a pending state for up to ``SETTLE_S``, release the reserve
        once the state is final (on a full disk, that is room again), then retry the index
        row of a state written on a full disk. False if the state could not be written."""
        deadline = time.monotonic() + SETTLE_S
        indexed = self.disk_full is None
        while True:
            with self._lock:
                if self.pending is not None:
                    self._write(self.pending)
                if self.pending is None:
                    reserve.release(self.paths)
                    indexed = indexed or self._reindex()
                if (self.pending is None and indexed) or time.monotonic() > deadline:
                    return self.pending is None
            time.sleep(0.5)

    def _reindex(self) -> bool:
        try:
            return self.store.reindex(self.run_id)
        except Exception:  # the index is a cache; doctor --fix rewrites its row
            return False

    def _heal_state(self) -> None:
        found = _identity(self.paths.state)
        if found is not None and found == self._written:
            return
        try:
            load_state(self.paths, self.run_id)
            self._written = found  # changed, but readable: not ours to undo
            return
        except RecordDamaged as exc:
            self.log(f"{exc}; writing it again")
        assert self._last is not None
        self._write(self._last)

    def _heal_spec(self) -> None:
        try:
            st = os.stat(self.paths.spec)
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except FileNotFoundError:
            seen = None
        if seen is not None and seen == self._spec_seen:
            return
        try:
            load_spec(self.paths, self.run_id)
        except RecordDamaged as exc:
            self.log(f"{exc}; writing it again")
            try:
                write_json_atomic(self.paths.spec, spec_record(self.spec))
                os.chmod(self.paths.spec, 0o444)
            except OSError as again:
                self.log(f"cannot write the spec again: {again}")
                return
            st = os.stat(self.paths.spec)
            seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        self._spec_seen = seen


def _identity(path: os.PathLike[str]) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size
