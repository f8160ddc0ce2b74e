"""The Slurm target: one batch job per run, submitted with ``sbatch``, followed with
``squeue`` (backing off while queued), finished from ``sacct`` or ``scontrol``, ended with
``scancel``.

Without ``login`` or ``workdir`` the run store is on a filesystem the compute nodes share
with this machine, so ranks write their logs and events straight into it and every reader
sees them live. With either, the run folder is on the cluster under ``workdir``
(stage.py stages it and copies it back live), and with ``login`` every Slurm command
runs over ssh on that node, through the node layer's ssh client (queue.py, which also reads
what Slurm says of a job). With ``hold``, a hot run is instead two steps of an allocation
kept between runs (hold.py).
"""

from __future__ import annotations

import os
import posixpath
import shlex
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...launchers.table import Command, LaunchPlan
from ...nodes.hotstart.local import pools_home
from ...nodes.stage_inputs import DATA_STAGED_ENV, NodeCache, rsync_shell, stage_inputs
from ...rankside.host import procs
from ...rankside.host.home import default_home
from ...rankside.hotstart.records import leftover_pids
from ...rankside.rank import run_secrets
from ..base import (
    BuiltEnvironment,
    Handle,
    Target,
    checkpoint_blobs,
    refuse_ranks_beyond_gpus,
    relay_command,
    require_program,
)
from .hold import ALIVE, HeldRun
from .preemption import SlurmPreemption
from .queue import FINAL, QUEUED, SCHEDULER_FAILURES, SlurmCommands, final_state
from .script import SlurmConfig, batch_script, parse_job_id, sbatch_argv
from .stage import JOB_OUTPUT, ClusterFolder

RUNNING_POLL_S = 0.5
QUEUED_POLL_S = (0.25, 5.0)  # first and longest interval while the job waits


def rendezvous_port(run_id: str) -> int:
    """The run's rendezvous port, from its id: below Linux's ephemeral ports (32768 and up),
    which outgoing connections take."""
    return 20000 + zlib.crc32(run_id.encode()) % 12000


