"""A rank's ``py-spy dump`` as a person reads it: their frames, not the package's.

Under every rank's code lie the frames that started it: ``boot.py``, ``runpy`` and the cell's
runner, and under a warm pool the pool's own (``jupyter_trainer/rankside/hotstart/...``),
about fifteen in all. ``tidy`` replaces that run of frames at the bottom of each thread with
one line that counts them, and leaves out the package's own threads (``jt-events``), so the
user's frames are what the stack shows. Frames the user's code calls into (``jt.log``, a
framework) stay. ``user_frame`` names where the rank is in the user's own code: its main
thread's innermost frame in a notebook cell (``Cell In [7]``, as ``rankside/rank/cell_run.py``
compiles the cell) or in a file of the run's snapshot.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..capture.snapshot import RESERVED_DIR

_THREAD = re.compile(r'^Thread (\d+)(?:.*"(.*)")?')
_FRAME = re.compile(r"^\s+(\S+) \((.*):(\d+)\)\s*$")
_OURS = re.compile(
    r"(^|/)(jupyter_trainer|_jt_node_pool|_jt_agent)/|^<frozen runpy>$|(^|/)runpy\.py$"
    r"|^_jt_session\.py$"  # a live session's entry (api/sessions.py)
)
_OWN_THREAD = "jt-"  # the package's threads are named so (the runtime's jt-events)
_CELL = re.compile(r"^(Cell In \[\d+\]|the cell)$")
_SNAPSHOT_FILES = 2000  # of a snapshot's .py files looked at to tell the user's frames


def tidy(stack: str) -> str:
    """``stack`` (py-spy's text) with the package's frames under the user's code, and the
    package's own threads, each replaced by a line that says how many were left out."""
    if not isinstance(stack, str) or "\nThread " not in "\n" + stack:
        return stack
    out: list[str] = []
    thread: list[str] = []
    hidden_threads: list[str] = []

    def close() -> None:
        if not thread:
            return
        head = _THREAD.match(thread[0])
        name = head.group(2) if head else None
        if name and name.startswith(_OWN_THREAD):
            hidden_threads.append(name)
        else:
            out.extend(_tidy_thread(thread))
        thread.clear()

    for line in stack.splitlines():
        if _THREAD.match(line):
            close()
            thread.append(line)
        elif thread:
            thread.append(line)
        else:
            out.append(line)
    close()
    if hidden_threads:
        count = len(hidden_threads)
        out.append(
            f"({count} thread{'s' if count > 1 else ''} of jupyter_trainer hidden: "
            + ", ".join(hidden_threads)
            + ")"
        )
    return "\n".join(out) + ("\n" if stack.endswith("\n") else "")


def _tidy_thread(lines: list[str]) -> list[str]:
    """One thread's lines with the package's frames at its bottom counted, not listed."""
    frames = [i for i, line in enumerate(lines) if _FRAME.match(line)]
    hidden, past_boot = 0, False
    for i in reversed(frames):  # from the outermost frame in
        function, file, _ = _FRAME.match(lines[i]).groups()  # type: ignore[union-attr]
        boot = file == "boot.py" and function in ("main", "<module>") and not past_boot
        if not (boot or _OURS.search(file)):
            break
        past_boot = past_boot or (file == "boot.py" and function == "main")
        hidden += 1
    if hidden == 0 or hidden == len(frames):
        return lines
    keep = frames[len(frames) - hidden]
    indent = lines[keep][: len(lines[keep]) - len(lines[keep].lstrip())]
    plural = "s" if hidden > 1 else ""
    return [*lines[:keep], f"{indent}({hidden} frame{plural} of jupyter_trainer hidden)"] + [
        line for line in lines[keep:] if not _FRAME.match(line)
    ]


def user_frame(stack: Any, pid: Any, files: Sequence[str] = ()) -> dict[str, Any] | None:
    """The innermost frame of the main thread (``pid``'s) that is the user's code: a
    notebook cell's, or one of the run's snapshot ``files`` (``snapshot_files``); as
    ``{"function", "file", "line"}``, or None when none is."""
    if not isinstance(stack, str):
        return None
    for function, file, line in main_thread_frames(stack, pid):
        if _CELL.match(file) or any(file == f or f.endswith("/" + file) for f in files):
            return {"function": function, "file": file, "line": line}
    return None


def main_thread_frames(stack: str, pid: Any) -> list[tuple[str, str, int]]:
    """(function, file, line) of the thread ``pid`` (the main thread), innermost first."""
    frames: list[tuple[str, str, int]] = []
    inside = False
    for line in stack.splitlines():
        thread = _THREAD.match(line)
        if thread:
            if inside:
                break
            inside = thread.group(1) == str(pid)
            continue
        frame = _FRAME.match(line) if inside else None
        if frame:
            frames.append((frame.group(1), frame.group(2), int(frame.group(3))))
    return frames


def where_words(frame: dict[str, Any]) -> str:
    """``helper (Cell In [4], line 3)``, ``step (train.py:12)``."""
    file, line = frame.get("file"), frame.get("line")
    place = f"{file}, line {line}" if _CELL.match(str(file)) else f"{file}:{line}"
    return f"{frame.get('function')} ({place})"


def snapshot_files(code: Path) -> list[str]:
    """The Python files of a run's snapshot folder ``code``, as paths relative to it, its
    own ``_jt/`` left out."""
    found = []
    try:
        for path in Path(code).rglob("*.py"):
            rel = path.relative_to(code).as_posix()
            if not rel.startswith(RESERVED_DIR + "/"):
                found.append(rel)
            if len(found) >= _SNAPSHOT_FILES:
                break
    except OSError:
        pass
    return found
