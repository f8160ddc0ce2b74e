"""LaunchSpec -> the argv and environment of a launcher (torchrun, mpirun, horovodrun, python).

Pure: no process is started and nothing is read from the machine, so every command can be
golden-tested. Commands are argv lists, never shell strings; a target that must go through
a shell (ssh, sbatch) quotes them with ``shlex.join``.
"""

from __future__ import annotations

import json
import posixpath
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ..core.errors import LaunchError
from ..core.spec import LaunchSpec

WORK_DIR = "work"  # <run>/work/<node>/: each node's working directory, made by the rank-side boot (rankside/rank/workdir.py)


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
    boot: str  # absolute path of code/_jt/boot.py
    entry: str  # the entry script, relative to code/
    args: Sequence[str] = ()
    backend: str = "gloo"  # the resolved backend
    backend_forced: bool = False  # the user chose it with --backend
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    run_as_root: bool = False  # Open MPI refuses root without --allow-run-as-root
    oversubscribe: bool = False  # more ranks than cores on a node
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


def torchrun_argv(
    launch: LaunchSpec,
    plan: LaunchPlan,
    *,
    standalone: bool = True,
    endpoint: bool = True,
    node_rank: int | None = None,
    local_addr: str | None = None,
) -> list[str]:
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
    restarts = launch.max_restarts if launch.restarts_itself else 0
    argv += [
        f"--nproc-per-node={launch.procs}",
        f"--max-restarts={restarts}",
        "--monitor-interval=0.1",
        # torchrun's per-attempt folders go to the run's scratch, not a new /tmp/torchelastic_*
        # left behind by every run; they go with the working directories of a run that ends well.
        f"--log-dir={posixpath.join(plan.run_dir, WORK_DIR, '.torchrun')}",
        plan.boot,
        plan.entry,
        *plan.args,
    ]
    return argv


def endpoint_address(address: str) -> str:
    """``address`` as the host part of ``HOST:PORT`` (an IPv6 address goes in brackets)."""
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def hosts_slots(hosts: Sequence[str], slots: int) -> str:
    """``a:4,b:4``: the ``-H`` value of mpirun and horovodrun for ``slots`` ranks per host."""
    return ",".join(f"{endpoint_address(host)}:{slots}" for host in hosts)


def mpirun_argv(
    launch: LaunchSpec, plan: LaunchPlan, env: Mapping[str, str], hosts: Sequence[str] | None = None
) -> list[str]:
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


