"""Which process of a run failed first, by evidence, never by the first traceback to appear.

A rank that dies takes its peers down with it: they fail a moment later with "connection
closed by peer" or a timeout, and their tracebacks are often the only ones written. So the
first failure is the process that died first, from what each rank recorded itself:

- ``failed_at``: when boot caught the rank's exception (or a non-zero ``sys.exit``), taken
  before the traceback is formatted;
- ``ended`` of a rank that recorded its own end on a signal (SIGTERM, through the runtime);
- ``exited``: when the rank's process ended, written by its death watcher (see ``rankside/observe/death_watch.py``),
  the only time a rank killed by SIGKILL leaves;
- ``after_exit``: how the process of a rank that recorded exit code 0 really ended, when
  that was otherwise (a signal, another status), also from its death watcher: its Python code
  finished, then its native teardown died (a C++ destructor or exit handler calling abort());
- ``peers_gone`` and ``orphaned``, taken by a failing rank at the moment it failed: the ranks
  on its host already dead or dying then, and whether its launcher was already gone. A rank
  with either is a consequence, not a cause. This settles, free of any clock, the one close
  race: a killed rank is timed by its watcher a moment after the kernel closed its sockets,
  and a peer blocked on one of them may raise in between;
- the launcher's own end, timed by the supervisor, when a signal killed the launcher.

What the launcher printed (mpirun's "noticed that process rank N ... exited on signal S",
torchrun's error summary, horovodrun's "Process N exit with status code C") corroborates: it
names the signal a watcher could not read, and a dead rank whose record holds no time. A rank
cannot look into another host's processes, so for the close race across hosts the launcher's
word stands in for ``peers_gone``: a rank the launcher saw killed by a signal is taken as the
cause of a failure on another host less than ``CROSS_HOST_WINDOW_S`` before its watcher's time.
Otherwise ranks on different hosts are compared by their times as they are, which relies on
the nodes' clocks being synchronised (NTP), as every launcher's own timeouts already do.
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import dataclass, field
from typing import Any

from ..core.units import format_bytes
from ..rankside.host import procs

ON_ITS_OWN = ("exception", "exit")
AFTER_EXIT = "after exit"  # recorded exit code 0, then the process died otherwise
CROSS_HOST_WINDOW_S = 0.25  # over 3x the 75 ms a watcher took to wake on a loaded 2-core node


@dataclass(frozen=True)
class Death:
    """One process that ended badly. ``rank`` is None for the launcher itself."""

    rank: int | None
    at: float  # when it failed, seconds since the epoch; inf if unknown
    how: str  # "exception", "exit", "signal", "killed" or AFTER_EXIT
    record: dict[str, Any] = field(default_factory=dict, compare=False)
    signal: str | None = None
    exit_status: int | None = None
    launcher_saw: bool = False  # the launcher's own words name this rank's signal

    @property
    def by_signal(self) -> bool:
        return self.how not in ON_ITS_OWN

    def caused_by(self, others: list[Death]) -> bool:
        """True when this rank saw, as it failed, its launcher gone or one of ``others`` dying,
        or when the launcher saw a rank on another host killed just after (see the docstring)."""
        if self.record.get("orphaned"):
            return True
        gone = set(self.record.get("peers_gone") or ())
        return any(
            other.rank is not None
            and other is not self
            and (
                other.rank in gone
                or (
                    other.how == "killed"
                    and other.launcher_saw
                    and other.record.get("host") != self.record.get("host")
                    and 0 <= other.at - self.at < CROSS_HOST_WINDOW_S
                )
            )
            for other in others
        )

    def error(self, launcher: str, starter: str | None = None) -> str:
        """The run's one-line error for this death; ``starter`` names what started the ranks
        when it was not the launcher's own process (the warm rank pool)."""
        if self.rank is None:
            how = f"killed by {self.signal}" if self.signal else "ended without an exit code"
            return (
                f"{starter or f'the launcher ({launcher})'} was {how} before any rank "
                "failed; its ranks were stopped; see logs/launcher.log"
            )
        oom = self.record.get("oom")
        if isinstance(oom, dict) and self.how not in ON_ITS_OWN:
            return oom_words(self.rank, oom)
        gpu = self.record.get("gpu_oom")
        if isinstance(gpu, dict) and self.how in ON_ITS_OWN:
            return gpu_oom_words(self.rank, gpu, str(self.record.get("error") or ""))
        if self.how in ON_ITS_OWN:
            return (
                self.record.get("error")
                or f"rank {self.rank} exited with code {self.record.get('exit_code')}"
            )
        if self.how == "signal":
            return f"rank {self.rank} was terminated by {self.signal}"
        if self.how == AFTER_EXIT:
            died = (
                f"killed by {self.signal}"
                if self.signal
                else f"ended with status {self.exit_status}"
            )
            return (
                f"rank {self.rank} finished its code (it recorded exit code 0), then its "
                f"process was {died} as it ended, in native teardown (a C/C++ "
                "destructor or exit handler); see logs/launcher.log and "
                f"logs/rank-{self.rank}.log"
            )
        if self.signal:
            cause = f"killed by {self.signal}"
        elif self.exit_status is not None:
            cause = f"exited with code {self.exit_status} before boot could record it"
        else:
            cause = "killed by a signal, for example by the out-of-memory killer"
        return f"rank {self.rank} ended without recording an exit ({cause}); see logs/launcher.log"


