"""Preemption on the Slurm target: a target with ``preemption = SECONDS`` has its jobs
requeued by Slurm (``script.preempt_lines``), so the supervisor follows the same job into its
next attempt; ``jupyter-trainer preempt`` sends the batch shell the signal Slurm would. A
mixin of ``SlurmTarget``."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from ..base import Handle
from .queue import QUEUED, SlurmCommands
from .script import SlurmConfig

REQUEUE_SETTLE_S = 5.0  # how long a requeued job may look ended before it shows PENDING


class SlurmPreemption:
    name: str
    cfg: SlurmConfig
    slurm: SlurmCommands
    _held: Any
    _seen: dict[str, tuple[float, dict[str, Any] | None]]

    @property
    def requeues_itself(self) -> bool:
        """A preempted job is requeued by Slurm (``preemption = SECONDS``): the supervisor
        follows the same job into its next attempt rather than submitting another."""
        return bool(self.cfg.preemption) and self._held is None

    def signal_ranks(
        self, handle: Handle, ranks: dict[int, dict[str, Any]], signum: int
    ) -> tuple[list[int], dict[str, str]]:
        """A preemption's signal to the job's batch shell (``scancel --signal=USR1 --batch``),
        which passes it on to every rank (``script.preempt_lines``)."""
        job = handle.get("job_id")
        if not self.requeues_itself or job is None:
            why = (
                f"target {self.name} has no preemption = SECONDS in targets.toml"
                if job is not None
                else "the run is a step of a held allocation"
            )
            return [], {str(rank): why for rank in ranks}
        name = signal.Signals(signum).name.removeprefix("SIG")
        done = self.slurm.run(["scancel", f"--signal={name}", "--batch", job])
        if done.returncode != 0:
            said = f"scancel failed: {(done.stderr or done.stdout).strip()[-300:]}"
            return [], {str(rank): said for rank in ranks}
        return sorted(ranks), {}

    def requeue(self, handle: Handle) -> None:
        """End the job's attempt and put it back in the queue (``scontrol requeue``)."""
        if handle.get("job_id"):
            self.slurm.run(["scontrol", "requeue", handle["job_id"]])

    def _requeued(self, handle: Handle) -> bool:
        """Whether a job that seems to have ended is on its way back to the queue: while
        Slurm requeues it, it can show a final state for a moment before PENDING. A job
        whose batch shell was told of a preemption (it leaves ``preempted.<restarts>``) and
        that Slurm still let end, when it requeued itself while ending, is requeued here."""
        job = handle["job_id"]
        deadline = time.monotonic() + REQUEUE_SETTLE_S
        while True:
            show = self.slurm.run(["scontrol", "show", "job", "-o", job]).stdout
            fields = dict(f.split("=", 1) for f in show.split() if "=" in f)
            if fields.get("JobState") in QUEUED:
                self._seen.pop(job, None)  # squeue's next answer is asked afresh
                return True
            if time.monotonic() >= deadline:
                break
            time.sleep(0.25)
        if self.cfg.remote or not handle.get("script"):
            return False
        told = [
            p for p in Path(handle["script"]).parent.glob("preempted.*") if p.suffix[1:].isdigit()
        ]
        if not told:
            return False
        for path in told:
            path.rename(path.with_name(f"{path.name}.requeued"))
        self.slurm.run(["scontrol", "requeue", job])
        self._seen.pop(job, None)
        return True
