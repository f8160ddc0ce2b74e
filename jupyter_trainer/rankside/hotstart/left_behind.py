"""What a pool's ranks leave behind when they end, and how the pool ends it.

Each forked rank is the subreaper of the processes it starts (``child``), and the pool is
the ranks' (``server``): while a rank lives, a process it started whose parent ends stays
below it; when the rank ends, whatever is still below it comes to the pool, however it
hid (a session of its own, an emptied environment, an ``exec`` that renamed it). Once such
a process has left the run's process group, nothing else finds it: ``JT_RUN_ID`` is not in
its environment, and neither the group nor the run's supervisor is above it.

- A process that came with a rank's end and is still in the run's process group (the
  rank's death watcher, which writes the rank's end down after it; a DataLoader worker) is
  the group's: the run's teardown ends that group as it ends a torchrun run's. The pool
  only collects its exit.
- One that left the group is the run's leftover: when the run's last rank has ended, it
  gets SIGTERM with everything below it, and SIGKILL ``GRACE_S`` later; the run's launcher
  log names each, and its pool record lists them for the leftover checks
  (``records.recorded_pids``). A run's end is reported once they are gone.

Every exit is collected by pid (``waitpid(pid)``): a ``waitpid(-1)`` would take the ranks'
exits, which the pool reports. A process is the leftover of the rank whose end brought it;
where ranks of several runs ended in the same moment, of each of them (it is ended at the
first of those runs' ends: none of them has the rank that started it any more).
"""

from __future__ import annotations

import os
import selectors
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..host import procs

GRACE_S = 3.0  # SIGTERM -> SIGKILL for a run's leftovers, as a supervisor gives a run's
GONE_S = 5.0  # after SIGKILL: the most a run's end waits for its leftovers to be gone

Rank = tuple[int, int]  # (a run's process group, a rank of it)


@dataclass
class _Adopted:
    """A process that came to the pool when a rank (or another such process) ended."""

    ticks: int
    fd: int  # its pidfd, in the pool's selector
    left_by: set[Rank] = field(default_factory=set)


class LeftBehind:
    """The pool's adopted processes: collected as they end, ended with their run."""

    def __init__(self, sel: selectors.BaseSelector) -> None:
        self.sel = sel
        self.me, self.session = os.getpid(), os.getsid(0)
        # the pool's own children from before it served (none is a run's)
        self.own = {(p.pid, p.start_ticks) for p in procs.stats() if p.parent == self.me}
        self.adopted: dict[int, _Adopted] = {}
        self.logs: dict[int, str] = {}  # a run's process group -> its launcher log
        self.ended: dict[int, dict[int, int]] = {}  # a run's group -> its leftovers signalled

    def adopt(self, left_by: set[Rank], ranks: Mapping[int, Rank]) -> None:
        """Take in the processes that became the pool's children since the last look,
        as left behind by ``left_by``, the ranks whose end is being handled (and by any
        other of ``ranks``, pid -> rank, or adopted process that has ended unseen)."""
        new = [
            p
            for p in procs.stats()
            if p.parent == self.me
            and p.pid not in ranks
            and p.pid not in self.adopted
            and (p.pid, p.start_ticks) not in self.own
        ]
        if not new:
            return
        left_by = set(left_by)
        left_by.update(who for pid, who in ranks.items() if _has_ended(pid))
        for pid, known in self.adopted.items():
            if _has_ended(pid):
                left_by |= known.left_by
        for p in new:
            if p.ended:
                _collect(p.pid)  # its own children, if any, came here too: they are in new
                continue
            try:
                fd = os.pidfd_open(p.pid)  # a child: its pid is its own until collected
            except OSError:
                _collect(p.pid)
                continue
            self.adopted[p.pid] = _Adopted(p.start_ticks, fd, set(left_by))
            self.sel.register(fd, selectors.EVENT_READ, ("adopted", p.pid))

    def collect(self, pid: int) -> set[Rank]:
        """Adopted ``pid`` has ended: collect its exit; the ranks that left it behind."""
        known = self.adopted.pop(pid)
        self.sel.unregister(known.fd)
        os.close(known.fd)
        _collect(pid)
        return known.left_by

    def end(self, pgid: int) -> tuple[list[int], list[tuple[int, int]]]:
        """SIGTERM what run ``pgid``'s ranks left behind outside its process group, with
        everything below it (again on each call: what it started since is found too),
        naming each in the run's launcher log. The leftovers still alive, and those newly
        signalled (pid, start ticks)."""
        table = {p.pid: p for p in procs.stats() if not p.ended}
        roots = {
            pid: known
            for pid, known in self.adopted.items()
            if any(run == pgid for run, _ in known.left_by)
            and pid in table
            and (table[pid].pgid, table[pid].session) != (pgid, self.session)
        }
        below = procs.descendants(
            set(roots), {pid: (p.parent, p.start_ticks) for pid, p in table.items()}
        )
        ended = self.ended.setdefault(pgid, {})
        new = [
            pid for pid in sorted(set(roots) | below) if ended.get(pid) != table[pid].start_ticks
        ]
        lines = []
        for pid in new:
            ranks = sorted(r for run, r in _left_by(pid, roots, table) if run == pgid)
            which = " or ".join(str(r) for r in ranks) or "a rank"
            lines.append(f"[jt] ended {procs.describe(pid)}, which rank {which} left behind")
        procs.signal_pids(new, signal.SIGTERM)
        ended.update((pid, table[pid].start_ticks) for pid in new)
        self._note(pgid, lines)
        alive = [pid for pid, ticks in ended.items() if procs.is_alive(pid, ticks)]
        return alive, [(pid, ended[pid]) for pid in new]

    def kill(self, pgid: int, pids: list[int]) -> None:
        """SIGKILL run ``pgid``'s leftovers that outlived their SIGTERM's grace."""
        self._note(
            pgid,
            [
                f"[jt] killed {procs.describe(pid)} (SIGKILL): it did not end within "
                f"{GRACE_S:g} s of SIGTERM"
                for pid in pids
            ],
        )
        procs.signal_pids(pids, signal.SIGKILL)

    def forget(self, pgid: int) -> None:
        """Run ``pgid`` is over: what it left behind in its group is the group's."""
        self.logs.pop(pgid, None)
        self.ended.pop(pgid, None)
        for known in self.adopted.values():
            known.left_by = {who for who in known.left_by if who[0] != pgid}

    def close(self) -> None:
        """The pool ends: its runs' leftovers end with it (SIGKILL)."""
        for pgid in {run for known in self.adopted.values() for run, _ in known.left_by}:
            alive, _ = self.end(pgid)
            procs.signal_pids(alive, signal.SIGKILL)

    def _note(self, pgid: int, lines: list[str]) -> None:
        log = self.logs.get(pgid)
        if not lines or not log:
            return
        try:
            with open(log, "a", encoding="utf-8") as out:
                out.write("".join(f"{line}\n" for line in lines))
        except OSError:
            pass


def _left_by(pid: int, roots: Mapping[int, _Adopted], table: Mapping[int, procs.Stat]) -> set[Rank]:
    """The ranks that left ``pid`` behind: those of the adopted process it is below."""
    seen = set()
    while pid not in roots and pid in table and pid not in seen:
        seen.add(pid)
        pid = table[pid].parent
    return roots[pid].left_by if pid in roots else set()


def _has_ended(pid: int) -> bool:
    """Whether the pool's child ``pid`` has ended or is ending. Its exit may not be ready
    to collect yet although its children have come to the pool: a process of several
    threads hands them on when its last thread ends, and is waited for after that."""
    found = procs.stat(pid)
    return found is None or found.ending


def _collect(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