def oom_words(rank: int, oom: dict[str, Any]) -> str:
    """A rank the kernel's out-of-memory killer ended, as its watcher recorded it
    (rankside/observe/death_watch.py): where memory ran out, the limit and the peaks."""

    def size(key: str) -> str | None:
        value = oom.get(key)
        return format_bytes(value) if isinstance(value, int) and value > 0 else None

    if oom.get("cgroup"):
        limit, peak = size("limit_bytes"), size("peak_bytes")
        where = f"its memory cgroup {oom['cgroup']} reached its limit" + (
            f" of {limit}" if limit else ""
        )
        where += f" (peak {peak})" if peak else ""
    else:
        total = size("node_mem_total_bytes")
        where = "its node ran out of memory" + (f" ({total} in all)" if total else "")
    rss = size("rss_peak_bytes")
    return (
        f"rank {rank} was killed by the out-of-memory killer (SIGKILL): {where}"
        + (f"; the rank's own peak resident memory was {rss}" if rss else "")
        + f"; see logs/rank-{rank}.log, and give it more memory or use less"
    )


def gpu_oom_words(rank: int, gpu: dict[str, Any], error: str) -> str:
    """A rank that ran out of GPU memory (PyTorch's OutOfMemoryError): which GPU, the peak
    its processes held and the GPU's total, then the error itself."""
    device = gpu.get("device")
    where = f"GPU {device}" if isinstance(device, int) else "its GPU"
    peak, total = gpu.get("peak_bytes"), gpu.get("total_bytes")
    held = ""
    if isinstance(peak, int) and peak > 0:
        held = f" (the rank held up to {format_bytes(peak)}"
        held += f" of its {format_bytes(total)})" if isinstance(total, int) and total else ")"
    elif isinstance(total, int) and total > 0:
        held = f" ({format_bytes(total)} in all)"
    return f"rank {rank} ran out of memory on {where}{held}" + (f": {error}" if error else "")


def pool_words(hot: dict[str, Any]) -> str:
    """What started the ranks, in an error: the warm rank pool here, or on the nodes the
    pool's launcher (which dies by SIGKILL with its node's pool, after saying so)."""
    pools = hot.get("pools")
    if pools:
        return (
            "the rank pool's launcher on a node (pools: "
            + ", ".join(f"{host} pid {pid}" for host, pid in pools.items())
            + ")"
        )
    return f"the warm rank pool (pid {hot['pool']})"


