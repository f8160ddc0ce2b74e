"""Splitting a pod's log stream: marked lines (pod.py's ``MARK`` + JSON) carry the bytes
the ranks wrote into the pod's run folder; every other line is the launcher's own output.

``apply`` writes a marked line's bytes at their offset, so a line seen twice (a log stream
followed again after a reconnect) changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from pathlib import Path
from typing import Any

from .pod import FOLLOWED, MARK

_MARK = MARK.encode()


def split_marked(line: bytes) -> dict[str, Any] | None:
    """The record a marked line carries, or None for any other line (or a damaged mark)."""
    if not line.startswith(_MARK):
        return None
    try:
        record = json.loads(line[len(_MARK):])
        rel = record["f"]
        if "w" in record:
            data = base64.b64decode(record["w"], validate=True)
            return {"path": _safe(rel), "whole": True, "data": data}
        at = record["at"]
        if type(at) is not int or at < 0:
            return None
        return {"path": _safe(rel), "whole": False, "at": at,
                "data": base64.b64decode(record["a"], validate=True)}
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None


def _safe(rel: Any) -> str:
    """A followed file's path inside the run folder; anything else is refused."""
    if not isinstance(rel, str):
        raise ValueError(rel)
    top, sep, name = rel.partition("/")
    if top not in FOLLOWED or not sep or not name or "/" in name or name in (".", ".."):
        raise ValueError(rel)
    return rel


def apply(run_dir: str | Path, record: dict[str, Any]) -> None:
    """Write ``record``'s bytes into the local run folder."""
    path = Path(run_dir) / record["path"]
    path.parent.mkdir(parents=True, exist_ok=True)
    if record["whole"]:
        tmp = path.with_name(path.name + ".stream.tmp")
        tmp.write_bytes(record["data"])
        os.replace(tmp, path)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, record["data"], record["at"])
    finally:
        os.close(fd)
