"""LaunchSpec -> the argv and environment of a launcher (torchrun, mpirun, horovodrun, python).

Pure: no process is started and nothing is read from the machine, so every command can be
golden-tested. Commands are argv lists, never shell strings; a target that must go through
a shell (ssh, sbatch) quotes them with ``shlex.join``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .errors import LaunchError
from .spec import LaunchSpec

WORK_DIR = "work"  # <run>/work/<node>/: each node's working directory, made by _boot.py


@dataclass(frozen=True)
class Command:
    """A process to start: argv, variables it must get, and defaults it gets unless set."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    env_defaults: Mapping[str, str] = field(default_factory=dict)

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """The full environment for the child, built from ``base`` (never mutated)."""
        merged = {**self.env_defaults, **base}
        merged.update(self.env)
        return merged


@dataclass(frozen=True)
class LaunchPlan:
    """Facts about one run that every launcher needs, resolved by the supervisor."""

    run_id: str
    run_dir: str
    python: str
    boot: str                      # absolute path of code/_jt/boot.py
    entry: str                     # the entry script, relative to code/
    args: Sequence[str] = ()
    backend: str = "gloo"          # the resolved backend
    backend_forced: bool = False   # the user chose it with --backend
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    run_as_root: bool = False      # Open MPI refuses root without --allow-run-as-root
    oversubscribe: bool = False    # more ranks than cores on a node
    extra_env: Mapping[str, str] = field(default_factory=dict)  # the target's variables


def rank_env(plan: LaunchPlan, launcher: str) -> dict[str, str]:
    """Variables every rank gets from jupyter_trainer, whatever the launcher."""
    env = {
        "JT_RUN_ID": plan.run_id,
        "JT_RUN_DIR": plan.run_dir,
        "JT_LAUNCHER": launcher,
        "JT_BACKEND": plan.backend,
        "PYTHONUNBUFFERED": "1",
    }
    if plan.backend_forced:
        env["JT_BACKEND_OVERRIDE"] = "1"
    if launcher != "torchrun":  # torchrun runs its own rendezvous and sets these itself
        env["MASTER_ADDR"] = plan.master_addr
        env["MASTER_PORT"] = str(plan.master_port)
    return env


def rank_program(plan: LaunchPlan) -> list[str]:
    """What every launcher finally starts once per rank: the snapshot's boot script."""
    return [plan.python, "-u", plan.boot, plan.entry, *plan.args]


def env_defaults(launch: LaunchSpec) -> dict[str, str]:
    # Several ranks on one node each starting one OpenMP thread per core slows all of them.
    return {"OMP_NUM_THREADS": "1"} if launch.procs > 1 else {}


def torchrun_argv(launch: LaunchSpec, plan: LaunchPlan, *, standalone: bool = True,
                  endpoint: bool = True, node_rank: int | None = None,
                  local_addr: str | None = None) -> list[str]:
    """torchrun for one node of ``launch``. ``standalone``: a single node rendezvouses with
    itself on a free port. ``endpoint=False`` leaves the rendezvous address out, for a
    script that exports it as ``PET_RDZV_ENDPOINT`` once the first host is known.

    ``node_rank`` (a target that starts one torchrun per node itself) also says which node
    hosts the c10d store: node 0 does (``is_host=1``), the others only connect to it. torch
    would otherwise guess by matching the endpoint against the node's own addresses, which
    fails on multi-homed nodes (nobody hosts) and on hosts sharing one machine (both try).
    ``local_addr`` is the address this node is known by to the others."""
    argv = [plan.python, "-m", "torch.distributed.run"]
    if launch.nodes == 1 and standalone:
        argv += ["--standalone", "--nnodes=1"]
    else:
        argv += [f"--nnodes={launch.nodes}", "--rdzv-backend=c10d", f"--rdzv-id={plan.run_id}"]
        if endpoint:
            argv.append(f"--rdzv-endpoint={endpoint_address(plan.master_addr)}:{plan.master_port}")
        if node_rank is not None:
            argv += [f"--node-rank={node_rank}", f"--rdzv-conf=is_host={int(node_rank == 0)}"]
        if local_addr:
            argv.append(f"--local-addr={local_addr}")
    argv += [f"--nproc-per-node={launch.procs}", "--max-restarts=0", "--monitor-interval=0.1",
             plan.boot, plan.entry, *plan.args]
    return argv


