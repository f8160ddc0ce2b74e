"""Splitting a pod's log stream: marked lines (pod.py's ``MARK`` + JSON) carry the bytes
the ranks wrote into the pod's run folder; every other line is the launcher's own output.

Both go into the local run folder through the node layer's ``LocalFiles``, as the frames of
an ssh node do: bytes at their offset (a log stream read again from its start after a
reconnect changes nothing), rank records replaced whole, launcher lines into
``launcher.log`` with the pod's name in front.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from ...nodes.mirror import LocalFiles
from ...rankside.kube_pod import FOLLOWED, MARK

_MARK = MARK.encode()


def split_marked(line: bytes) -> tuple[dict[str, Any], bytes] | None:
    """A marked line as a ``LocalFiles`` frame (header, payload); None for any other line,
    a damaged mark, or a path outside the run folder's followed files."""
    if not line.startswith(_MARK):
        return None
    try:
        record = json.loads(line[len(_MARK) :])
        rel = _safe(record["f"])
        if "w" in record:
            return {"p": rel, "t": "put"}, base64.b64decode(record["w"], validate=True)
        at = record["at"]
        if type(at) is not int or at < 0:
            return None
        return {"p": rel, "t": "file", "o": at}, base64.b64decode(record["a"], validate=True)
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None


def _safe(rel: Any) -> str:
    if not isinstance(rel, str):
        raise ValueError(rel)
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
        self.offset = 0  # bytes of launcher output seen in this pass over the stream

    def restart(self) -> None:
        """The stream is read again from its start."""
        self.offset = 0

    def feed(self, line: bytes) -> None:
        frame = split_marked(line)
        if frame is not None:
            self.files.apply(self.node, self.label, *frame)
            return
        header = {"p": f"logs/launcher-{self.node}.log", "t": "file", "o": self.offset}
        self.files.apply(self.node, self.label, header, line)
        self.offset += len(line)
