"""What the supervisor does when a run is preempted (``jupyter-trainer preempt RUN``,
``Run.preempt``, a spot-termination notice through either): what a scheduler does.

1. announce the preemption to every rank: SIGUSR1 (``rankside/rank/preemption.py``), which
   makes ``jt.preempted()`` true; the ranks save a checkpoint and return;
2. wait up to the grace period for the launcher to end;
3. end what is left of the attempt (SIGTERM, then SIGKILL), as a scheduler does;
4. record the attempt as ``preempted`` in ``state["preemptions"]``, with the step of the
   newest complete checkpoint it left, and start the next attempt, which resumes from it
   (``jt.checkpoint.load``), while the run's preemptions stay within its limit.

A mixin of ``Supervisor`` (run.py), like ``QueueFollowing``.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import replace
from typing import Any

from ..core.records import StateRecord
from ..rankside.host import procs
from ..rankside.rank import dcp_complete
from ..store import Store
from ..store.preemption import take_request
from ..store.records import RunPaths
from ..targets import Target

MAX_PREEMPTIONS = 3  # a target's ``max_preemptions`` in targets.toml overrides it
POLL_S = 0.05
END_GRACE_S = 3.0  # SIGTERM -> SIGKILL for what is left after the grace period


class Preempting:
    state: StateRecord
    store: Store
    run_id: str
    paths: RunPaths
    target: Target | None
    relaunches: int
    started: tuple[Any, Any] | None

    def save(self) -> None:
        raise NotImplementedError

    def cancel_reason(self) -> str | None:
        raise NotImplementedError

    def _reserved(self) -> tuple[Target, dict[str, Any]]:
        raise NotImplementedError

    def _start(self, command: Any) -> None:
        raise NotImplementedError

    def _preempt_requested(self) -> dict[str, Any] | None:
        """A preemption asked for (``preempt.request``), or one the scheduler made itself:
        a job it requeues itself that went back to its queue after the ranks had run."""
        asked = take_request(self.paths.root)
        if asked is not None:
            return asked
        target, handle = self._reserved()
        if not getattr(target, "requeues_itself", False) or self.state["status"] != "running":
            return None
        if target.phase(handle).get("stage") != "queued":
            return None
        records = self.store.rank_records(self.run_id)
        if not any(r.get("attempt", 0) == self.relaunches for r in records.values()):
            return None  # this attempt's ranks have not run yet: it still waits for them
        return {"requested": time.time(), "grace": 0.0, "reason": "preempted by the scheduler"}

    def _preempt(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Preempt the current attempt (announce, wait, end, record) and start the next;
        the run's outcome when it ends here instead (canceled meanwhile, or preempted more
        often than its limit allows), else None."""
        target, handle = self._reserved()
        records = self.store.rank_records(self.run_id)
        entry: dict[str, Any] = {
            "status": "preempted",
            "attempt": self.relaunches,
            "requested": request["requested"],
            "reason": request["reason"],
            "grace": request["grace"],
        }
        itself = bool(getattr(target, "requeues_itself", False))
        if request["reason"] != "preempted by the scheduler":
            announced, missed = announce(target, handle, self.run_id, records)
            entry["announced"] = time.time()
            entry["announced_ranks"] = announced
            if missed:
                entry["not_announced"] = missed
        preemptions = self.state.setdefault("preemptions", [])
        preemptions.append(entry)
        self.save()
        ended = self._attempt_ended(target, handle, request["grace"], itself)
        target.sync(handle)
        entry["ranks_ended"] = time.time() if ended else None
        entry["killed"] = not ended
        if itself and not ended:
            target.requeue(handle)  # type: ignore[attr-defined]
        elif not itself:
            target.end_attempt(handle, self.run_id, END_GRACE_S)
            target.sync(handle)
        entry["ended"] = time.time()
        entry.update(checkpoint_left(str(self.paths.root)))
        if self.cancel_reason():
            self.save()
            return {}
        limit = max_preemptions(target)
        if len(preemptions) > limit:
            self.save()
            return {
                "error": f"the run was preempted {len(preemptions)} times, more than its "
                f"limit of {limit}; raise max_preemptions of target {target.name} in "
                "targets.toml, or resume it with `jupyter-trainer resume RUN`"
            }
        if itself:  # the scheduler runs the same job again as the next attempt
            self.relaunches += 1
            entry.update(resumed_attempt=self.relaunches, resumed_step=entry.get("step"))
            entry["requeued"] = time.time()
            self.save()
        else:
            self._next_attempt(entry)
        return None

    def _attempt_ended(
        self, target: Target, handle: dict[str, Any], grace: float, itself: bool
    ) -> bool:
        """Whether the attempt ended within ``grace``: its launcher exited, or, for a job
        the scheduler requeues itself, the job went back to the queue."""
        deadline = time.monotonic() + grace
        while True:
            if target.poll(handle) is not None:
                return True
            if itself and target.phase(handle).get("stage") == "queued":
                return True
            if time.monotonic() >= deadline or self.cancel_reason():
                return False
            time.sleep(POLL_S)

    def _next_attempt(self, entry: dict[str, Any]) -> None:
        target, _ = self._reserved()
        if self.started is None:
            raise RuntimeError("the run was not started, so it cannot start again")
        self.relaunches += 1
        spec, plan = self.started
        plan = replace(plan, extra_env={**plan.extra_env, "JT_ATTEMPT": str(self.relaunches)})
        entry["resumed_attempt"] = self.relaunches
        entry["resumed_step"] = entry.get("step")
        entry["requeued"] = time.time()
        self.save()
        self._start(target.command(spec, plan))