def endpoint_address(address: str) -> str:
    """``address`` as the host part of ``HOST:PORT`` (an IPv6 address goes in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def hosts_slots(hosts: Sequence[str], slots: int) -> str:
    """``a:4,b:4``: the ``-H`` value of mpirun and horovodrun for ``slots`` ranks per host."""
    return ",".join(f"{endpoint_address(host)}:{slots}" for host in hosts)


def mpirun_argv(launch: LaunchSpec, plan: LaunchPlan, env: Mapping[str, str],
                hosts: Sequence[str] | None = None) -> list[str]:
    """mpirun; ``hosts`` (a multi-node target) puts ``launch.procs`` ranks on each with ``-H``."""
    argv = ["mpirun", "-np", str(launch.world_size), "--bind-to", "none"]
    if hosts:
        argv += ["-H", hosts_slots(hosts, launch.procs)]
    if plan.run_as_root:
        argv.append("--allow-run-as-root")
    if plan.oversubscribe:
        argv.append("--oversubscribe")
    for name in sorted(env):  # -x NAME exports the variable from mpirun's own environment
        argv += ["-x", name]
    return argv + rank_program(plan)


def horovodrun_argv(launch: LaunchSpec, plan: LaunchPlan,
                    hosts: Sequence[str] | None = None, extra: Sequence[str] = ()) -> list[str]:
    """horovodrun; ``hosts`` are its host arguments (default ``-H localhost:<procs>``; a
    multi-node target passes ``--hostfile PATH`` or ``-H a:4,b:4``); ``extra`` are further
    horovodrun options (``--disable-cache``, ``--network-interfaces``)."""
    # Run as a module of the run's interpreter: an environment layered on the kernel's
    # packages has Horovod but no horovodrun script of its own.
    hosts = ["-H", f"localhost:{launch.procs}"] if hosts is None else list(hosts)
    argv = [plan.python, "-m", "horovod.runner.launch", "-np", str(launch.world_size),
            *hosts, *extra]
    if plan.backend == "mpi":
        argv.append("--mpi")
        mpi_args = [a for a, on in (("--allow-run-as-root", plan.run_as_root),
                                    ("--oversubscribe", plan.oversubscribe)) if on]
        if mpi_args:
            argv.append("--mpi-args=" + " ".join(mpi_args))
    else:
        argv.append("--gloo")
    return argv + rank_program(plan)


def build_command(launch: LaunchSpec, plan: LaunchPlan) -> Command:
    """The command that starts every rank of a single-node run on this host."""
    if launch.nodes != 1:
        raise LaunchError(
            f"{launch.nodes} nodes need a multi-node target; this command runs on one host"
        )
    env = {**plan.extra_env, **rank_env(plan, launch.launcher)}
    defaults = env_defaults(launch)
    if launch.launcher == "torchrun":
        argv = torchrun_argv(launch, plan)
    elif launch.launcher == "mpirun":
        argv = mpirun_argv(launch, plan, {**defaults, **env})
    elif launch.launcher == "horovod":
        argv = horovodrun_argv(launch, plan)
    else:
        argv = rank_program(plan)
        env.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"})
    return Command(tuple(argv), env, defaults)


def render(command: Command) -> str:
    """A stable text form of a command, for golden files and for logs."""
    lines = ["argv:"]
    lines += [f"  {json.dumps(arg)}" for arg in command.argv]
    lines.append("env:")
    lines += [f"  {name}={json.dumps(command.env[name])}" for name in sorted(command.env)]
    lines.append("env_defaults:")
    lines += [f"  {n}={json.dumps(command.env_defaults[n])}" for n in sorted(command.env_defaults)]
    return "\n".join(lines) + "\n"
