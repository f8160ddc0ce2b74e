"""How the Slurm target talks to Slurm: its commands (``sbatch``, ``squeue``, ``sacct``,
``scontrol``, ``scancel``) run here or, with ``login``, over ssh on the login node
(``SlurmCommands``), and what their answers say of a job: its line in the queue, and its
final state and exit code (``final_state``), with the failures that are the scheduler's.
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...core.errors import TargetError
from ...nodes.ssh import SshClient, control_dir, user_config_file
from ...nodes.transport import LocalShell, NodeShell
from ...rankside.host.home import default_home
from .script import SlurmConfig

# A Slurm command's runner: argv -> its completed process, with text stdout and stderr.
SlurmRun = Callable[[list[str]], "subprocess.CompletedProcess[str]"]

QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SUSPENDED"}
# Final states whose cause is the scheduler, not the training code: each becomes the error.
SCHEDULER_FAILURES = {
    "TIMEOUT": "Slurm ended the job at its time limit (TIMEOUT); raise `time` in the target",
    "OUT_OF_MEMORY": "Slurm ended the job: a task ran out of memory (OUT_OF_MEMORY)",
    "NODE_FAIL": "Slurm ended the job: a node failed (NODE_FAIL)",
    "BOOT_FAIL": "Slurm could not boot a node for the job (BOOT_FAIL)",
    "DEADLINE": "Slurm ended the job at its deadline (DEADLINE)",
    "PREEMPTED": "Slurm preempted the job (PREEMPTED); with preemption = SECONDS in the "
    "target, Slurm requeues a preempted job and the run resumes from its newest checkpoint",
}
# States a job cannot leave: only these end the wait for accounting to catch up.
FINAL = {"COMPLETED", "FAILED", "CANCELLED", *SCHEDULER_FAILURES}
# slurmctld sends a job's end to slurmdbd asynchronously: for a moment after the job has left
# the queue, sacct can still say PENDING or RUNNING with exit code 0:0.
SACCT_LAG_S = 5.0


def run_here(
    argv: list[str], timeout: float = 30.0, input: str | None = None
) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)
    except subprocess.TimeoutExpired as exc:
        raise TargetError(
            f"{argv[0]} did not answer within {timeout:.0f} s; is slurmctld up?"
        ) from exc


class SlurmCommands:
    """Slurm's commands for one target: here, or over ssh on its ``login`` node through the
    node layer's client (ControlMaster, BatchMode)."""

    def __init__(self, cfg: SlurmConfig) -> None:
        self.cfg = cfg
        self._login: SshClient | None = None

    def _login_client(self, login: str) -> SshClient:
        if self._login is None:
            self._login = SshClient(
                login,
                str(control_dir(default_home())),
                self.cfg.ssh_options,
                self.cfg.ssh_config or user_config_file(),
                self.cfg.connect_timeout,
            )
        return self._login

    def shell(self) -> NodeShell:
        """Where the cluster's run folders are reached: the login node, else this machine."""
        return self._login_client(self.cfg.login) if self.cfg.login else LocalShell()

    def keep_no_master(self) -> None:
        """No ControlMaster to the login node outlives this process (a dry run)."""
        if self.cfg.login:
            self._login = replace(self._login_client(self.cfg.login), persist=0)

    def run(
        self, argv: list[str], timeout: float = 30.0, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        if not self.cfg.login:
            return run_here(argv, timeout, input)
        env = [f"{k}={v}" for k, v in sorted(self.cfg.login_env.items())]
        done = self._login_client(self.cfg.login).run(
            shlex.join(["env", *env, *argv] if env else argv),
            input=None if input is None else input.encode(),
            timeout=timeout,
            what=argv[0],
        )
        if done.returncode == 255:
            raise TargetError(
                f"login node {self.cfg.login}: {argv[0]} could not be run over "
                f"ssh: {done.stderr.decode(errors='replace').strip()[-600:]}"
            )
        return subprocess.CompletedProcess(
            done.args,
            done.returncode,
            done.stdout.decode(errors="replace"),
            done.stderr.decode(errors="replace"),
        )

    def queue_entry(self, job_id: str) -> dict[str, Any] | None:
        """The job's line in ``squeue``, or None once it has left the queue. A pending job's
        also says when Slurm expects to start it (``start``, ISO, and ``start_at``, epoch
        seconds; what ``squeue --start`` shows, set by the backfill scheduler) and where it
        stands among the pending jobs of its partition, by priority (``position`` of
        ``pending``)."""
        out = self.run(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N|%M|%S|%P"])
        if out.returncode != 0 and "Invalid job id" not in out.stderr:
            raise TargetError(f"squeue failed: {out.stderr.strip()}")
        line = out.stdout.strip()
        if not line:
            return None
        state, reason, nodes, elapsed, start, partition = (line.split("|") + [""] * 5)[:6]
        entry: dict[str, Any] = {
            "state": state,
            "reason": reason,
            "nodes": nodes,
            "elapsed": elapsed,
        }
        if state == "PENDING":
            entry.update(partition=partition, **expected_start(start))
            entry.update(self.queue_position(job_id, partition))
        return entry

    def queue_position(self, job_id: str, partition: str) -> dict[str, int]:
        """Where the job stands among the pending jobs of ``partition``, highest priority
        first: ``position`` (1 is next) of ``pending``; {} when squeue cannot say."""
        if not partition:
            return {}
        out = self.run(
            ["squeue", "-h", "-t", "PENDING", "-p", partition, "-o", "%i", "--sort=-p,i"]
        )
        jobs = out.stdout.split() if out.returncode == 0 else []
        if job_id not in jobs:
            return {}
        return {"position": jobs.index(job_id) + 1, "pending": len(jobs)}


def expected_start(text: str) -> dict[str, Any]:
    """squeue's ``%S`` of a pending job (``2026-11-27T13:05:00``, in the cluster's local
    time) as ``start`` and ``start_at``; {} while Slurm has no estimate (``N/A``)."""
    try:
        at = time.mktime(time.strptime(text.strip(), "%Y-%m-%dT%H:%M:%S"))
    except ValueError:
        return {}
    return {"start": text.strip(), "start_at": at}


def final_state(job_id: str, run: SlurmRun = run_here) -> dict[str, Any]:
    """Final state and exit code: from ``sacct`` when accounting runs, else ``scontrol``.

    sacct's record lags the job's end by a moment, so one that is not final yet is asked
    again for up to SACCT_LAG_S before ``scontrol`` (kept MinJobAge seconds) answers instead.
    """
    deadline = time.monotonic() + SACCT_LAG_S
    while True:
        acct = run(["sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode"])
        line = (
            acct.stdout.strip().splitlines()[0]
            if acct.returncode == 0 and acct.stdout.strip()
            else ""
        )
        final = "|" in line and (line.split("|")[0].split() or [""])[0] in FINAL
        if final or "|" not in line or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if final:
        state, code = line.split("|")[:2]
        source = "sacct"
    else:
        show = run(["scontrol", "show", "job", "-o", job_id])
        fields = dict(f.split("=", 1) for f in show.stdout.split() if "=" in f)
        state, code, source = fields.get("JobState", ""), fields.get("ExitCode", ""), "scontrol"
    state = state.split()[0] if state else "UNKNOWN"  # "CANCELLED by 0" -> "CANCELLED"
    exit_code, _, sig = code.partition(":")
    result: dict[str, Any] = {"job_id": job_id, "state": state, "source": source}
    if exit_code.isdigit():
        result["exit_code"] = int(exit_code) or (
            128 + int(sig) if sig.isdigit() and int(sig) else 0
        )
        if state != "COMPLETED" and result["exit_code"] == 0:
            result["exit_code"] = 1
    return result
