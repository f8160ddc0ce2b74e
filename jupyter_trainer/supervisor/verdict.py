"""How a run ended: its terminal status and the fields of its state that say why.

The supervisor gathers the evidence once every process of the run is gone (what the watch
loop ended with, each rank's record, the launcher's exit and last words, the scheduler's
report, a cancel request, a full disk) and ``decide`` turns it into ``completed``,
``canceled`` or ``failed`` with one error line, the rank that failed first and its traceback.
Which process failed first is ``attribution``'s business; this module only weighs its answer
against the rest.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..core.records import StateRecord, Status
from . import attribution

TRACEBACK_TAIL = 8000


@dataclass(frozen=True)
class Evidence:
    """What the supervisor knows about the end of a run, once its processes are gone."""

    outcome: dict[str, Any]  # what the watch loop ended with
    records: dict[int, dict[str, Any]]  # each rank's own record (``ranks/rank-<r>.json``)
    launcher: str  # the launcher's name (torchrun, mpirun, ...)
    launcher_exit: int | None
    launcher_death: attribution.Death | None  # the launcher itself, killed by a signal
    launcher_words: dict[int, str] = field(default_factory=dict)  # rank -> signal it names
    launcher_statuses: dict[int, int] = field(default_factory=dict)  # rank -> exit status
    log_tail: str | None = None  # the end of logs/launcher.log
    hot: dict[str, Any] = field(default_factory=dict)  # the warm pool's record, if used
    report: dict[str, Any] = field(default_factory=dict)  # the scheduler's report
    world_size: int = 1
    cancel_reason: str | None = None
    disk_full: str | None = None  # the error of a full disk, if the disk filled


# What torch's TCPStore says when the port chosen for a run's store is not the store's by
# the time it is used: another process listens there (the store's bind), or something other
# than the store answers there (a client's ping).
_PORT_TAKEN = (
    (
        re.compile(r"failed to listen on any local network address\. port: (\d+)[^\n]*EADDRINUSE"),
        "another process was listening there",
    ),
    (
        re.compile(r"(?:host \S+:(\d+)\b[^\n]*)?Ping failed, invalid value returned from server"),
        "something other than the store answered there",
    ),
)


def port_taken(text: str) -> str:
    """``: port P was taken ...`` when ``text`` (a traceback, the launcher's log) says that
    the port chosen for the run's store was taken between its choice and its use; else ``""``."""
    for pattern, what in _PORT_TAKEN:
        found = pattern.search(text)
        if found:
            port = f"port {found.group(1)}" if found.group(1) else "the store's port"
            return (
                f": {port} was taken before the run's store could listen there ({what}); "
                "submit the run again, which picks another port"
            )
    return ""


def first_failure(e: Evidence) -> attribution.Death | None:
    """The process that failed first: a rank by its records (and the launcher's words), or
    the launcher when a signal killed it before any rank failed, or when the pool died and
    its ranks with it. A rank that recorded exit code 0 and then died by a signal counts
    only when the launcher did not exit 0 (the launcher saw every rank end well); so does a
    rank that ended without recording its exit where no signal or status of it could be
    read (``os._exit(0)``, which a script calls to skip a backend's slow teardown)."""
    deaths = attribution.rank_deaths(e.records, e.launcher_words, e.launcher_statuses)
    if e.launcher_exit == 0:
        deaths = [
            d
            for d in deaths
            if d.how != attribution.AFTER_EXIT
            and not (d.how == "killed" and d.signal is None and d.exit_status is None)
        ]
    first = attribution.first_death(deaths)
    launcher = e.launcher_death
    if launcher is not None and (
        first is None
        or launcher.at <= first.at
        or first.record.get("orphaned")
        or (e.hot.get("used") and first.how == "killed")
    ):
        first = launcher  # no rank died first, or the pool died and its ranks with it
    return first


def decide(e: Evidence) -> tuple[Status, StateRecord]:
    """The run's terminal status and the fields of its state that say why."""
    if e.cancel_reason and "error" not in e.outcome:
        return "canceled", {"reason": e.cancel_reason}
    first = first_failure(e)
    killed = attribution.unrecorded(e.records) if e.launcher_exit not in (0, None) else []
    fields: StateRecord
    if "error" in e.outcome:
        fields = {"error": e.outcome["error"], "traceback": e.outcome.get("traceback")}
        if e.outcome.get("failed_rank") is not None:
            fields["failed_rank"] = e.outcome["failed_rank"]
    elif e.disk_full and (
        first is not None
        or killed
        or e.launcher_exit not in (0, None)
        or e.outcome.get("stopped_after_rank_failure")
        or len(e.records) < e.world_size
    ):
        # Ranks that could not write their logs or records fail in ways that blame them;
        # the full disk is the cause.
        fields = {"error": e.disk_full, "traceback": e.log_tail}
    elif e.report.get("error") and (first is None or first.by_signal):
        # The scheduler ended the job (time limit, memory, node failure): that is the cause,
        # not the SIGTERM its ranks received.
        fields = {"error": e.report["error"], "traceback": e.log_tail}
    elif first is not None:
        starter = attribution.pool_words(e.hot) if e.hot.get("used") else None
        fields = {
            "failure": {
                "rank": first.rank,
                "how": first.how,
                "at": first.at,
                "signal": first.signal,
            },
            "error": first.error(e.launcher, starter),
            "traceback": (first.record.get("traceback") or "")[-TRACEBACK_TAIL:]
            or (e.log_tail if first.by_signal else None),
        }
        if first.rank is not None:
            fields["failed_rank"] = first.rank
        peers = attribution.peers_at_failure(first, e.records)
        if peers:  # a lost connection: say what the peer did, not only what the rank saw
            fields["error"] = f"{fields['error']} (at rank {first.rank}'s failure: {peers})"
    elif killed:
        fields = {
            "failed_rank": killed[0],
            "traceback": e.log_tail,
            "error": f"rank {killed[0]} ended without recording an exit (killed by a "
            "signal, for example by the out-of-memory killer); see "
            "logs/launcher.log",
        }
    elif e.launcher_exit not in (0, None) or e.outcome.get("stopped_after_rank_failure"):
        started = len(e.records)
        when = (
            ""
            if started >= e.world_size
            else " before any rank recorded its start; see logs/launcher.log"
            if not started
            else f" when only {started} of {e.world_size} ranks had recorded their start; see "
            "logs/launcher.log"
        )
        fields = {
            "error": f"the launcher exited with code {e.launcher_exit}{when}",
            "traceback": e.log_tail,
        }
    elif len(e.records) < e.world_size:
        fields = {
            "error": f"only {len(e.records)} of {e.world_size} ranks started",
            "traceback": e.log_tail,
        }
    else:
        return "completed", {}
    fields["error"] += port_taken(f"{fields.get('traceback') or ''}\n{e.log_tail or ''}")
    return "failed", fields
