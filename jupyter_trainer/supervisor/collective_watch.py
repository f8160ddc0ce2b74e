"""The supervisor's side of the ranks' Flight Recorder dumps.

When the stall watch finds stalled ranks, ``CollectiveWatch.poll`` asks every rank for a dump
(``collectives/request``, which ``rankside/observe/flight_recorder.py`` watches for, and passes
on through the rendezvous store to the ranks of every node); so does ``jupyter-trainer hang``
(``ask``). Once the dumps of that request are in (or ``DUMPS_WITHIN_S`` later: a rank whose
process is gone dumps nothing), the ranks the analysis names (behind, or mismatched) get their
py-spy stacks read and saved beside the dumps (``stacks.json``), each with where it is in the
user's code, for ``Run.collectives()`` to show.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import collectives
from .stack_text import user_frame

DUMPS_WITHIN_S = 5.0  # how long the dumps of a request are waited for before the analysis


def ask(run_dir: Path, why: str) -> str:
    """Ask every rank of the run in ``run_dir`` for a dump now; the request's id."""
    folder = Path(run_dir) / collectives.DUMPS
    folder.mkdir(exist_ok=True)
    request = f"{why}-{time.time():.3f}"
    tmp = folder / f"{collectives.REQUEST_FILE}.{os.getpid()}.tmp"
    tmp.write_text(request + "\n", encoding="utf-8")
    os.replace(tmp, folder / collectives.REQUEST_FILE)
    return request


def asked(run_dir: Path) -> tuple[str, float] | None:
    """The newest request and when it was made, or None."""
    path = Path(run_dir) / collectives.DUMPS / collectives.REQUEST_FILE
    try:
        return path.read_text(encoding="utf-8").strip(), path.stat().st_mtime
    except OSError:
        return None


def _newest(
    request: tuple[str, float] | None, dumps: dict[int, dict[str, Any]]
) -> tuple[str, float] | None:
    """The newest of the request file's and of what the ranks dumped for by themselves (one
    waited in a collective for the stall timeout; one failed), with when it was made."""
    found = [request] if request else []
    for dump in dumps.values():
        why = str(dump.get("why") or "")
        if why and why != "end":
            found.append((why, float(dump.get("taken") or 0)))
    return max(found, key=lambda item: item[1]) if found else None


class CollectiveWatch:
    def __init__(
        self,
        run_dir: Path,
        read_stacks: Callable[[dict[int, dict[str, Any]]], dict[int, str]],
        code_files: Callable[[], list[str]],
    ) -> None:
        self.run_dir = Path(run_dir)
        self.read_stacks = read_stacks
        self.code_files = code_files
        self.stall_asked = False  # the ranks were asked for this stall already
        self.saved_for: str | None = None  # the request whose stacks are saved

    def poll(self, stalled: bool, records: dict[int, dict[str, Any]], now: float) -> None:
        """Ask for dumps at a new stall; save the named ranks' stacks once a request's dumps
        are in."""
        if stalled and not self.stall_asked:
            ask(self.run_dir, "stall")
        self.stall_asked = stalled
        dumps = collectives.read_dumps(self.run_dir)
        request = _newest(asked(self.run_dir), dumps)
        if request is None or request[0] == self.saved_for:
            return
        live = {r for r, rec in records.items() if rec.get("exit_code") is None}
        answered = {r for r, dump in dumps.items() if dump.get("why") == request[0]}
        if not live <= answered and now - request[1] < DUMPS_WITHIN_S:
            return
        self.saved_for = request[0]
        found = collectives.analyse(dumps)
        if found is None:
            return
        named = set(found["behind"]) | {r for m in found["mismatches"][:1] for r in m["ranks"]}
        wanted = {r: records[r] for r in sorted(named) if r in records and r in live}
        stacks = self.read_stacks(wanted) if wanted else {}
        files = self.code_files()
        saved = {
            "request": request[0],
            "ranks": {
                str(r): {"stack": text, "frame": user_frame(text, records[r].get("pid"), files)}
                for r, text in stacks.items()
            },
        }
        path = self.run_dir / collectives.DUMPS / collectives.STACKS_FILE
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(saved), encoding="utf-8")
        os.replace(tmp, path)
