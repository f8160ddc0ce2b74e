"""The supervisor's writes of its run's record: one at a time, and written again when a
reader would find them damaged.

The supervisor's main thread writes the state at each change; its heartbeat thread calls
``beat`` every second, which writes the state again if ``state.json`` went missing or was
damaged while the run is unfinished, and the spec if ``spec.json`` was (the supervisor holds
both in memory, and is the only writer of the state).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any, Callable

from .errors import RecordDamaged
from .spec import RunSpec
from .store import ACTIVE, Store, load_spec, load_state, write_json_atomic
from .store.records import json_text


class StateWriter:
    def __init__(self, store: Store, run_id: str, spec: RunSpec,
                 log: Callable[[str], None]) -> None:
        self.store, self.run_id, self.spec, self.log = store, run_id, spec, log
        self.paths = store.paths(run_id)
        self._lock = threading.RLock()
        self._last: dict[str, Any] | None = None    # the last state written
        self._written: tuple[int, int] | None = None  # (inode, size) of state.json as written
        self._spec_seen: tuple[int, int, int] | None = None

    # -- writes --------------------------------------------------------------------------
    def write(self, state: dict[str, Any]) -> None:
        """Write ``state`` (a copy is kept, to write again if it is damaged)."""
        with self._lock:
            self._write(json.loads(json_text(state)))

    def _write(self, copy: dict[str, Any]) -> None:
        self._last = copy
        self.store.write_state(self.run_id, copy, self.spec)
        self._written = _identity(self.paths.state)

    # -- the heartbeat's share -------------------------------------------------------------
    def beat(self) -> None:
        """Write a damaged state or spec again."""
        with self._lock:
            if self._last is None or self._last.get("status") not in ACTIVE:
                return  # the record is final: others (the MLflow mirror) may add to it
            self._heal_state()
            self._heal_spec()

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
                write_json_atomic(self.paths.spec, self.spec.to_dict())
                os.chmod(self.paths.spec, 0o444)
            except OSError as again:
                self.log(f"cannot write the spec again: {again}")
                return
            st = os.stat(self.paths.spec)
            seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        self._spec_seen = seen


def _identity(path: os.PathLike) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size
