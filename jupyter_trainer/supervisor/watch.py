"""What the supervisor watches for while the ranks run: attempts, NaN/inf values, stalls.

``RunWatch`` reads only the run's own folder (the ranks' records, heartbeats and events, which
remote targets bring back with ``Target.sync``) and the ranks' live stacks through the target.
The supervisor calls ``attempts``, ``non_finite`` and ``stalled`` from its poll loop and puts
what they find in the run's state.

Who is stalled. A rank makes progress when it logs (``jt.log`` or ``jt.progress``); its
heartbeat says when it last did. Ranks that never log (a loop that logs on rank 0 only) are
not judged on their own. A rank is *behind* when it has logged nothing for the timeout.
If some ranks are behind while others still progress, the ones behind are stalled. If every
rank that logs is behind, the run as a whole has stopped: the suspects are those with the
lowest last step and the ranks that never log, and their stacks decide: a rank whose Python
stack sits in a collective (torch.distributed, Horovod, DDP's backward) waits for a peer and
is not the cause, as long as another suspect is not waiting. When every suspect waits, the
cause is a rank they wait for: a live rank whose stack is elsewhere, though it may not be
behind yet (one whose last event was a moment later crosses the timeout a moment later).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable
from typing import Any

from ..store import RunPaths
from ..store.attempts import attempt_records, beats, current_records
from . import attribution
from .collective_watch import CollectiveWatch
from .gpu_idle import GpuWatch
from .stack_text import main_thread_frames, snapshot_files, tidy, user_frame

SCAN_BYTES = 4 << 20  # events read per file per scan
NON_FINITE = ("nan", "inf", "-inf")
# A top frame in one of these means the rank waits for its peers.
_WAITING = re.compile(
    r"torch/distributed/|torch/nn/parallel/distributed|torch/autograd/|"
    r"horovod/|mpi4py"
)
_EVENTS = re.compile(r"rank-(\d+)\.jsonl")

StackReader = Callable[[dict[int, dict[str, Any]]], dict[int, str]]


class RunWatch:
    def __init__(
        self, paths: RunPaths, launcher: str, stall_timeout: float, stacks: StackReader
    ) -> None:
        self.paths = paths
        self.launcher = launcher
        self.stall_timeout = stall_timeout
        self.read_stacks: StackReader = lambda found: {
            rank: tidy(text) for rank, text in stacks(found).items()
        }
        self.offsets: dict[str, int] = {}
        self.first_non_finite: dict[str, dict[str, Any]] = {}
        self.stacks: dict[tuple[int, int], str] = {}  # (attempt, rank) -> stack at its stall
        self.code_files: list[str] | None = None  # the snapshot's, read at the first stall
        self.gpus = GpuWatch(str(paths.events))
        self.killed: attribution.Killed = {}  # the rank processes torchrun saw killed so far
        self.launcher_read = 0  # how far launcher.log has been read for them
        # every rank's Flight Recorder dumped at a stall or when asked (collective_watch.py)
        self.collectives = CollectiveWatch(paths.root, self.read_stacks, self._code_files)

    # -- attempts ------------------------------------------------------------------------
    def attempts(self) -> list[dict[str, Any]]:
        """One entry per attempt the ranks recorded: start, end, first failing rank, error."""
        found = []
        self._read_launcher_log()
        for attempt, records in attempt_records(self.paths.ranks).items():
            starts = [r["started"] for r in records.values() if isinstance(r.get("started"), float)]
            ends = [r.get("ended") or r.get("exited") for r in records.values()]
            times = [e for e in ends if isinstance(e, float)]
            entry: dict[str, Any] = {
                "attempt": attempt,
                "start": min(starts, default=None),
                "end": max(times) if times and len(times) == len(ends) else None,
                "failed_rank": None,
                "error": None,
            }
            said = attribution.killed_ranks(records, self.killed)
            first = attribution.first_death(attribution.rank_deaths(records, said))
            if first is not None:
                entry.update(failed_rank=first.rank, error=first.error(self.launcher))
            found.append(entry)
        return found

    def _read_launcher_log(self) -> None:
        """Read on in launcher.log, whole lines only, for the processes torchrun says a
        signal ended: a rank's watcher cannot read how its rank died once torchrun has
        reaped it, and torchrun names each one, restarts included."""
        try:
            with open(self.paths.logs / "launcher.log", "rb") as fh:
                fh.seek(self.launcher_read)
                data = fh.read(SCAN_BYTES)
        except OSError:
            return
        end = data.rfind(b"\n") + 1 or (len(data) if len(data) == SCAN_BYTES else 0)
        whole = data[:end]
        self.launcher_read += end
        self.killed.update(attribution.killed_processes(whole.decode(errors="replace")))

    def current_records(self) -> dict[int, dict[str, Any]]:
        """The ranks' records of the latest attempt."""
        return current_records(self.paths.ranks)

    # -- NaN and inf ---------------------------------------------------------------------
    def non_finite(self) -> dict[str, dict[str, Any]]:
        """Metrics whose first NaN or inf appeared since the last call: name -> where."""
        new: dict[str, dict[str, Any]] = {}
        try:
            entries = list(os.scandir(self.paths.events))
        except FileNotFoundError:
            return new
        for entry in entries:
            match = _EVENTS.fullmatch(entry.name)
            if match:
                for name, fact in self._scan(entry.path, int(match.group(1))).items():
                    if name not in self.first_non_finite:
                        self.first_non_finite[name] = new[name] = fact
        return new

    def _scan(self, path: str, rank: int) -> dict[str, dict[str, Any]]:
        offset = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read(SCAN_BYTES)
        except OSError:
            return {}
        data = data[: data.rfind(b"\n") + 1]
        self.offsets[path] = offset + len(data)
        found: dict[str, dict[str, Any]] = {}
        if b'nan"' not in data and b'inf"' not in data:
            return found
        for line in data.splitlines():
            if b'nan"' not in line and b'inf"' not in line:
                continue
            try:
                event = json.loads(line)
                values = event.get("values") or {}
            except (ValueError, AttributeError):
                continue
            for name, value in values.items():
                if value in NON_FINITE and name not in found:
                    found[name] = {
                        "rank": rank,
                        "step": event.get("step"),
                        "value": value,
                        "t": event.get("t"),
                    }
        return found

    # -- stalls --------------------------------------------------------------------------
    def stalled(self, now: float | None = None) -> list[dict[str, Any]]:
        """The ranks stalled now (see the module's docstring), each with its stack; and the
        ranks whose GPU has idled for the timeout while another's works (``gpu_idle``)."""
        now = time.time() if now is None else now
        found = self._with_idle_gpus(self._by_progress(now), now) if self.stall_timeout > 0 else []
        try:
            self.collectives.poll(bool(found), self.current_records(), now)
        except OSError as exc:  # the run folder cannot take a request: the stall stands
            found = [{**entry, "collectives": f"no dumps: {exc}"} for entry in found]
        return found

    def _with_idle_gpus(self, out: list[dict[str, Any]], now: float) -> list[dict[str, Any]]:
        idle = self.gpus.idle_ranks(now, self.stall_timeout)
        if not idle:
            return out
        records = {
            r: rec
            for r, rec in self.current_records().items()
            if rec.get("exit_code") is None and not rec.get("exited")
        }
        for entry in out:
            if entry["rank"] in idle:
                entry["gpu_idle"] = idle[entry["rank"]]
        extra = sorted(r for r in idle if r in records and r not in {e["rank"] for e in out})
        if not extra:
            return out
        attempt = max(rec.get("attempt", 0) for rec in records.values())
        missing = {r: records[r] for r in extra if (attempt, r) not in self.stacks}
        for rank, stack in self.read_stacks(missing).items() if missing else ():
            self.stacks[(attempt, rank)] = stack
        heard = beats(self.paths.events)
        for rank in extra:
            out.append(
                {
                    "rank": rank,
                    "seconds": round(now - idle[rank]["since"], 1),
                    "since": idle[rank]["since"],
                    "last_step": _last_step(heard.get(rank) or {}),
                    "host": records[rank].get("host"),
                    "stack": self.stacks.get((attempt, rank)),
                    "waiting": False,
                    "gpu_idle": idle[rank],
                    **self._where(self.stacks.get((attempt, rank)), records[rank]),
                }
            )
        return sorted(out, key=lambda entry: entry["rank"])

    def _by_progress(self, now: float) -> list[dict[str, Any]]:
        """The ranks stalled because they log no progress (the module's docstring)."""
        records = {
            r: rec
            for r, rec in self.current_records().items()
            if rec.get("exit_code") is None and not rec.get("exited")
        }
        if not records:
            return []
        heard = beats(self.paths.events)
        logged: dict[int, tuple[float, Any]] = {}  # rank -> (last progress, last step)
        for rank, record in records.items():
            beat = heard.get(rank) or {}
            if beat.get("attempt", 0) == record.get("attempt", 0) and beat.get("progress"):
                logged[rank] = (now - _quiet_for(beat, now), _last_step(beat))
        if not logged:
            return []
        behind = {r for r, (t, _) in logged.items() if now - t >= self.stall_timeout}
        if not behind:
            return []
        if behind != set(logged):
            suspects = behind
        else:
            low = min(_step_key(step) for _, step in logged.values())
            suspects = {r for r, (_, step) in logged.items() if _step_key(step) == low}
            suspects |= set(records) - set(logged)
        attempt = max(rec.get("attempt", 0) for rec in records.values())
        missing = {r: records[r] for r in suspects if (attempt, r) not in self.stacks}
        if missing:
            for rank, stack in self.read_stacks(missing).items():
                self.stacks[(attempt, rank)] = stack
        waiting = {
            r
            for r in suspects
            if waits_for_peers(self.stacks.get((attempt, r), ""), records[r].get("pid"))
        }
        named = (suspects - waiting) or self._waited_for(records, suspects, attempt) or suspects
        last_progress = max(t for t, _ in logged.values())
        out = []
        for rank in sorted(named):
            since, step = logged.get(rank, (last_progress, None))
            out.append(
                {
                    "rank": rank,
                    "seconds": round(now - since, 1),
                    "since": since,
                    "last_step": step,
                    "host": records[rank].get("host"),
                    "stack": self.stacks.get((attempt, rank)),
                    "waiting": rank in waiting,
                    **self._where(self.stacks.get((attempt, rank)), records[rank]),
                }
            )
        return out

    def _where(self, stack: str | None, record: dict[str, Any]) -> dict[str, Any]:
        """``frame``: where the rank is in the user's own code (``stack_text.user_frame``)."""
        frame = user_frame(stack, record.get("pid"), self._code_files())
        return {"frame": frame} if frame else {}

    def _code_files(self) -> list[str]:
        if self.code_files is None:
            self.code_files = snapshot_files(self.paths.code)
        return self.code_files

    def _waited_for(
        self, records: dict[int, dict[str, Any]], suspects: set[int], attempt: int
    ) -> set[int]:
        """Every suspect waits on its peers: the ranks they wait for are the live ranks whose
        stacks are elsewhere, even those not yet quiet for the whole timeout (a waiting rank
        whose last event was a little older crosses it first). Their stacks are read now."""
        others = {r: rec for r, rec in records.items() if r not in suspects}
        if not others:
            return set()
        found = set()
        for rank, stack in self.read_stacks(others).items():
            frames = main_thread_frames(stack, records[rank].get("pid"))
            if frames and not _WAITING.search(frames[0][1]):
                self.stacks[(attempt, rank)] = stack
                found.add(rank)
        return found

    def forget_stacks(self, ranks: set[int]) -> None:
        """Ranks that progress again get a fresh stack at their next stall."""
        self.stacks = {key: text for key, text in self.stacks.items() if key[1] not in ranks}


def waits_for_peers(stack: str, pid: Any) -> bool:
    """True when the main thread's top Python frame in ``stack`` (``py-spy dump``'s text) is
    a collective or other wait on the run's peers."""
    frames = main_thread_frames(stack, pid)
    return bool(frames) and bool(_WAITING.search(frames[0][1]))


def _quiet_for(beat: dict[str, Any], now: float) -> float:
    """How long the rank has logged nothing: from its last event to its last heartbeat on the
    node's clock, plus the heartbeat's age on this machine's, so that a node whose clock is
    off does not shift it."""
    progress = float(beat["progress"])
    on_node = max(0.0, float(beat.get("beat") or progress) - progress)
    return on_node + max(0.0, now - float(beat.get("seen") or now))


def _last_step(beat: dict[str, Any]) -> Any:
    step = beat.get("step")
    return step if step is not None else beat.get("done")


def _step_key(step: Any) -> float:
    return float(step) if isinstance(step, (int, float)) and math.isfinite(step) else -math.inf
