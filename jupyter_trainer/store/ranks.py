"""What the ranks of a run wrote: their records (``ranks/``), events and logs.

``Store`` reads these through ``RankReader``'s methods; a reader that follows a file as it
grows takes only complete lines (``read_complete_lines``), never half of one being appended;
a log is read by ``read_log_lines``, for which a progress bar's ``\\r`` ends a line too and a
line longer than one read comes in pieces, so that no output stops a reader.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..core import bounded_json
from ..core.errors import StoreError
from ..core.files import write_text_atomic
from .records import RunPaths, read_json

TAGS_FILE = "tags.json"  # tags set from the notebook, beside the run's state
_RANK_FILE = re.compile(r"rank-(\d+)\.(?:jsonl|log|json)")


class RankReader:
    """The rank reads of ``Store``, which supplies ``existing``."""

    def existing(self, run_id: str) -> RunPaths:
        raise NotImplementedError

    def ranks(self, run_id: str) -> list[int]:
        """Every rank that has left a trace (events, log or rank record), sorted."""
        paths = self.existing(run_id)
        found: set[int] = set()
        for folder in (paths.events, paths.logs, paths.ranks):
            if folder.is_dir():
                found.update(
                    int(m.group(1))
                    for e in os.scandir(folder)
                    if (m := _RANK_FILE.fullmatch(e.name))
                )
        return sorted(found)

    def rank_records(self, run_id: str) -> dict[int, dict[str, Any]]:
        paths = self.existing(run_id)
        records = {}
        for rank in self.ranks(run_id):
            try:
                records[rank] = read_json(paths.rank_file(rank))
            except (FileNotFoundError, ValueError):  # not JSON, or nested too deep
                pass
        return records

    def read_events(
        self, run_id: str, rank: int, offset: int = 0, max_bytes: int = 64 << 20
    ) -> tuple[list[dict[str, Any]], int]:
        """Complete event lines of ``rank`` from byte ``offset``; returns (events, next offset)."""
        data, offset = read_complete_lines(
            self.existing(run_id).events_file(rank), offset, max_bytes
        )
        events = []
        for line in data.splitlines():
            try:
                events.append(bounded_json.loads(line))
            except ValueError:  # not JSON, or nested deeper than any event
                continue
        return events, offset

    def read_log(
        self,
        run_id: str,
        rank: int,
        offset: int = 0,
        max_bytes: int | None = 16 << 20,
        *,
        ended: bool = False,
    ) -> tuple[str, int]:
        """Text of ``rank``'s log from byte ``offset`` up to the last complete line (see
        ``read_log_lines``); of a rank that has ``ended``, a last line without its end too."""
        path = self.existing(run_id).log_file(rank)
        data, after = read_log_lines(path, offset, max_bytes)
        if ended and not data:
            data = _read_from(path, offset, max_bytes)
            after = offset + len(data)
        return data.decode(errors="replace"), after

    def log_tail_offset(self, run_id: str, rank: int, lines: int, chunk: int = 1 << 16) -> int:
        """Where the last ``lines`` lines of ``rank``'s log begin, read from its end a
        ``chunk`` at a time (a log of many GB gives its tail at once)."""
        path = self.existing(run_id).log_file(rank)
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            return 0
        with fh:
            end = position = fh.seek(0, os.SEEK_END)
            if not lines:
                return end
            found = 0
            while position > 0:
                start = max(0, position - chunk)
                fh.seek(start)
                block = fh.read(position - start)
                index = len(block)
                while (index := block.rfind(b"\n", 0, index)) >= 0:
                    if start + index + 1 < end:  # each newline but the last byte's begins a line
                        found += 1
                        if found == lines:
                            return start + index + 1
                position = start
            return 0

    def latest_progress(self, run_id: str, tail_bytes: int = 16384) -> dict[str, Any] | None:
        """The least advanced rank's last progress report, read from the end of each events
        file only (cheap enough to show for every row of a runs list)."""
        paths = self.existing(run_id)
        worst = None
        for rank in self.ranks(run_id):
            try:
                with open(paths.events_file(rank), "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    fh.seek(max(0, fh.tell() - tail_bytes))
                    lines = fh.read().splitlines()
            except FileNotFoundError:
                continue
            for line in reversed(lines):
                if b'"progress"' not in line:
                    continue
                try:
                    event = bounded_json.loads(line)
                except ValueError:
                    continue
                done, total = event.get("done", 0), event.get("total")
                fraction = done / total if total else None
                if worst is None or (
                    fraction is not None
                    and (worst["fraction"] is None or fraction < worst["fraction"])
                ):
                    worst = {"done": done, "total": total, "fraction": fraction, "t": event["t"]}
                break
        return worst

    def run_tags(self, run_id: str) -> dict[str, str]:
        """The tags the run's ranks set with ``jt.tag``, the latest value of each key (by
        time, over every rank). Only the tag lines of the events files are parsed."""
        found: list[tuple[float, dict[str, str]]] = []
        paths = self.existing(run_id)
        for rank in self.ranks(run_id):
            try:
                with open(paths.events_file(rank), "rb") as fh:
                    for line in fh:
                        if b'"kind": "tag"' not in line:
                            continue
                        try:
                            event = bounded_json.loads(line)
                        except ValueError:
                            continue
                        values = event.get("values")
                        if isinstance(values, dict):
                            found.append((float(event.get("t", 0.0)), values))
            except FileNotFoundError:
                continue
        tags: dict[str, str] = {}
        for _, values in sorted(found, key=lambda item: item[0]):
            tags.update((str(k), str(v)) for k, v in values.items())
        tags.update(self.kept_tags(run_id))
        return tags

    def kept_tags(self, run_id: str) -> dict[str, str]:
        """The tags set on the run from outside it (``set_run_tags``)."""
        return _kept_tags(self.existing(run_id).root / TAGS_FILE)

    def set_run_tags(self, run_id: str, tags: dict[str, str]) -> None:
        """Tags set on the run from outside it (the notebook), kept in ``tags.json``; they
        win over the code's own for the same key."""
        path = self.existing(run_id).root / TAGS_FILE
        merged = _kept_tags(path)
        merged.update((str(k), str(v)) for k, v in tags.items())
        write_text_atomic(path, json.dumps(merged, indent=1, sort_keys=True))

    def iter_events(self, run_id: str, rank: int) -> Iterator[dict[str, Any]]:
        offset = 0
        while True:
            events, new = self.read_events(run_id, rank, offset)
            yield from events
            if new == offset:
                return
            offset = new