def rank_deaths(
    records: dict[int, dict[str, Any]],
    launcher_words: dict[int, str] | None = None,
    launcher_statuses: dict[int, int] | None = None,
) -> list[Death]:
    """Every rank that ended badly, with the times its record holds.

    ``launcher_words`` (rank -> signal name, from ``launcher_signals``) names the signal of a
    rank whose own record could not, and adds a rank the launcher saw die by a signal;
    ``launcher_statuses`` (rank -> exit status, from ``launcher_statuses``) gives the status
    of a rank that recorded no exit and whose watcher could not read one."""
    said = launcher_words or {}
    statuses = launcher_statuses or {}
    deaths = []
    for rank, rec in records.items():
        code = rec.get("exit_code")
        if code == 0:
            late = rec.get("after_exit") or {}
            name = late.get("signal") or said.get(rank)
            if name or late.get("exit_status"):
                deaths.append(
                    Death(
                        rank,
                        float(rec.get("exited", math.inf)),
                        AFTER_EXIT,
                        rec,
                        name,
                        late.get("exit_status"),
                        launcher_saw=rank in said,
                    )
                )
            continue
        exited = float(rec.get("exited", math.inf))
        if code is None:
            if "exited" not in rec and rank not in said:
                continue  # no evidence yet; see ``unrecorded``
            deaths.append(
                Death(
                    rank,
                    exited,
                    "killed",
                    rec,
                    rec.get("signal") or said.get(rank),
                    rec.get("exit_status")
                    or (None if rec.get("signal") or rank in said else statuses.get(rank)),
                    launcher_saw=rank in said,
                )
            )
        elif rec.get("signal"):
            deaths.append(
                Death(
                    rank,
                    min(exited, float(rec.get("ended", math.inf))),
                    "signal",
                    rec,
                    rec["signal"],
                )
            )
        else:
            at = float(rec.get("failed_at", rec.get("ended", math.inf)))
            deaths.append(Death(rank, at, "exception" if rec.get("error") else "exit", rec))
    return deaths


# What a rank raises when a peer's connection went away under it during a collective or
# while the process group was being made (Gloo, NCCL's socket layer, the TCP store).
_PEER_LOST = re.compile(
    r"closed by peer|connection reset|connection refused|broken pipe|connectFullMesh", re.I
)
PEER_WINDOW_S = 2.0


def peers_at_failure(death: Death, records: dict[int, dict[str, Any]]) -> str | None:
    """For a rank that failed because a peer's connection went away: what the other ranks
    had done by then, as their own records say (a peer that ended on its own within
    PEER_WINDOW_S of the failure). None when the failure is not of that kind, or no peer
    ended then."""
    if death.rank is None or death.how not in ON_ITS_OWN:
        return None
    if not _PEER_LOST.search(str(death.record.get("error") or "")):
        return None
    words = []
    for rank, rec in sorted(records.items()):
        ended = rec.get("ended")
        if rank == death.rank or rec.get("exit_code") is None or ended is None:
            continue
        gap = float(ended) - death.at
        if abs(gap) <= PEER_WINDOW_S:
            when = f"{-gap:.2f} s before" if gap <= 0 else f"{gap:.2f} s after"
            did = "failed with" if rec.get("error") else "exited with"
            words.append(f"rank {rank} {did} code {rec['exit_code']} {when}")
    return "; ".join(words) or None


def unrecorded(records: dict[int, dict[str, Any]]) -> list[int]:
    """Ranks that started and left no end and no watcher's time at all."""
    return sorted(
        rank
        for rank, rec in records.items()
        if rec.get("exit_code") is None and "exited" not in rec
    )


def first_death(deaths: list[Death]) -> Death | None:
    """The earliest death that was not a consequence of another one (see the docstring)."""
    if not deaths:
        return None
    causes = [d for d in deaths if not d.caused_by(deaths)] or deaths
    return min(causes, key=lambda d: (d.at, d.by_signal, _rank_key(d)))


