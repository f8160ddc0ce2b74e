"""What a live session answers when a request failed on some of its ranks: their
tracebacks, grouped, or the death of a rank's process, with the fix."""

from __future__ import annotations

from typing import Any

from ..core.errors import CellFailed


def raise_failures(name: str, results: dict[int, dict[str, Any]]) -> None:
    failed = {r: res for r, res in results.items() if not res.get("ok")}
    if not failed:
        return
    by_text: dict[str, list[int]] = {}
    for r, res in sorted(failed.items()):
        by_text.setdefault(str(res.get("error") or "unknown error").rstrip(), []).append(r)
    interrupted = all(res.get("interrupted") for res in failed.values())
    parts = [
        f"rank{'s' if len(rs) > 1 else ''} {', '.join(map(str, rs))}:\n{text}"
        for text, rs in by_text.items()
    ]
    what = "was interrupted" if interrupted else "raised"
    raise CellFailed(
        f"the cell {what} in session {name!r} (the session goes on)\n" + "\n".join(parts),
        ranks=sorted(failed),
        interrupted=interrupted,
    )


def dead_text(name: str, dead: dict[int, dict[str, Any]]) -> str:
    """``dead``'s ranks named, with how they died and the fix."""
    named = "; ".join(f"rank {r} {info.get('how') or 'died'}" for r, info in sorted(dead.items()))
    flags = " ".join(f"--rank {r}" for r in sorted(dead))
    return (
        f"in session {name!r}, {named}. The other ranks keep their namespaces: bring "
        f"{'it' if len(dead) == 1 else 'them'} back with `%train session restart "
        f"{name} {flags}` (its namespace starts empty), or restart the whole session"
    )
