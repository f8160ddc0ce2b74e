"""How the supervisor follows a run that waits for its scheduler (Slurm's queue, Kueue, Ray's
placement): ``queued`` with the scheduler's own words, until the job runs. A mixin of
``Supervisor`` (run.py), which provides the state, the target and ``transition``."""

from __future__ import annotations

import time
from typing import Any

from ..core.records import StateRecord, Status, launcher_record
from ..targets import Target

QUEUE_POLL_S = 0.25  # how often a reservation's phase is asked while the run waits


class QueueFollowing:
    state: StateRecord

    def transition(self, status: Status, fields: StateRecord | None = None) -> None:
        raise NotImplementedError

    def save(self) -> None:
        raise NotImplementedError

    def cancel_reason(self) -> str | None:
        raise NotImplementedError

    def _reserved(self) -> tuple[Target, dict[str, Any]]:
        raise NotImplementedError

    def _wait_for_nodes(self) -> bool:
        """``queued`` with the scheduler's reason until the target's reservation is granted;
        False when the run is canceled first."""
        target, handle = self._reserved()
        self.state["launcher"] = launcher_record(handle)
        phase = target.phase(handle)
        if phase.get("stage") != "running":
            self.transition("queued", {"queue": phase})
        while phase.get("stage") != "running":
            if self.cancel_reason():
                return False
            time.sleep(QUEUE_POLL_S)
            phase = target.phase(handle)
            self._note_queue(phase)
        return True

    def _follow_queue(self) -> None:
        """Record the scheduler's reason while queued; move to running once the job starts."""
        target, handle = self._reserved()
        phase = target.phase(handle)
        if phase.get("stage") == "running":  # the handle may have grown as the run started
            self.state["launcher"].update(launcher_record(handle))
            self.transition("running", {"queue": phase})
        else:
            self._note_queue(phase)

    def _note_queue(self, phase: dict[str, Any]) -> None:
        """Keep the scheduler's latest words on a waiting run in its state."""
        if phase != self.state.get("queue"):
            self.state["queue"] = phase
            self.save()

    def _ran_unseen(self, records: dict[int, dict[str, Any]]) -> None:
        """The launcher ended while the run still showed ``queued``, and its ranks ran: a
        short job the scheduler admitted and finished between two looks. Record that it ran,
        from the first rank's start, so that its stages say so. Asked again once the run is
        ``finalizing``: where the ranks' records come through the pods' logs (Kubernetes),
        they arrive only after the launcher's end was seen."""
        starts = [r["started"] for r in records.values() if isinstance(r.get("started"), float)]
        stages = self.state.setdefault("stages", {})
        if not starts or "queued" not in stages or "running" in stages:
            return
        status = self.state["status"]
        if status == "queued":
            self.transition("running")
        elif status == "finalizing":
            stages["running"] = {"start": 0.0, "end": stages["finalizing"]["start"]}
        else:
            return
        began = max(min(starts), stages["queued"]["start"])
        stages["running"]["start"] = began
        stages["queued"]["end"] = began
        self.state["stages"] = dict(sorted(stages.items(), key=lambda kv: kv[1]["start"]))