def first_own_failure(records: dict[int, dict[str, Any]], relaunches: int) -> Death | None:
    """The earliest rank of the current attempt that failed on its own or was killed, by its
    own records, while the run goes. A rank that recorded a SIGTERM, or got one after it
    recorded its exit, was stopped by someone already ending the run (its launcher, the
    scheduler, its watcher when the launcher is gone), so it does not start the wait for the
    launcher to stop the others. Only the current attempt's records count (the supervisor
    has started ``relaunches`` attempts again): an earlier attempt's stay until its ranks
    start again."""
    current = max([relaunches, *(r.get("attempt", 0) for r in records.values())])
    deaths = rank_deaths({rank: r for rank, r in records.items() if r.get("attempt", 0) == current})
    return first_death(
        [
            d
            for d in deaths
            if d.how != "signal" and not (d.how == AFTER_EXIT and d.signal == "SIGTERM")
        ]
    )


def _rank_key(death: Death) -> int:
    return death.rank if death.rank is not None else -1


def launcher_death(exit_code: int | None, at: float | None) -> Death | None:
    """The launcher itself, when a signal killed it (a negative exit code, as ``wait`` gives)."""
    if exit_code is None or exit_code >= 0:
        return None
    return Death(
        None,
        at if at is not None else math.inf,
        "killed",
        signal=procs.termination_signal_name(exit_code),
    )


_MPIRUN = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
# A target with several nodes prefixes each node's lines with its name: "[n2]   rank : 1".
_TORCHRUN = re.compile(r"rank\s*:\s*(\d+)[^\n]*\n(?:\[[^\]\n]*\])?\s*exitcode\s*:\s*(-?\d+)")
_HOROVOD = re.compile(r"Process (\d+) exit with status code (-?\d+)")
# torchrun's agent at each failure of its ranks, one it restarts after included; it names the
# process, so the rank is the one whose record holds that pid (every attempt has its own).
_TORCHRUN_FAILED = re.compile(r"failed \(exitcode: (-\d+)\) local_rank: (\d+) \(pid: (\d+)\)")

Killed = dict[tuple[int, int], str]  # (pid, local rank) -> signal name


def killed_processes(log_text: str | None) -> Killed:
    """The rank processes torchrun's agent said a signal ended, by pid and local rank."""
    return {
        (int(pid), int(local)): _name(-int(code))
        for code, local, pid in _TORCHRUN_FAILED.findall(log_text or "")
    }


def killed_ranks(records: dict[int, dict[str, Any]], killed: Killed) -> dict[int, str]:
    """rank -> signal name, for the ranks whose process (pid and local rank, as the rank
    recorded them) is among ``killed``."""
    found = {}
    for rank, rec in records.items():
        key = (rec.get("pid"), rec.get("local_rank"))
        if key in killed:
            found[rank] = killed[key]
    return found


def launcher_signals(
    log_text: str | None,
    launcher: str = "",
    exit_code: int | None = None,
    records: dict[int, dict[str, Any]] | None = None,
) -> dict[int, str]:
    """Ranks the launcher's own messages say a signal ended: rank -> signal name. Under
    ``--launcher python`` the launcher is rank 0, so its exit code is rank 0's. With the
    ranks' ``records``, also the processes torchrun names by pid (``killed_ranks``)."""
    found: dict[int, str] = {}
    if launcher == "python" and exit_code is not None and exit_code < 0:
        found[0] = procs.termination_signal_name(exit_code) or f"signal {-exit_code}"
    if not log_text:
        return found
    if records:
        found.update(killed_ranks(records, killed_processes(log_text)))
    for rank, num in _MPIRUN.findall(log_text):
        found.setdefault(int(rank), _name(int(num)))
    for rank, code in _TORCHRUN.findall(log_text):
        if int(code) < 0:
            found.setdefault(int(rank), _name(-int(code)))
    for rank, code in _HOROVOD.findall(log_text):  # -9 from a process, 137 from a shell
        name = procs.termination_signal_name(int(code))
        if name is not None:
            found.setdefault(int(rank), name)
    return found


def launcher_statuses(log_text: str | None) -> dict[int, int]:
    """Ranks torchrun's failure summary says exited with a status of their own (not by a
    signal): rank -> status. What a rank's watcher reads from its zombie, when the launcher
    reaped the rank before the watcher could (a loaded machine)."""
    return {
        int(rank): int(code) for rank, code in _TORCHRUN.findall(log_text or "") if int(code) > 0
    }


def _name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
