"""A run's metrics as TensorBoard event files in ``LOGDIR/<run-id>/``, written incrementally.

Each rank's metrics go to one event file in ``LOGDIR/<run-id>/rank-<r>/`` (TensorBoard shows
it as the run ``<run-id>/rank-<r>``). A value is a scalar summary (``simple_value``), which
every TensorBoard reader charts, its fast Rust loader included: a 32-bit float, as
``tf.summary.scalar`` and torch's ``SummaryWriter`` write them, so a value reads back as the
nearest float32 (NaN and ±inf as such). Its step is the event's ``step`` (where none was
given, one more than the metric's previous step on that rank, so from 0 the value's index, as
the run view charts it) and its wall time the event's ``t``. TensorBoard drops a metric's
points at and after a step that a later point goes back to (its handling of a restart). The run's params go to ``LOGDIR/<run-id>/`` as the hparams plugin's session
start, and its end (status and time) once the run has ended.

What has been exported is kept in ``LOGDIR/<run-id>/.jt-export.json``: each rank's byte
offset in its events file and the length of each event file written. An export holds an
``flock`` on the run's folder, starts where the state says, and cuts back an event file longer
than the state says (an export killed while writing), so exporting again writes only what is
new and two exporters never write a value twice. Without a state (or with event files shorter
than it says) the run is exported again from the start.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ...core.errors import MissingExtra, SpecError
from ...store import Store, write_json_atomic
from ...store.follow import RunFollower, Series

EXTRA = "pip install jupyter_trainer[tensorboard]"
STATE = ".jt-export.json"
LOCK = ".jt-export.lock"
FILE = re.compile(r"events\.out\.tfevents\.\d+\.jupyter-trainer")
STATUS = {
    "completed": "STATUS_SUCCESS",
    "failed": "STATUS_FAILURE",
    "lost": "STATUS_FAILURE",
    "canceled": "STATUS_FAILURE",
}
_INT64 = 2.0**63


def tensorboard_modules() -> SimpleNamespace:
    """TensorBoard's protos and writers (no TensorFlow needed); ``MissingExtra`` without it."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
        from tensorboard.plugins.hparams import metadata as hparams_metadata
        from tensorboard.summary.writer.record_writer import RecordWriter
    except ImportError as exc:
        raise MissingExtra(
            f"TensorBoard is not installed here (no module {exc.name!r}): {EXTRA}"
        ) from None
    return SimpleNamespace(
        Event=event_pb2.Event,
        Summary=summary_pb2.Summary,
        Status=api_pb2.Status,
        PluginData=plugin_data_pb2,
        hparams=hparams_metadata,
        RecordWriter=RecordWriter,
    )