class SlurmTarget(SlurmPreemption, Target):
    kind = "slurm"
    queues = True

    @property
    def runs_images(self) -> bool:  # type: ignore[override]
        return self.cfg.container == "pyxis"

    @property
    def holds(self) -> bool:
        """Hot runs go to an allocation kept between runs (``hold``; see hold.py)."""
        return bool(self.cfg.hold)

    @property
    def shares_filesystem(self) -> bool:  # type: ignore[override]
        return not self.cfg.remote

    def __init__(self, name: str, config: dict[str, Any] | None = None) -> None:
        super().__init__(name, config)
        self.cfg = SlurmConfig.from_config(name, self.config)
        self._script: str | None = None
        self._seen: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._queued_interval = QUEUED_POLL_S[0]
        self.slurm = SlurmCommands(self.cfg)
        self._folder: ClusterFolder | None = None
        self._left: list[str] = []
        self._tested: list[str] = []  # what sbatch --test-only said of a dry run's job
        self._held: HeldRun | None = None  # a hot run, in an allocation held between runs
        self._pending: tuple[Command, str, str] | None = None  # ... until the allocation runs

    def gpus_per_node(self) -> int:
        return self.cfg.gpus_per_node

    # -- submit side -------------------------------------------------------------------
    def check(self, spec: RunSpec) -> None:
        refuse_ranks_beyond_gpus(self, spec.launch, "each node has (gpus_per_node)")
        if self.cfg.login:
            require_program(
                "ssh",
                "install the OpenSSH client (apt-get install "
                "openssh-client) to reach the login node",
            )
        else:
            require_program(
                "sbatch",
                "install the Slurm client commands (apt-get install "
                'slurm-client) on this machine, or set login = "HOST" '
                "to run them on a login node over ssh",
            )
        image = getattr(spec.env, "image", None)
        if image and self.cfg.container != "pyxis":
            raise TargetError(
                f"target {self.name!r} cannot run container image {image!r}: set "
                'container = "pyxis" if its srun has --container-image'
            )

    # -- supervisor side ---------------------------------------------------------------
    def plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        python = self._python(spec)
        if self.cfg.remote:
            self._folder = ClusterFolder(
                self.slurm.shell(),
                python,
                self.cfg.workdir or "~/jupyter_trainer",
                run_dir,
                tools=["sbatch", "squeue", "scancel"] if self.cfg.login else [],
                timeout=self.cfg.connect_timeout,
                env_timeout=self.cfg.env_timeout,
                uv=self.cfg.uv,
                lost_after=max(30, 3 * self.cfg.connect_timeout),
            )
            self._folder.check_cluster(spec, run_id)
            run_dir = self._folder.run_dir
        return self._plan_in(spec, run_id, run_dir, backend, python)

    def dry_plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        """``plan``; on a cluster with its own run folders (``login``/``workdir``), the
        folder the run would get there, without the cluster's pre-flight (which makes it).
        The login node's connection ends with the dry run (no ControlMaster is kept)."""
        if self.cfg.login:
            self.slurm.keep_no_master()
        if self.cfg.remote:
            run_dir = posixpath.join(self.cfg.workdir or "~/jupyter_trainer", "runs", run_id)
        return self._plan_in(spec, run_id, run_dir, backend, self._python(spec))

    def _python(self, spec: RunSpec) -> str:
        if spec.env.name is not None and not self.cfg.remote:
            return spec.env.python or sys.executable  # built in the (shared) run store
        return self.cfg.python or spec.env.python or sys.executable

    def _plan_in(
        self, spec: RunSpec, run_id: str, run_dir: str, backend: str, python: str
    ) -> LaunchPlan:
        return LaunchPlan(
            run_id=run_id,
            run_dir=run_dir,
            python=python,
            boot=posixpath.join(run_dir, "code", "_jt", "boot.py"),
            entry=spec.code.entry,
            args=spec.code.args,
            backend=backend,
            backend_forced=spec.launch.backend is not None,
            master_addr="",
            master_port=rendezvous_port(run_id),
            run_as_root=os.geteuid() == 0,
            oversubscribe=False,
            extra_env={
                **self.cfg.env,
                **({DATA_STAGED_ENV: "1"} if spec.data and self.cfg.remote else {}),
            },
        )

    def build_environment(self, spec: RunSpec, plan: LaunchPlan) -> BuiltEnvironment | None:
        if self._folder is None or spec.env.name is None:
            return None  # built in the run store, which the compute nodes share
        return self._folder.realise(spec)

    def stage(self, spec: RunSpec, plan: LaunchPlan, run_dir: str) -> None:
        if self._folder is not None:
            self._folder.send(spec)
            if spec.data:  # once, into <workdir>/data on the cluster's shared filesystem
                cache = NodeCache(
                    self._folder.shell,
                    posixpath.join(self._folder.info["workdir"], "data"),
                    self._folder.python,
                    rsync_shell(self._folder.shell),
                )
                self._folder.staged["data"] = stage_inputs(
                    [cache], spec.data, default_home(), self.on_staging, self._folder.files.log
                )["data"]

    def command(self, spec: RunSpec, plan: LaunchPlan) -> Command:
        """The run's own sbatch; a hot run (``hold`` set) starts in the held allocation
        instead, and only falls back to this (see ``slurm_hold``)."""
        self._script = batch_script(self.cfg, spec, plan, getattr(spec.env, "image", None))
        if spec.launch.hot and self.cfg.hold:
            self._held = HeldRun(  # the allocation and its pools are this user's own
                self.cfg, self.name, spec, plan, str(pools_home()), self.slurm.run
            )
        output = JOB_OUTPUT if self.cfg.remote else "logs/launcher.log"
        return Command(
            tuple(sbatch_argv(self.cfg, spec, plan, f"{plan.run_dir}/job.sbatch", output))
        )

    def dry_run(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> str:
        """The sbatch command and the batch script it would submit, once ``sbatch
        --test-only`` has checked the job against the cluster (partition, nodes, GPUs, time
        limit) without submitting it; a job the cluster refuses raises ``TargetError``."""
        if self._held is not None:
            return self._held.dry_run()
        argv = [
            a
            for a in command.argv[:-1]
            if a != "--parsable" and not a.startswith(("--output=", "--chdir="))
        ]
        done = self.slurm.run([*argv, "--test-only"], timeout=60, input=self._script or "")
        answer = (done.stderr.strip() or done.stdout.strip()).splitlines()
        if done.returncode != 0:
            raise TargetError(
                f"sbatch --test-only refused the job on target {self.name!r}: "
                + " ".join(answer)[-800:]
            )
        self._tested = [
            f"sbatch --test-only: {line.removeprefix('sbatch: ')}" for line in answer[-1:]
        ]
        script_path = command.argv[-1]
        return (
            f"# sbatch (its job script, {script_path}, follows)\n"
            f"{shlex.join(command.argv)}\n# {script_path}:\n{self._script or ''}"
        )

    def dry_run_parts(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> dict[str, Any]:
        if self._held is not None:
            return self._held.dry_run_parts()
        return {"script": self._script, "notes": self._tested}

    def start(self, command: Command, run_dir: str, log_path: str) -> Handle:
        if self._held is None:
            return self._submit(command, run_dir)
        handle: Handle = {"hold_job": self._held.allocation()}
        self._pending = (command, run_dir, log_path)
        state = self._held.queue_state(handle["hold_job"]) or {}
        if state.get("state") == "RUNNING":
            self._start_held(handle)
        else:
            handle["waiting"] = True
        return handle

    def _start_held(self, handle: Handle) -> None:
        """Warm every node's pool, then fork the ranks from them; torchrun in the same
        allocation when a node's pool cannot serve the run."""
        assert self._held is not None and self._pending is not None
        handle.pop("waiting", None)
        hot = self._held.warm(handle["hold_job"])
        handle.update(self._held.start(handle["hold_job"], self._pending[2], hot["used"]), hot=hot)

    def _submit(self, command: Command, run_dir: str) -> Handle:
        script = Path(run_dir, "job.sbatch")
        script.write_text(self._script or "")
        handle: Handle = {"script": str(script)}
        if self._folder is not None:
            self._folder.open(
                {
                    "spec.json": Path(run_dir, "spec.json").read_text(),
                    "job.sbatch": self._script or "",
                    **run_secrets.files(run_dir),  # the secret params and variables, 0600
                },
                checkpoint_blobs(run_dir),
            )
            handle.update(
                run_dir_remote=self._folder.run_dir,
                staging=self._folder.staged,
                **({"login": self.cfg.login} if self.cfg.login else {}),
            )
        try:
            done = self.slurm.run(list(command.argv), timeout=60)
            if done.returncode != 0:
                raise TargetError(
                    f"sbatch refused the job: {done.stderr.strip() or done.stdout.strip()}"
                )
            job = parse_job_id(done.stdout)
        except TargetError:
            if self._folder is not None:  # nothing will run: stop copying the folder back
                self._finish_folder(self._folder.run_id, 0)
            raise
        return {"job_id": job, **handle}

    def debug_relay(self, handle: Handle | None, record: dict[str, Any]) -> Any:
        """``srun --overlap`` of the relay on the rank's node, one more step of the run's job."""
        job = (handle or {}).get("job_id")
        if not job:
            return super().debug_relay(handle, record)
        node = record.get("slurm_node") or record.get("host")
        argv = ["srun", f"--jobid={job}", "--overlap", "--nodes=1", "--ntasks=1", "--quiet", "-u"]
        argv += [*([f"--nodelist={node}"] if node else []), "sh", "-c", relay_command(record)]
        pipe = subprocess.PIPE
        return subprocess.Popen(argv, stdin=pipe, stdout=pipe, stderr=pipe, start_new_session=True)

    def stacks(self, handle: Handle | None, ranks: dict[int, dict[str, Any]]) -> dict[int, str]:
        """Each rank's stack by ``py-spy dump``, run on the rank's node as one more step of
        the run's job (``srun --overlap``), so it works wherever the node is."""
        job = (handle or {}).get("job_id")
        if not job:
            return super().stacks(handle, ranks)
        found = {}
        for rank, record in ranks.items():
            node, pid = record.get("slurm_node") or record.get("host"), record.get("pid")
            argv = [
                "srun",
                f"--jobid={job}",
                "--overlap",
                "--nodes=1",
                "--ntasks=1",
                "--quiet",
                *([f"--nodelist={node}"] if node else []),
                *procs.py_spy_argv((handle or {}).get("python"), pid),
            ]
            try:
                done = self.slurm.run(argv, timeout=60)
            except (TargetError, subprocess.TimeoutExpired) as exc:
                found[rank] = f"(no stack: {exc})"
                continue
            found[rank] = (
                done.stdout
                if done.returncode == 0
                else f"(no stack: {' '.join(argv[:6])} ... failed: "
                f"{(done.stderr or done.stdout).strip()[-400:]})"
            )
        return found

    def sync(self, handle: Handle) -> None:
        if self._folder is not None:
            self._folder.pump()

    def _status(self, handle: Handle) -> dict[str, Any] | None:
        """The queue entry, asked at most every half second (backing off while queued)."""
        job = handle["job_id"]
        asked, entry = self._seen.get(job, (0.0, {}))
        queued = entry is not None and entry.get("state") in QUEUED
        interval = self._queued_interval if queued else RUNNING_POLL_S
        if entry is not None and time.monotonic() - asked >= interval:
            entry = self.slurm.queue_entry(job)
            self._seen[job] = (time.monotonic(), entry)
            if queued:
                self._queued_interval = min(QUEUED_POLL_S[1], self._queued_interval * 1.5)
        return entry

    def poll(self, handle: Handle) -> int | None:
        if self._held is not None and "job_id" not in handle:
            if handle.get("waiting"):
                state = self._held.queue_state(handle["hold_job"]) or {}
                if state.get("state") not in ALIVE:
                    handle["error"] = (
                        f"the held allocation (job {handle['hold_job']}) ended "
                        f"before the run started: {state or 'gone'}"
                    )
                    return 1
                if state["state"] == "RUNNING":
                    self._start_held(handle)
                return None
            return self._held.poll()
        entry = self._status(handle)
        if entry is not None and entry.get("state") not in FINAL:
            return None
        if self.requeues_itself and self._requeued(handle):
            return None
        return self.report(handle).get("exit_code", 1)

    def phase(self, handle: Handle) -> dict[str, Any]:
        if self._held is not None and "job_id" not in handle:
            if handle.get("waiting"):
                self.poll(handle)
            waiting = bool(handle.get("waiting"))
            state = (self._held.queue_state(handle["hold_job"]) or {}) if waiting else {}
            return {
                "stage": "queued" if waiting else "running",
                "job_id": handle["hold_job"],
                "held": True,
                **state,
            }
        entry = self._status(handle) or {}
        stage = "queued" if entry.get("state") in QUEUED else "running"
        expected: dict[str, Any] = {
            key: entry[key]
            for key in ("start", "start_at", "position", "pending", "partition")
            if stage == "queued" and key in entry
        }
        return {
            "stage": stage,
            "job_id": handle["job_id"],
            "state": entry.get("state"),
            "reason": entry.get("reason"),
            "nodes": entry.get("nodes"),
            **expected,
        }

    def report(self, handle: Handle) -> dict[str, Any]:
        if "job_id" not in handle:  # a step of the held allocation
            code = self._held.poll() if self._held is not None else None
            return {
                "exit_code": 1 if code is None else code,
                **({"error": handle["error"]} if handle.get("error") else {}),
            }
        final = final_state(handle["job_id"], self.slurm.run)
        error = SCHEDULER_FAILURES.get(final.get("state", ""))
        return {**final, **({"error": error} if error else {})}

    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        if self._held is not None and "job_id" not in handle:
            return {} if handle.get("waiting") else self._held.stop(grace)
        job = handle.get("job_id")
        if job is None:  # sbatch never answered: nothing in the queue to end
            return self._finish_folder(run_id, grace)
        self.slurm.run(["scancel", job])
        deadline = time.monotonic() + grace + 15  # Slurm's KillWait, then SIGKILL
        while time.monotonic() < deadline:
            steps = self.slurm.run(["squeue", "-h", "-s", "-j", job]).stdout.strip()
            if self.slurm.queue_entry(job) is None and not steps:
                break
            time.sleep(0.2)
        left = procs.pids_with_env("JT_RUN_ID", run_id)
        if left:  # tasks on this host that outlived their step
            procs.signal_pids(left, signal.SIGKILL)
        self._seen[job] = (time.monotonic(), None)
        return {
            "scancel": job,
            "sigkilled": [procs.describe(p) for p in left],
            **self._finish_folder(run_id, grace),
        }

    def _finish_folder(self, run_id: str, grace: float) -> dict[str, Any]:
        """The cluster folder's last bytes, outputs and leftovers (once the job is gone)."""
        if self._folder is None:
            return {}
        try:
            ended = self._folder.finish(run_id, grace)
        except TargetError as exc:
            self._left = [f"{self._folder.label}: not verified: {exc}"]
            return {"folder": {"error": str(exc)}}
        self._left = [f"{self._folder.label}: {p}" for p in ended["leftovers"]]
        return {"folder": {"host": self._folder.label, "sigkilled": ended["sigkilled"]}}

    def collect(self, handle: Handle) -> dict[str, Any]:
        return self._folder.report() if self._folder is not None else {}

    def snapshot_hashes(self, handle: Handle) -> dict[str, str | None]:
        return self._folder.snapshot_hashes() if self._folder is not None else {}

    def discard_workdirs(self, handle: Handle | None, run_dir: str) -> dict[str, Any]:
        if self._folder is None or handle is None:
            return super().discard_workdirs(handle, run_dir)
        try:
            return self._folder.discard_all()
        except TargetError as exc:
            return {"removed": [], "errors": [str(exc)]}

    def leftovers(self, run_id: str) -> list[str]:
        # Ranks forked by a held allocation's pool carry no JT_RUN_ID: their record names them.
        pids = leftover_pids(run_id, self._held.plan.run_dir if self._held else None)
        found = [procs.describe(p) for p in pids] + self._left
        self._left = []
        for job, (_, entry) in self._seen.items():
            if entry is not None and self.slurm.queue_entry(job) is not None:
                found.append(f"slurm job {job} still in the queue")
        return found