def _kept_tags(path: Path) -> dict[str, str]:
    try:
        kept = read_json(path)
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise StoreError(
            f"{path} is damaged ({exc}); remove it to drop the tags set there"
        ) from None
    return {str(k): str(v) for k, v in kept.items()} if isinstance(kept, dict) else {}


def read_complete_lines(path: Path, offset: int, max_bytes: int | None) -> tuple[bytes, int]:
    """Bytes of ``path`` from ``offset`` up to its last newline (at most ``max_bytes``;
    None: all), so a reader never sees half of a line a writer is appending."""
    data = _read_from(path, offset, max_bytes)
    end = data.rfind(b"\n") + 1
    return data[:end], offset + end


def read_log_lines(path: Path, offset: int, max_bytes: int | None) -> tuple[bytes, int]:
    """Bytes of a log from ``offset`` up to its last line end, which is a newline or a
    carriage return (tqdm redraws its bar with ``\\r`` alone, and may never write a newline).
    A line longer than ``max_bytes`` comes in pieces of about ``max_bytes``, cut between
    characters: a reader that waited for its end could wait for ever, and hold it all."""
    data = _read_from(path, offset, max_bytes)
    # a \r read last may be half of a \r\n: it ends a line once what follows it is read
    end = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1)) + 1
    if not end and max_bytes is not None and len(data) == max_bytes:
        end = _last_whole_character(data)
    return data[:end], offset + end


def _read_from(path: Path, offset: int, max_bytes: int | None) -> bytes:
    """At most ``max_bytes`` (None: all) of ``path`` from ``offset``; none of a missing file."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(-1 if max_bytes is None else max_bytes)
    except FileNotFoundError:
        return b""


def _last_whole_character(data: bytes) -> int:
    """Where ``data`` (UTF-8, or not) ends without cutting a character in two."""
    start = len(data) - 1
    while start > len(data) - 4 and start > 0 and data[start] & 0xC0 == 0x80:
        start -= 1  # continuation bytes: back to the character's first byte
    lead = data[start]
    needs = 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return start if start and start + needs > len(data) else len(data)


def line_end_after(path: Path, offset: int, chunk: int = 1 << 20) -> int:
    """The offset just past the first newline at or after ``offset``, read ``chunk`` bytes at
    a time; ``offset`` itself while that line has no end yet."""
    at = offset
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            while data := fh.read(chunk):
                found = data.find(b"\n")
                if found >= 0:
                    return at + found + 1
                at += len(data)
    except FileNotFoundError:
        pass
    return offset