def horovodrun_argv(
    launch: LaunchSpec,
    plan: LaunchPlan,
    hosts: Sequence[str] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """horovodrun; ``hosts`` are its host arguments (default ``-H localhost:<procs>``; a
    multi-node target passes ``--hostfile PATH`` or ``-H a:4,b:4``); ``extra`` are further
    horovodrun options (``--disable-cache``, ``--network-interfaces``)."""
    # Run as a module of the run's interpreter: an environment layered on the kernel's
    # packages has Horovod but no horovodrun script of its own.
    hosts = ["-H", f"localhost:{launch.procs}"] if hosts is None else list(hosts)
    argv = [
        plan.python,
        "-m",
        "horovod.runner.launch",
        "-np",
        str(launch.world_size),
        *hosts,
        *extra,
    ]
    if plan.backend == "mpi":
        argv.append("--mpi")
        mpi_args = [
            a
            for a, on in (
                ("--allow-run-as-root", plan.run_as_root),
                ("--oversubscribe", plan.oversubscribe),
            )
            if on
        ]
        if mpi_args:
            argv.append("--mpi-args=" + " ".join(mpi_args))
    else:
        argv.append("--gloo")
    return argv + rank_program(plan)


@dataclass(frozen=True)
class Topology:
    """Where the ranks go, as a target knows it when it builds one launcher's command. The
    defaults are one launcher on this host that finds its ranks by itself."""

    node_rank: int | None = None  # this launcher's node, when one starts on every node
    address: str | None = None  # this node's address, as the other nodes reach it
    hosts: Sequence[str] = ()  # every node's address, node 0 first, for a launcher
    # that reaches the other nodes itself
    hostfile: str | None = None  # a file with ``NAME slots=N`` lines, written at start
    rendezvous_known: bool = True  # False: the address is known only when the job runs
    interfaces: Sequence[str] = ()  # the network interfaces ranks may use
    launcher_cache: bool = True  # False: write no launcher cache into the node's home


@dataclass(frozen=True)
class Launcher:
    """One entry of the launcher table: how a launcher is started for a topology.

    ``placement`` says where a target starts it: ``every_node`` (one per node, which starts
    that node's ranks), ``first_node`` (one on node 0 that reaches the other nodes itself)
    or ``one_rank`` (the single rank, no launcher)."""

    name: str
    placement: str
    argv: Callable[[LaunchSpec, LaunchPlan, Topology, Mapping[str, str]], list[str]]
    rank_vars: Mapping[str, str] = field(default_factory=dict)  # every rank gets these
    tools: Callable[[LaunchSpec, int], list[str]] = lambda launch, node: []
    endpoint_var: str | None = None  # where it reads a rendezvous address known only late
    reads_hostfile: bool = False  # under a scheduler it is given the hosts in a file

    def command(
        self, launch: LaunchSpec, plan: LaunchPlan, topology: Topology, env: Mapping[str, str]
    ) -> Command:
        """The launcher's Command; ``env`` is what the target gives every rank."""
        env = {**env, **self.rank_vars}
        defaults = env_defaults(launch)
        return Command(tuple(self.argv(launch, plan, topology, {**defaults, **env})), env, defaults)


def _torchrun(
    launch: LaunchSpec, plan: LaunchPlan, topo: Topology, env: Mapping[str, str]
) -> list[str]:
    known = topo.rendezvous_known
    return torchrun_argv(
        launch,
        plan,
        standalone=known,
        endpoint=known,
        node_rank=topo.node_rank,
        local_addr=topo.address,
    )


def _mpirun(
    launch: LaunchSpec, plan: LaunchPlan, topo: Topology, env: Mapping[str, str]
) -> list[str]:
    # One node: mpirun starts its ranks where it runs; an -H would make it ssh to itself.
    return mpirun_argv(launch, plan, env, hosts=list(topo.hosts) if len(topo.hosts) > 1 else None)


def _horovod(
    launch: LaunchSpec, plan: LaunchPlan, topo: Topology, env: Mapping[str, str]
) -> list[str]:
    hosts = (
        ["--hostfile", topo.hostfile]
        if topo.hostfile
        else ["-H", hosts_slots(topo.hosts, launch.procs)]
        if topo.hosts
        else None
    )
    extra = [] if topo.launcher_cache else ["--disable-cache"]  # else ~/.horovod on nodes
    if topo.interfaces:
        extra += ["--network-interfaces", ",".join(topo.interfaces)]
    return horovodrun_argv(launch, plan, hosts, extra)


def _mpirun_tools(launch: LaunchSpec, node: int) -> list[str]:
    if node:
        return ["orted"]
    return ["mpirun"] + (["ssh"] if launch.nodes > 1 else [])


def _horovod_tools(launch: LaunchSpec, node: int) -> list[str]:
    if node:
        return ["orted"] if launch.backend == "mpi" else []
    # horovodrun itself runs as ``python -m horovod.runner.launch``: its module is checked
    # with the imports, not as a program.
    return (["ssh"] if launch.nodes > 1 else []) + (["mpirun"] if launch.backend == "mpi" else [])


# The launcher table: a new launcher is one entry here (and its name in spec.LAUNCHERS).
LAUNCHERS: dict[str, Launcher] = {
    "torchrun": Launcher("torchrun", "every_node", _torchrun, endpoint_var="PET_RDZV_ENDPOINT"),
    "mpirun": Launcher("mpirun", "first_node", _mpirun, tools=_mpirun_tools),
    "horovod": Launcher(
        "horovod", "first_node", _horovod, tools=_horovod_tools, reads_hostfile=True
    ),
    "python": Launcher(
        "python",
        "one_rank",
        lambda launch, plan, topo, env: rank_program(plan),
        rank_vars={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"},
    ),
}


def launcher(name: str) -> Launcher:
    try:
        return LAUNCHERS[name]
    except KeyError:
        raise LaunchError(
            f"unknown launcher {name!r}; choose one of {', '.join(LAUNCHERS)}"
        ) from None


def build_command(launch: LaunchSpec, plan: LaunchPlan) -> Command:
    """The command that starts every rank of a single-node run on this host."""
    if launch.nodes != 1:
        raise LaunchError(
            f"{launch.nodes} nodes need a multi-node target; this command runs on one host"
        )
    env = {**plan.extra_env, **rank_env(plan, launch.launcher)}
    return launcher(launch.launcher).command(launch, plan, Topology(), env)


def render(command: Command) -> str:
    """A stable text form of a command, for golden files and for logs."""
    lines = ["argv:"]
    lines += [f"  {json.dumps(arg)}" for arg in command.argv]
    lines.append("env:")
    lines += [f"  {name}={json.dumps(command.env[name])}" for name in sorted(command.env)]
    lines.append("env_defaults:")
    lines += [f"  {n}={json.dumps(command.env_defaults[n])}" for n in sorted(command.env_defaults)]
    return "\n".join(lines) + "\n"


def shell_text(command: Command, cwd: str | None = None) -> str:
    """``command`` as shell lines a person can read and run: ``cd``, the variables it must
    get (``export``), the defaults it gets unless already set, then its argv. Every value is
    quoted with ``shlex``, so the shell passes exactly what the launcher would get."""
    lines = [f"cd {shlex.quote(cwd)}"] if cwd else []
    lines += [f"export {name}={shlex.quote(command.env[name])}" for name in sorted(command.env)]
    lines += [
        f"export {name}=${{{name}:-{shlex.quote(value)}}}"
        for name, value in sorted(command.env_defaults.items())
    ]
    lines.append(shlex.join(command.argv))
    return "\n".join(lines) + "\n"
