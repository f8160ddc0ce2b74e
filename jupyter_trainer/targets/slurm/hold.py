"""Hot runs on Slurm: an allocation held between runs (``hold = SECONDS`` in the target).

A Slurm job's processes end with the job, so a pool cannot outlive a run that is a job of its
own. With ``hold`` set, a hot run (torchrun without restarts; see ``api/submission.py``) is
instead a step of an allocation the target keeps for runs of the same shape:

- The allocation is one job, ``jt-hold-<target>``, whose first step runs a keeper on every
  node (``pool/keeper.py``). The pools a run needs are started by the keepers, so they live
  in that step and stay warm after the run. The job ends once no run has used it for
  ``hold`` seconds, at its time limit, or with ``scancel``.
- A run warms every node's pool in one step (``launch.py warm``), then forks its ranks from
  them in a second (``launch.py run``); both are ``srun --jobid=<job> --overlap``, and the
  supervisor follows the second's ``srun`` as it follows torchrun on the local target.
- The first run waits as ``queued``, with the scheduler's reason, while the allocation is
  pending. If a node's pool cannot serve the run, torchrun starts its ranks in the same
  allocation instead, with the reason in ``state["launcher"]["hot"]``.

The run store must be on the cluster's shared filesystem (no ``login`` or ``workdir``).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...launchers.table import LaunchPlan
from ...nodes.hotstart import remote as node_hot
from ...nodes.hotstart.bundle import FOLDER, node_bundle
from ...rankside.host import procs
from ...rankside.hotstart.records import POOLS_DIR, leftover_pids, read_json, write_json
from .script import SlurmConfig, batch_script, parse_job_id

WARM_TIMEOUT_S = 180.0  # a cold pool imports torch on a loaded node
ALIVE = {"PENDING", "CONFIGURING", "RUNNING"}


def hold_name(target: str, spec: RunSpec) -> str:
    """The allocation's name: one per target and shape (nodes x processes)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", target)[:60]
    return f"{safe}-{spec.launch.nodes}x{spec.launch.procs}"


def bundle_dir(home: str) -> Path:
    return Path(home, POOLS_DIR, f"code-{node_bundle()[0]}")


def install_bundle(home: str) -> Path:
    """The pool's files (with the keeper) under ``<home>/pools/code-<hash>``, once."""
    folder, files = bundle_dir(home), node_bundle()[1]
    if folder.is_dir():
        return folder
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
    for path, text in files.items():
        dest = tmp / path.removeprefix(f"{FOLDER}/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text, encoding="utf-8")
    try:
        os.rename(tmp, folder)
    except OSError:  # installed meanwhile by another run
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def holder_script(cfg: SlurmConfig, python: str, code: Path, home: str) -> str:
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "# jupyter_trainer: an allocation held for hot runs; one keeper per node",
                "set -euo pipefail",
                *(f"module load {shlex.quote(m)}" for m in cfg.modules),
                *(f"export {k}={shlex.quote(v)}" for k, v in sorted(cfg.env.items())),
                "exec "
                + shlex.join(
                    [
                        "srun",
                        "--overlap",
                        "--ntasks-per-node=1",
                        "--kill-on-bad-exit=0",
                        "--export=ALL",
                        python,
                        "-u",
                        str(code / "keeper.py"),
                        home,
                        str(cfg.hold),
                    ]
                ),
            ]
        )
        + "\n"
    )


def holder_argv(
    cfg: SlurmConfig, spec: RunSpec, name: str, folder: Path, script: Path
) -> list[str]:
    launch = spec.launch
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name=jt-hold-{name}"[:120],
        f"--nodes={launch.nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cfg.cpus_per_task or launch.procs}",
        f"--output={folder}/{name}-%j.log",
        f"--chdir={folder}",
        "--no-requeue",
    ]
    for flag, value in (("partition", cfg.partition), ("account", cfg.account), ("time", cfg.time)):
        if value:
            argv.append(f"--{flag}={value}")
    if cfg.gpus_per_node:
        argv.append(f"--gpus-per-node={cfg.gpus_per_node}")
    return [*argv, *cfg.sbatch, str(script)]


def step_script(
    cfg: SlurmConfig, spec: RunSpec, plan: LaunchPlan, argv: list[str] | None = None
) -> str:
    """What a step of the held allocation runs on every node: the batch script's variables
    and ``MASTER_ADDR``, then ``argv`` (None: the run's own launcher, torchrun)."""
    script = batch_script(cfg, spec, plan, in_step=True)
    if argv is None:
        return script
    lines = script.rstrip("\n").split("\n")
    return "\n".join([*lines[:-1], "exec " + shlex.join(argv)]) + "\n"


