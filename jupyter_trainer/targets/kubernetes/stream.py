"""Splitting a pod's log stream: marked lines (pod.py's ``MARK`` + JSON) carry the bytes
the ranks wrote into the pod's run folder; every other line is the launcher's own output.

Every instance of a container that restarts in place is read, in order: its live stream,
and the instance before the one first seen (the only earlier one the kubelet keeps).

Both go into the local run folder through the node layer's ``LocalFiles``, as the frames of
an ssh node do: bytes at their offset (a log stream read again from its start after a
reconnect changes nothing), rank records and a live session's readiness, results and end
replaced whole (a file over one line's worth put together from its parts), launcher lines into
``launcher.log`` with the pod's name in front.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from collections.abc import Iterator
from typing import Any, Protocol

from ...nodes.mirror import LocalFiles
from ...rankside.programs.kube_pod import FOLLOWED, MARK, SESSION_BACK

_MARK = MARK.encode()


def split_marked(line: bytes) -> tuple[dict[str, Any], bytes] | None:
    """A marked line as a ``LocalFiles`` frame (header, payload); None for any other line,
    a damaged mark, or a path outside the run folder's followed files. A part of a file
    sent whole in parts is a ``part`` frame (``o`` where it starts, ``n`` the whole size)."""
    if not line.startswith(_MARK):
        return None
    try:
        record = json.loads(line[len(_MARK) :])
        rel = _safe(record["f"])
        if "w" in record:
            return {"p": rel, "t": "put"}, base64.b64decode(record["w"], validate=True)
        if "p" in record:
            at, size = record["o"], record["n"]
            if type(at) is not int or type(size) is not int or not 0 <= at < size:
                return None
            part = base64.b64decode(record["p"], validate=True)
            return {"p": rel, "t": "part", "o": at, "n": size}, part
        at = record["at"]
        if type(at) is not int or at < 0:
            return None
        return {"p": rel, "t": "file", "o": at}, base64.b64decode(record["a"], validate=True)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None


def _safe(rel: Any) -> str:
    if not isinstance(rel, str):
        raise ValueError(rel)
    if SESSION_BACK.fullmatch(rel):
        return rel
    top, sep, name = rel.partition("/")
    if top not in FOLLOWED or not sep or not name or "/" in name or name in (".", ".."):
        raise ValueError(rel)
    return rel


class PodLog:
    """One pod's log stream, fed line by line into the local run folder."""

    def __init__(self, files: LocalFiles, node: int, label: str) -> None:
        self.files = files
        self.node = node
        self.label = label
        self.base = 0  # bytes of launcher output of the container's instances before this one
        self.offset = 0  # ... and of this one too, as far as this pass over its stream went
        self.parts: dict[str, tuple[int, bytearray]] = {}  # files sent whole, in parts

    def _join(self, header: dict[str, Any], part: bytes) -> tuple[dict[str, Any], bytes] | None:
        """The parts of a file sent whole, put together: the whole file once its last part
        came (parts come in order; a part out of place starts the file again)."""
        rel, at, size = header["p"], header["o"], header["n"]
        have = self.parts.get(rel)
        if at == 0 or have is None or have[0] != size or len(have[1]) != at:
            have = (size, bytearray())
            if at != 0:
                self.parts.pop(rel, None)
                return None
        have[1].extend(part)
        self.parts[rel] = have
        if len(have[1]) < size:
            return None
        del self.parts[rel]
        return {"p": rel, "t": "put"}, bytes(have[1][:size])

    def restart(self) -> None:
        """The stream of the same container instance is read again from its start."""
        self.offset = self.base

    def next_instance(self) -> None:
        """The instance read so far has ended: what follows is the next one's output."""
        self.base = self.offset

    def feed(self, line: bytes) -> None:
        frame = split_marked(line)
        if frame is not None and frame[0]["t"] == "part":
            frame = self._join(*frame)
            if frame is None:
                return
        if frame is not None:
            self.files.apply(self.node, self.label, *frame)
            return
        header = {"p": f"logs/launcher-{self.node}.log", "t": "file", "o": self.offset}
        self.files.apply(self.node, self.label, header, line)
        self.offset += len(line)


class PodLogs(Protocol):
    def log_lines(self, pod: str, previous: bool = False) -> Iterator[bytes]: ...

    def pod_instance(self, pod: str) -> tuple[str, int, bool] | None: ...


ENDED = ("Succeeded", "Failed")


def follow(source: PodLogs, pod: str, log: PodLog, tries: int, pause: float = 1.0) -> None:
    """Feed the pod's log into ``log``, instance after instance, until the pod ends or goes.

    ``source.pod_instance`` says the pod's phase, its container's restart count (the number
    of the instance that runs or ran last) and whether that instance has started (not while
    it waits to be restarted). A stream that ends while the same instance is current was cut
    short, or its container waits to restart: it is read again from its start, which changes
    nothing already written (rank files go at their offsets). Once the count moves on, the
    output read so far is kept and the next instance's follows it. An instance the follower
    missed whole is read through ``previous`` (the kubelet keeps the one before the current).
    ``tries`` bounds the failed reads.
    """
    failures = 0
    seen: int | None = None  # the instance whose output the log ends with
    while failures < tries:
        try:
            now = source.pod_instance(pod)
        except Exception:  # the API server went away for a moment
            now, failures = ("Running", seen or 0, False), failures + 1
        if now is None:
            return
        phase, count, started = now
        if not started:
            if phase in ENDED:
                return
            time.sleep(pause)
            continue
        if seen is not None and count > seen:
            log.next_instance()
        if count > (0 if seen is None else seen + 1):  # the instance before ran unread
            log.restart()
            _read(source, pod, log, previous=True)
            log.next_instance()
        seen = count
        log.restart()
        if not _read(source, pod, log, previous=False):
            failures += 1
            time.sleep(pause)
            continue
        try:
            after = source.pod_instance(pod)
        except Exception:
            continue
        if after is None or (after[0] in ENDED and after[1] == count):
            return
        if after[1] == count:
            time.sleep(pause)


def _read(source: PodLogs, pod: str, log: PodLog, previous: bool) -> bool:
    try:
        for line in source.log_lines(pod, previous=previous):
            log.feed(line)
    except Exception:  # the API server or the connection went away for a moment
        return False
    return True