class RunExport:
    """Exports one run into ``logdir/<run-id>``; each ``step()`` writes what is new."""

    def __init__(self, store: Store, run_id: str, logdir: str | os.PathLike) -> None:
        self.tb = tensorboard_modules()
        self.store = store
        self.run_id = run_id
        self.params = store.read_spec(run_id).params  # also: the run exists
        self.folder = Path(logdir).expanduser() / run_id
        self.follower = RunFollower(store, run_id)
        self.finished = False

    def step(self, max_bytes: int = 16 << 20) -> int:
        """Append the values logged since the last export; returns how many were written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        written = 0
        with _locked(self.folder / LOCK):
            state = self._load()
            saved = json.dumps(state, sort_keys=True)
            while True:
                self._read_from(state)
                self.follower.poll(max_bytes)
                written += self._write_metrics(state)
                self._write_session(state)
                if json.dumps(state, sort_keys=True) != saved:
                    write_json_atomic(self.folder / STATE, state)
                    saved = json.dumps(state, sort_keys=True)
                if not self.follower.behind:
                    break
        self.finished = self.follower.finished
        return written

    def _read_from(self, state: dict[str, Any]) -> None:
        """Point the follower at the offsets ``state`` has written up to, holding no values
        (what an earlier step read but did not write, it reads again)."""
        self.follower.offsets = {
            int(key[5:]): stream.get("offset", 0)
            for key, stream in state["streams"].items()
            if key.startswith("rank-")
        }
        for kind in (self.follower.series, self.follower.system):
            for ranks in kind.values():
                for series in ranks.values():
                    for column in (series.steps, series.values, series.times):
                        del column[:]  # in place: the follower keeps appending to these

    # -- state -----------------------------------------------------------------------------
    def _load(self) -> dict[str, Any]:
        """The export's state, each event file cut back to the length it records (what an
        export killed while writing left after it); a fresh state, with any earlier event
        files removed, where it is missing or a file is shorter (deleted or replaced)."""
        try:
            state = json.loads((self.folder / STATE).read_text())
            files = [
                (self._path(key, stream), stream["size"])
                for key, stream in state["streams"].items()
                if "file" in stream
            ]
            if all(_size(path) >= size for path, size in files):
                for path, size in files:
                    if _size(path) > size:
                        os.truncate(path, size)
                return state
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            pass
        for path in self.folder.rglob("events.out.tfevents.*"):
            if FILE.fullmatch(path.name):
                path.unlink()
        return {"version": 1, "run": self.run_id, "streams": {}}

    def _path(self, key: str, stream: dict[str, Any]) -> Path:
        return (self.folder if key == "run" else self.folder / key) / stream["file"]

    @contextlib.contextmanager
    def _append(self, key: str, stream: dict[str, Any]) -> Iterator[Any]:
        """Append serialized events to the stream's file; its new length goes in ``stream``."""
        if "file" not in stream:
            stream.update(file=f"events.out.tfevents.{int(time.time())}.jupyter-trainer", size=0)
        path = self._path(key, stream)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        with os.fdopen(fd, "ab") as fh:
            records = self.tb.RecordWriter(fh)
            if stream["size"] == 0:
                records.write(
                    self.tb.Event(
                        wall_time=time.time(), file_version="brain.Event:2"
                    ).SerializeToString()
                )
            yield records
            fh.flush()
            stream["size"] = os.fstat(fd).st_size

    # -- metrics ---------------------------------------------------------------------------
    def _write_metrics(self, state: dict[str, Any]) -> int:
        written = 0
        by_rank: dict[int, list[tuple[str, Series]]] = {}
        named = [*self.follower.series.items()]
        # the hardware figures, as TensorBoard users know them from other loggers: system/...
        named += [(f"system/{name}", ranks) for name, ranks in self.follower.system.items()]
        for name, ranks in named:
            for rank, series in ranks.items():
                if len(series):
                    by_rank.setdefault(rank, []).append((name, series))
        for rank in sorted(set(by_rank) | set(self.follower.offsets)):
            key = f"rank-{rank}"
            stream = state["streams"].setdefault(key, {"size": 0, "last": {}})
            if rank in by_rank:
                with self._append(key, stream) as records:
                    for name, series in by_rank[rank]:
                        written += self._write_series(records, stream["last"], name, series)
            stream["offset"] = self.follower.offsets.get(rank, 0)
        return written

    def _write_series(self, records: Any, last: dict[str, int], name: str, series: Series) -> int:
        tb = self.tb
        step = last.get(name, -1)
        for logged, value, t in zip(series.steps, series.values, series.times):
            step = int(logged) if math.isfinite(logged) and -_INT64 <= logged < _INT64 else step + 1
            summary = tb.Summary(value=[tb.Summary.Value(tag=name, simple_value=value)])
            records.write(tb.Event(wall_time=t, step=step, summary=summary).SerializeToString())
        last[name] = step
        return len(series)

    # -- hparams ---------------------------------------------------------------------------
    def _write_session(self, state: dict[str, Any]) -> None:
        """The hparams session of the run: its start with the params, then its end."""
        if not self.params:
            return
        stream = state["streams"].setdefault("run", {"size": 0})
        run_state = self.follower.state
        pieces = []
        if not stream.get("start"):
            start = self.tb.PluginData.SessionStartInfo(
                start_time_secs=run_state.get("created") or time.time()
            )
            for name, value in sorted(self.params.items()):
                _set_hparam(start.hparams[name], value)
            pieces.append(
                (
                    "_hparams_/session_start_info",
                    start.start_time_secs,
                    self.tb.PluginData.HParamsPluginData(session_start_info=start),
                )
            )
        status = run_state.get("status")
        if self.follower.finished and not stream.get("end"):
            ended = run_state.get("ended") or time.time()
            end = self.tb.PluginData.SessionEndInfo(
                status=self.tb.Status.Value(STATUS.get(status or "", "STATUS_UNKNOWN")),
                end_time_secs=ended,
            )
            pieces.append(
                (
                    "_hparams_/session_end_info",
                    ended,
                    self.tb.PluginData.HParamsPluginData(session_end_info=end),
                )
            )
        if not pieces:
            return
        with self._append("run", stream) as records:
            for tag, t, data in pieces:
                value = self.tb.Summary.Value(
                    tag=tag,
                    tensor=self.tb.hparams.NULL_TENSOR,
                    metadata=self.tb.hparams.create_summary_metadata(data),
                )
                records.write(
                    self.tb.Event(
                        wall_time=t, step=0, summary=self.tb.Summary(value=[value])
                    ).SerializeToString()
                )
        stream["start"] = True
        if self.follower.finished:
            stream["end"] = status


def _set_hparam(slot: Any, value: Any) -> None:
    """A param as an hparams value: bools, numbers and strings as such, others as JSON text."""
    if isinstance(value, bool):
        slot.bool_value = value
    elif isinstance(value, (int, float)):
        slot.number_value = float(value)
    elif isinstance(value, str):
        slot.string_value = value
    else:
        slot.string_value = json.dumps(value, sort_keys=True, default=str)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return -1


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def writable_logdir(text: str) -> Path:
    """``--logdir``'s folder, created if missing and checked writable (a file made and
    removed there); SpecError naming what is wrong and the fix."""
    if not text.strip():
        raise SpecError("tensorboard --logdir is empty: name a folder to write the event files to")
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise SpecError(
            f"tensorboard --logdir {path}: not a folder; name a folder (it is created if missing)"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError as exc:
        raise SpecError(
            f"tensorboard --logdir {path}: cannot write there "
            f"({exc.strerror or exc}); name a folder you can write to"
        ) from None
    return path


class Exporter:
    """Exports several runs into one logdir, once or for as long as they go on."""

    def __init__(
        self, run_ids: list[str], logdir: str | os.PathLike, store: Store | None = None
    ) -> None:
        self.store = store or Store()
        self.logdir = Path(logdir).expanduser()
        self.runs: dict[str, RunExport] = {}
        self.add(run_ids)

    def add(self, run_ids: list[str]) -> None:
        """Export these runs too (each raises if it does not exist, before any is added)."""
        new = {
            r: RunExport(self.store, r, self.logdir)
            for r in dict.fromkeys(run_ids)
            if r not in self.runs
        }
        self.runs.update(new)

    def export(self) -> dict[str, int]:
        """One export of every run not yet finished: values written, by run id."""
        return {run_id: run.step() for run_id, run in list(self.runs.items()) if not run.finished}

    @property
    def finished(self) -> bool:
        return all(run.finished for run in self.runs.values())