class HeldRun:
    """One hot run in a held allocation, from the wait for it to its step's end."""

    def __init__(
        self,
        cfg: SlurmConfig,
        target: str,
        spec: RunSpec,
        plan: LaunchPlan,
        home: str,
        run: Callable[..., subprocess.CompletedProcess],
    ) -> None:
        self.cfg, self.spec, self.plan, self.home, self._run = cfg, spec, plan, home, run
        self.name = hold_name(target, spec)
        self.folder = Path(home, POOLS_DIR, "holds")
        self.code = bundle_dir(home)
        self.step: subprocess.Popen | None = None
        self.args = node_hot.pool_args(
            spec,
            plan,
            str(Path(plan.run_dir, "code")),
            node_bundle()[0],
            python=plan.python,
            home=home,
            run_dir=plan.run_dir,
            node_rank=None,
        ) | {"keeper": True}

    # -- the allocation ----------------------------------------------------------------
    def queue_state(self, job: str) -> dict[str, str] | None:
        out = self._run(["squeue", "-h", "-j", job, "-o", "%T|%r"])
        line = out.stdout.strip() if out.returncode == 0 else ""
        if not line:
            return None
        state, _, reason = line.partition("|")
        return {"state": state, "reason": reason}

    def held_job(self) -> str | None:
        """The job on record for this shape, while Slurm still has it."""
        job = read_json(self.folder / f"{self.name}.json").get("job_id")
        return job if job and (self.queue_state(job) or {}).get("state") in ALIVE else None

    def allocation(self) -> str:
        """The held job for this shape: the one on record while it lives, else a new one."""
        self.folder.mkdir(parents=True, exist_ok=True)
        record = self.folder / f"{self.name}.json"
        with open(self.folder / f"{self.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            job = self.held_job()
            if job:
                return job
            install_bundle(self.home)
            script = self.folder / f"{self.name}.sbatch"
            script.write_text(holder_script(self.cfg, self.plan.python, self.code, self.home))
            done = self._run(
                holder_argv(self.cfg, self.spec, self.name, self.folder, script), timeout=60
            )
            if done.returncode != 0:
                raise TargetError(
                    "sbatch refused the held allocation: "
                    f"{done.stderr.strip() or done.stdout.strip()}"
                )
            job = parse_job_id(done.stdout)
            write_json(record, {"job_id": job, "name": self.name, "nodes": self.spec.launch.nodes})
            return job

    # -- the run's steps ---------------------------------------------------------------
    def _srun(self, job: str, *extra: str) -> list[str]:
        return [
            "srun",
            f"--jobid={job}",
            "--overlap",
            f"--nodes={self.spec.launch.nodes}",
            "--ntasks-per-node=1",
            "--export=ALL",
            *extra,
        ]

    def _script(self, name: str, argv: list[str] | None) -> str:
        path = Path(self.plan.run_dir, name)
        path.write_text(step_script(self.cfg, self.spec, self.plan, argv))
        return str(path)

    def _launcher(self, mode: str) -> list[str]:
        return [self.plan.python, str(self.code / "launch.py"), mode, json.dumps(self.args)]

    def dry_run(self) -> str:
        """What a hot run would do: the allocation it would use (or submit), then its two
        steps and their scripts; nothing is submitted or written."""
        job = self.held_job()
        lines = [
            f"# hot: two steps of the allocation held for {self.name}: "
            + (f"job {job}" if job else "none is held yet, so the run first submits it")
        ]
        if not job:
            script = self.folder / f"{self.name}.sbatch"
            lines += [
                shlex.join(holder_argv(self.cfg, self.spec, self.name, self.folder, script)),
                f"# {script}:",
                holder_script(self.cfg, self.plan.python, self.code, self.home).rstrip(),
            ]
        job = job or "<held job>"
        for name, mode, extra in (
            ("hot-warm.sh", "warm", "--label"),
            ("hot-run.sh", "run", "--kill-on-bad-exit=1"),
        ):
            path = f"{self.plan.run_dir}/{name}"
            lines += [
                shlex.join([*self._srun(job, extra), "bash", path]),
                f"# {path}:",
                step_script(self.cfg, self.spec, self.plan, self._launcher(mode)).rstrip(),
            ]
        return "\n".join(lines) + "\n"

    def dry_run_parts(self) -> dict[str, Any]:
        path = f"{self.plan.run_dir}/hot-run.sh"
        return {
            "argv": [
                *self._srun(self.held_job() or "<held job>", "--kill-on-bad-exit=1"),
                "bash",
                path,
            ],
            "script": step_script(self.cfg, self.spec, self.plan, self._launcher("run")),
            "notes": [
                f"hot: the ranks fork from warm pools in the allocation held for "
                f"{self.name} (hold = {self.cfg.hold} s); --no-hot submits a job"
            ],
        }

    def warm(self, job: str) -> dict[str, Any]:
        """``state["launcher"]["hot"]`` once every node's pool is ready (or why not)."""
        script = self._script("hot-warm.sh", self._launcher("warm"))
        try:
            done = self._run([*self._srun(job, "--label"), "bash", script], timeout=WARM_TIMEOUT_S)
        except TargetError as exc:
            return {"used": False, "why": str(exc)}
        answers: dict[str, Any] = {}
        for line in done.stdout.splitlines():
            task, _, text = line.partition(": ")
            try:
                answers[task.strip()] = json.loads(text)
            except ValueError:
                continue
        nodes = [str(i) for i in range(self.spec.launch.nodes)]
        if sorted(answers) != nodes:
            said = (done.stderr.strip() or done.stdout.strip())[-600:]
            return {
                "used": False,
                "why": f"the warm step answered for nodes {sorted(answers)} "
                f"(exit {done.returncode}): {said}",
            }
        hosts = [str(answers[n].get("host") or f"#{n}") for n in nodes]
        return {**node_hot.verdict(hosts, [answers[n] for n in nodes]), "allocation": job}

    def start(self, job: str, log_path: str, hot: bool) -> dict[str, Any]:
        """The run's step: the pools fork the ranks (``hot``), or torchrun starts them."""
        script = self._script("hot-run.sh", self._launcher("run") if hot else None)
        env = {k: v for k, v in os.environ.items() if not k.startswith("JT_")}
        with open(log_path, "ab") as log:
            try:
                self.step = subprocess.Popen(
                    [*self._srun(job, "--kill-on-bad-exit=1"), "bash", script],
                    env=env,
                    cwd=self.plan.run_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=procs.die_with_parent,
                )
            except OSError as exc:
                raise TargetError(f"could not start srun: {exc}") from exc
        return {
            "pid": self.step.pid,
            "pgid": self.step.pid,
            "start_ticks": procs.start_ticks(self.step.pid),
        }

    def poll(self) -> int | None:
        return None if self.step is None else self.step.poll()

    def stop(self, grace: float) -> dict[str, Any]:
        """SIGTERM to srun (which passes it to each node's launcher, whose pool ends the
        ranks), then SIGKILL to whatever of the run is left after ``grace``."""

        def alive() -> list[int]:
            if self.step is not None:
                self.step.poll()
            own = [self.step.pid] if self.step is not None and self.step.returncode is None else []
            return own + leftover_pids(self.plan.run_id, self.plan.run_dir)

        if self.step is not None:
            procs.signal_group(self.step.pid, signal.SIGTERM)
        left = procs.wait_gone(alive, grace)
        if not left:
            return {"sigkilled": []}
        killed = [procs.describe(p) for p in left]
        if self.step is not None:
            procs.signal_group(self.step.pid, signal.SIGKILL)
        procs.signal_pids(left, signal.SIGKILL)
        procs.wait_gone(alive, 5.0)
        return {"sigkilled": killed}


def held_allocations(home: str | os.PathLike) -> list[dict[str, Any]]:
    """The allocations held for hot runs that Slurm still has: job, name, state, age."""
    records = [read_json(p) for p in sorted(Path(home, POOLS_DIR, "holds").glob("*.json"))]
    jobs = [r["job_id"] for r in records if r.get("job_id")]
    if not jobs or shutil.which("squeue") is None:
        return []
    done = subprocess.run(
        ["squeue", "-h", "-j", ",".join(jobs), "-o", "%i|%T|%M|%N"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    states = {}
    for line in done.stdout.splitlines():
        job, state, elapsed, nodes = (line.split("|") + ["", "", ""])[:4]
        states[job] = {"state": state, "elapsed": elapsed, "nodes": nodes}
    return [
        {"job_id": r["job_id"], "name": r.get("name"), **states[r["job_id"]]}
        for r in records
        if r.get("job_id") in states and states[r["job_id"]]["state"] in ALIVE
    ]


def release(jobs: list[str]) -> None:
    """End held allocations now (their keepers stop their pools)."""
    if jobs:
        subprocess.run(["scancel", *jobs], capture_output=True, timeout=30)