def max_preemptions(target: Target) -> int:
    found = target.config.get("max_preemptions", MAX_PREEMPTIONS)
    return found if isinstance(found, int) and not isinstance(found, bool) else MAX_PREEMPTIONS


def announce(
    target: Target, handle: dict[str, Any], run_id: str, records: dict[int, dict[str, Any]]
) -> tuple[list[int], dict[str, str]]:
    """SIGUSR1 to every rank of the current attempt: the ranks told, and why the others were
    not. A target whose ranks run elsewhere signals them itself (``signal_ranks``); on this
    host a rank's recorded pid is signalled only while it is a process of the run."""
    own = getattr(target, "signal_ranks", None)
    if callable(own):
        signalled = own(handle, records, signal.SIGUSR1)
        return list(signalled[0]), dict(signalled[1])
    here = socket.gethostname()
    ours = set(procs.pids_with_env("JT_RUN_ID", run_id))
    told = []
    missed = {}
    for rank, record in sorted(records.items()):
        pid, host = record.get("pid"), record.get("host")
        if record.get("exited") or record.get("ended"):
            missed[str(rank)] = "it had already ended"
        elif host not in (None, here):
            missed[str(rank)] = f"it runs on {host}, which target {target.name} cannot signal"
        elif not isinstance(pid, int) or pid not in ours:
            missed[str(rank)] = "its process is not one of the run's"
        else:
            try:
                os.kill(pid, signal.SIGUSR1)
                told.append(rank)
            except OSError as exc:
                missed[str(rank)] = exc.strerror or str(exc)
    return told, missed


def checkpoint_left(run_dir: str) -> dict[str, Any]:
    """The newest complete sharded checkpoint in the run's folder: its ``step`` and when it
    became complete (``checkpoint_done``, its last done file's time)."""
    found = dcp_complete.newest_in(run_dir)
    if found is None:
        return {"step": None}
    step, folder = found
    times = []
    for name in os.listdir(folder):
        if name.startswith("done."):
            try:
                times.append(os.stat(os.path.join(folder, name)).st_mtime)
            except OSError:
                pass
    return {"step": step, "checkpoint_done": max(times, default=None)}
