"""The local target: every rank runs on this machine, under the chosen launcher."""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
from functools import cached_property
from typing import Any

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...launchers.table import Command, LaunchPlan, build_command, shell_text
from ...rankside.host import procs
from ...rankside.hotstart import leftover_pids
from ..base import Handle, Target, count_nvidia_gpus, refuse_ranks_beyond_gpus, require_program


class LocalTarget(Target):
    kind = "local"
    shares_filesystem = True

    def __init__(self, name: str = "local", config: dict[str, Any] | None = None) -> None:
        super().__init__(name, config)
        self._children: dict[int, subprocess.Popen] = {}
        self._run_dirs: dict[str, str] = {}  # run id -> run folder (leftover checks)
        self._hot: dict[str, tuple[RunSpec, LaunchPlan]] = {}  # runs that asked for --hot
        self._pool_runs: dict[int, Any] = {}  # pgid -> pool.client.PoolRun
        self._first_start: dict[str, int] = {}  # run id -> its first launcher's start ticks

    @cached_property
    def _gpus(self) -> int:
        return count_nvidia_gpus()

    def gpus_per_node(self) -> int:
        return self._gpus

    def check(self, spec: RunSpec) -> None:
        launch = spec.launch
        if launch.nodes != 1:
            raise TargetError(
                f"the local target runs on this machine only, so --nodes must be 1 (got "
                f"{launch.nodes}); define an ssh or slurm target for several nodes"
            )
        if launch.launcher == "mpirun":
            require_program(
                "mpirun", "install Open MPI: apt-get install openmpi-bin libopenmpi-dev"
            )
        if launch.launcher == "horovod" and importlib.util.find_spec("horovod") is None:
            raise TargetError(
                "--launcher horovod needs Horovod in the run's environment; build it with "
                "scripts/build_horovod.sh (see README), or use --launcher torchrun"
            )
        backend = self.resolve_backend(launch)
        if backend == "nccl" and self._gpus == 0:
            raise TargetError(
                "--backend nccl needs CUDA GPUs and this machine has none (nvidia-smi lists "
                "no GPU); use --backend gloo, or leave --backend out to pick Gloo on CPU"
            )
        refuse_ranks_beyond_gpus(self, launch, "nvidia-smi lists here")
        if backend == "mpi" and launch.launcher != "horovod" and not _torch_has_mpi():
            raise TargetError(
                "--backend mpi needs a torch build with MPI support and this one has none; "
                "use --backend gloo (mpirun still starts the ranks)"
            )

    def plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        code = os.path.join(run_dir, "code")
        self._run_dirs[run_id] = run_dir
        return LaunchPlan(
            run_id=run_id,
            run_dir=run_dir,
            python=spec.env.python or sys.executable,
            boot=os.path.join(code, "_jt", "boot.py"),
            entry=spec.code.entry,
            args=spec.code.args,
            backend=backend,
            backend_forced=spec.launch.backend is not None,
            master_addr="127.0.0.1",
            master_port=procs.free_port(),
            run_as_root=os.geteuid() == 0,
            oversubscribe=spec.launch.procs > (os.cpu_count() or 1),
            extra_env={str(k): str(v) for k, v in self.config.get("env", {}).items()},
        )

    def command(self, spec: RunSpec, plan: LaunchPlan) -> Command:
        if spec.launch.hot:  # start() tries the pool first; this command is the fallback
            self._hot[plan.run_id] = (spec, plan)
        return build_command(spec.launch, plan)

    def dry_run(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> str:
        """The launcher's argv and added variables, started in the run's folder (the rest of
        the environment is this process's, less its ``JT_*`` variables)."""
        self._hot.pop(plan.run_id, None)
        return shell_text(command, cwd=plan.run_dir)

    def dry_run_parts(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> dict[str, Any]:
        if not spec.launch.hot:
            return {}
        return {
            "notes": [
                "--hot: a warm pool forks the ranks with this command's environment "
                "when it can; the command shown starts them otherwise"
            ]
        }

    def start(self, command: Command, run_dir: str, log_path: str) -> Handle:
        base = {k: v for k, v in os.environ.items() if not k.startswith("JT_")}
        hot = self._hot.pop(str(command.env.get("JT_RUN_ID")), None)
        if hot is None:
            return self._start_launcher(command, base, run_dir, log_path)
        from ...nodes.hotstart.local import start_in_pool  # lazy: only --hot needs the pool client

        try:
            run, handle = start_in_pool(*hot, command, base, run_dir, log_path)
        except TargetError as exc:  # the pool cannot: torchrun, with the reason noted
            handle = self._start_launcher(command, base, run_dir, log_path)
            return {**handle, "hot": {"used": False, "why": str(exc)}}
        self._pool_runs[handle["pgid"]] = run
        return handle

    def _start_launcher(
        self, command: Command, base: dict[str, str], run_dir: str, log_path: str
    ) -> Handle:
        procs.become_subreaper()  # the run's orphans come here, whatever session they made
        with open(log_path, "ab") as log:
            try:
                child = subprocess.Popen(
                    command.argv,
                    env=command.environ(base),
                    cwd=run_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=procs.die_with_parent,
                )
            except OSError as exc:
                raise TargetError(f"could not start {command.argv[0]}: {exc}") from exc
        self._children[child.pid] = child
        ticks = procs.start_ticks(child.pid)
        self._first_start.setdefault(str(command.env.get("JT_RUN_ID")), ticks or 0)
        return {"pid": child.pid, "pgid": child.pid, "start_ticks": ticks}

    def poll(self, handle: Handle) -> int | None:
        child = self._children.get(handle["pid"])
        if child is not None:
            return child.poll()
        pool_run = self._pool_runs.get(handle.get("pgid", 0))
        if pool_run is not None:
            return pool_run.poll()
        return None if procs.is_alive(handle["pid"], handle.get("start_ticks")) else -1

    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """SIGTERM to the launcher's group and every process of the run (those that left
        its group, session and environment included, which the report names as
        stragglers), SIGKILL to what is left after ``grace``."""
        signalled: set[int] = set()
        stragglers: list[str] = []

        def alive() -> list[int]:
            child = self._children.get(handle["pid"])
            if child is not None:
                child.poll()  # reap the launcher so it does not linger as a zombie
            marked = set(leftover_pids(run_id, self._run_dirs.get(run_id)))
            escaped = self._escaped(run_id) - marked - set(procs.pids_in_group(handle["pgid"]))
            stragglers.extend(procs.describe(p) for p in sorted(escaped - signalled))
            new = sorted((marked | escaped) - signalled)
            procs.signal_pids(new, signal.SIGTERM)  # one found after the first look too
            signalled.update(new)
            self._reap(signalled)
            return sorted(marked | escaped)

        procs.signal_group(handle["pgid"], signal.SIGTERM)
        left = procs.wait_gone(alive, grace)
        report: dict[str, Any] = {
            "sigkilled": [],
            **({"stragglers": stragglers} if stragglers else {}),
        }
        if not left:
            return report
        report["sigkilled"] = [procs.describe(p) for p in left]
        procs.signal_group(handle["pgid"], signal.SIGKILL)
        procs.signal_pids(left, signal.SIGKILL)
        procs.wait_gone(alive, 5.0)
        return report

    def leftovers(self, run_id: str) -> list[str]:
        found = set(leftover_pids(run_id, self._run_dirs.get(run_id))) | self._escaped(run_id)
        return [procs.describe(p) for p in sorted(found)]

    def _escaped(self, run_id: str) -> set[int]:
        """The run's processes that neither its launcher's group nor ``JT_RUN_ID`` finds:
        every live descendant of its launchers, and the orphans re-parented to this process
        (their subreaper) since its first launcher started, with their descendants."""
        since = self._first_start.get(run_id)
        if since is None:
            return set()
        table = procs.process_table()
        me = os.getpid()
        roots = {pid for pid in self._children if pid in table}
        roots |= {
            pid
            for pid, (parent, ticks) in table.items()
            if parent == me and ticks >= since and pid not in self._children
        }
        return roots | procs.descendants(roots, table)

    def _reap(self, pids: set[int]) -> None:
        """Collect the exit of each of ``pids`` that ended as this process's adopted child."""
        for pid in pids - set(self._children):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def _torch_has_mpi() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:
        return False
    return dist.is_available() and dist.is_mpi_available()
