"""``Session.restart(rank=R)``: bring back ranks of a live session whose process died, while
the other ranks keep their namespaces.

A rank's process is held by the process its launcher started (``rankside/rank/
session_holder.py``), so the death of the process that runs the cells ends no other rank:
its holder writes ``dead.<rank>``, and the session names the rank in its next reply. A
process group cannot take a new member, so the restart is one request that every rank runs:
the survivors leave the old group, the holders of the dead ranks fork new workers that start
at that request, and all of them form a new group (``session_loop.regroup``). The restarted
ranks' namespaces are empty: the session records the restart (``session/restarts.json``)
with the names they lost, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal, Protocol, TextIO

from ..core.errors import RunStateError, SpecError
from ..store.sessions import SessionFiles
from .runs import Run
from .session_replies import dead_text


class Session(Protocol):
    """What a restart reads of ``api.sessions.Session`` (not imported: it imports this)."""

    record: Run
    files: SessionFiles

    @property
    def name(self) -> str: ...

    @property
    def ranks(self) -> range: ...

    def _ranks(self, rank: int | None) -> range: ...

    def _regroup(
        self, n: int, request: dict[str, Any], stream: TextIO | Literal[False] | None
    ) -> None: ...


HOLD = "--hold"  # the session script's flag: each rank's process is held, so it can die alone


def holds_ranks(session: Session) -> bool:
    """Whether a rank of ``session`` can die alone (and be restarted)."""
    return HOLD in [str(a) for a in session.record.spec.code.args]


def check_none_dead(session: Session, ranks: Sequence[int], what: str) -> None:
    """Refuse ``what`` (a request to ``ranks``) while one of them is dead."""
    dead = {r: info for r, info in session.files.dead().items() if r in ranks}
    if dead:
        raise RunStateError(f"cannot {what} now: {dead_text(session.name, dead)}")


def restart_ranks(
    session: Session,
    ranks: int | Sequence[int],
    *,
    stream: TextIO | Literal[False] | None = None,
) -> dict[str, Any]:
    """Bring back ``ranks`` (every rank that is dead) and form the group anew; the restart
    as the session records it."""
    wanted = sorted({ranks} if isinstance(ranks, int) else set(ranks))
    for rank in wanted:
        session._ranks(rank)  # a rank the session has
    if not holds_ranks(session):
        raise SpecError(
            f"session {session.name!r} runs on {session.record.spec.target.name!r}, where a "
            "rank that dies ends the session: restart it whole (restart without --rank)"
        )
    dead = session.files.dead()
    alive = [r for r in wanted if r not in dead]
    if alive:
        raise SpecError(
            f"restart --rank {', '.join(map(str, alive))}: alive in session {session.name!r}; "
            "--rank brings back a rank that died"
            + (f" (dead: {', '.join(map(str, sorted(dead)))})" if dead else " (none is dead)")
            + "; to start every rank anew, restart without --rank"
        )
    left = sorted(set(dead) - set(wanted))
    if left:
        raise SpecError(
            f"restart --rank {', '.join(map(str, wanted))}: rank(s) "
            f"{', '.join(map(str, left))} of session {session.name!r} died too, and the group "
            f"needs every rank: add {' '.join(f'--rank {r}' for r in left)}"
        )
    generation = 1 + max(
        [int(r.get("generation") or 0) for r in session.files.restarts()], default=0
    )
    lost = sorted(session.files.names())
    n, _ = session.files.new_request()
    for rank in wanted:
        session.files.ask_restart(rank, n, generation)
    began = time.time()
    session._regroup(n, {"op": "regroup", "generation": generation}, stream)
    entry = {
        "ranks": wanted,
        "at": began,
        "generation": generation,
        "request": n,
        "how": {str(r): dead[r].get("how") for r in wanted},
        "lost": lost,
    }
    session.files.add_restart(entry)
    return entry


def restarted_text(session: Session, entry: dict[str, Any]) -> str:
    """What a restart of ranks says: which came back, that their namespaces are empty, and
    the names they lost."""
    ranks = entry["ranks"]
    others = [r for r in session.ranks if r not in ranks]
    lost = entry.get("lost") or []
    them = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    kept = (
        f"rank {others[0]}, which kept its namespace"
        if len(others) == 1
        else f"ranks {', '.join(map(str, others))}, which kept their namespaces"
    )
    return (
        f"session {session.name}: {them} restarted, in a new process group with "
        f"{kept if others else 'no other rank'}. The namespace of {them} is empty"
        + (f": it lost {', '.join(lost)}" if lost else "")
        + "; run the cells that build what it needs again"
    )
