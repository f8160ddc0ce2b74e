"""The Slurm target's configuration and its generated ``sbatch`` command and batch script.

Pure: nothing runs and nothing is read from the cluster, so both are golden-tested. Paths
and names go to ``sbatch`` as argv (never as ``#SBATCH`` lines, which have no quoting);
every value in the script body is quoted with ``shlex``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.errors import TargetError
from ...core.spec import RunSpec
from ...launchers.table import LaunchPlan, Topology, env_defaults, launcher, rank_env
from ..ssh.commands import destination, seconds, single_line, ssh_options

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+")


@dataclass(frozen=True)
class SlurmConfig:
    """A ``kind = "slurm"`` entry of targets.toml, validated."""

    partition: str | None = None
    account: str | None = None
    time: str | None = None
    gpus_per_node: int = 0
    cpus_per_task: int | None = None
    login: str | None = None  # run the Slurm commands over ssh on this login node
    workdir: str | None = None  # the run folders on the cluster's shared filesystem
    python: str | None = None  # the interpreter on the cluster; None: the kernel's path
    login_env: Mapping[str, str] = field(default_factory=dict)  # for the Slurm commands
    ssh_options: tuple[tuple[str, str], ...] = ()
    ssh_config: str | None = None
    connect_timeout: int = 10
    uv: str | None = None  # uv on the cluster, for --env; None: build.py finds it
    env_timeout: int = 1800
    sbatch: tuple[str, ...] = ()
    modules: tuple[str, ...] = ()
    container: str | None = None  # "pyxis" when srun takes --container-image
    env: Mapping[str, str] = field(default_factory=dict)
    hold: int | None = None  # seconds an idle allocation is kept for hot runs
    # seconds of notice before a preemption or the time limit: --signal=B:USR1@S, --requeue
    preemption: int | None = None
    max_preemptions: int | None = None  # attempts preempted before the run fails (default 3)

    @classmethod
    def from_config(cls, name: str, config: Mapping[str, Any]) -> SlurmConfig:
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(config) - known)
        if unknown:
            raise TargetError(
                f"target {name!r}: unknown key(s) {unknown}; a slurm target "
                f"takes {', '.join(sorted(known))}"
            )
        data = dict(config)
        for key in ("sbatch", "modules"):
            value = data.get(key, ())
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                raise TargetError(f"target {name!r}: {key} must be a list of strings")
            data[key] = tuple(value)
        for key in ("gpus_per_node", "cpus_per_task"):
            value = data.get(key)
            if value is not None and (type(value) is not int or value < 0):
                raise TargetError(f"target {name!r}: {key} must be a whole number, got {value!r}")
        if data.get("time") is not None and not _TIME.fullmatch(str(data["time"])):
            raise TargetError(
                f"target {name!r}: time {data['time']!r} is not a Slurm time "
                "limit; write minutes, HH:MM:SS or D-HH:MM:SS"
            )
        if data.get("container") not in (None, "pyxis"):
            raise TargetError(f'target {name!r}: container must be "pyxis" or left out')
        for key in ("env", "login_env"):
            env = data.get(key, {})
            if not isinstance(env, dict) or not all(_ENV_NAME.fullmatch(str(k)) for k in env):
                raise TargetError(
                    f'target {name!r}: {key} must be a table of NAME = "value" '
                    "with NAME a valid variable name"
                )
            data[key] = {str(k): str(v) for k, v in env.items()}
        if data.get("login") is not None:
            data["login"] = destination(name, data["login"])
        elif data["login_env"]:
            raise TargetError(
                f"target {name!r}: login_env is for the Slurm commands on a "
                'login node; set login = "HOST" too, or remove login_env'
            )
        for key in ("workdir", "python", "ssh_config", "uv"):
            if data.get(key) is not None:
                data[key] = single_line(name, key, data[key])
        data["ssh_options"] = ssh_options(name, data.get("ssh_options", ()))
        for key, low, high in (
            ("connect_timeout", 1, 300),
            ("env_timeout", 10, 86400),
            ("hold", 60, 7 * 86400),
            ("preemption", 1, 86400),
            ("max_preemptions", 0, 1000),
        ):
            if data.get(key) is not None:
                data[key] = seconds(name, key, data[key], low, high)
        if data.get("hold") and (data.get("login") or data.get("workdir")):
            raise TargetError(
                f"target {name!r}: hold keeps an allocation whose nodes share "
                "the run store's filesystem; it does not work with login or "
                "workdir yet: remove hold (runs are then jobs of their own)"
            )
        return cls(**data)

    @property
    def remote(self) -> bool:
        """Run folders under ``workdir`` (or a login node's default), not in the run store."""
        return bool(self.login or self.workdir)


def tasks_per_node(spec: RunSpec) -> int:
    """Slurm tasks per node: one launcher per node for a launcher placed on every node
    (torchrun), one task per rank otherwise."""
    return 1 if launcher(spec.launch.launcher).placement == "every_node" else spec.launch.procs


def sbatch_argv(
    cfg: SlurmConfig,
    spec: RunSpec,
    plan: LaunchPlan,
    script: str,
    output: str = "logs/launcher.log",
) -> list[str]:
    """``output``: the job's stdout and stderr, relative to the run folder.

    A run is one attempt, so the job is not requeued when a node fails; ``--requeue`` in the
    target's ``sbatch`` list comes later and wins. A target with ``preemption = SECONDS``
    lets Slurm requeue the job, and asks for SIGUSR1 to the batch shell that many seconds
    before the job is ended (``--signal=B:USR1@SECONDS``): ``preempt_lines`` passes it on to
    the ranks (``jt.preempted()``)."""
    launch = spec.launch
    cpus = cfg.cpus_per_task or (launch.procs if tasks_per_node(spec) == 1 else 1)
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name=jt-{spec.name}"[:120],
        f"--nodes={launch.nodes}",
        f"--ntasks-per-node={tasks_per_node(spec)}",
        f"--cpus-per-task={cpus}",
        f"--output={plan.run_dir}/{output}",
        f"--chdir={plan.run_dir}",
        "--kill-on-invalid-dep=yes",
        *(
            ["--requeue", f"--signal=B:USR1@{cfg.preemption}"]
            if cfg.preemption
            else ["--no-requeue"]
        ),
    ]
    for flag, value in (("partition", cfg.partition), ("account", cfg.account), ("time", cfg.time)):
        if value:
            argv.append(f"--{flag}={value}")
    if cfg.gpus_per_node:
        argv.append(f"--gpus-per-node={cfg.gpus_per_node}")
    return [*argv, *cfg.sbatch, script]


# The batch script runs on the allocation's first node, the one that hosts the rendezvous.
# Its port comes from the run id; another job or service on that node may hold it already
# (the sockets of /proc/net/tcp and tcp6, whatever their state), so the script moves on to
# the next port that no socket there uses.
NEXT_FREE_PORT = (
    "while awk -v p=\"$(printf ':%04X$' \"$MASTER_PORT\")\" '$2 ~ p {f = 1} END {exit !f}' "
    "/proc/net/tcp /proc/net/tcp6 2>/dev/null; do MASTER_PORT=$((MASTER_PORT + 1)); done"
)


def batch_script(
    cfg: SlurmConfig,
    spec: RunSpec,
    plan: LaunchPlan,
    image: str | None = None,
    in_step: bool = False,
) -> str:
    """The batch script: modules, the run's variables, then one launcher per node.
    ``in_step``: the script of a step that already runs one task per node (a held
    allocation's), which starts the launcher itself rather than through ``srun``."""
    launch = spec.launch
    if image and cfg.container != "pyxis":
        raise TargetError(
            f"environment image {image!r} needs a cluster that runs containers; set "
            'container = "pyxis" in the target if its srun has --container-image, or remove '
            "image from the environment"
        )
    env = {**plan.extra_env, **rank_env(plan, launch.launcher)}
    env.pop("MASTER_ADDR", None)  # known only inside the allocation, set below
    env["MASTER_PORT"] = str(plan.master_port)
    lines = [
        "#!/bin/bash",
        f"# jupyter_trainer run {plan.run_id}: {launch.launcher}, {launch.nodes} node(s) x "
        f"{launch.procs} process(es)",
        "set -euo pipefail",
        *(f"module load {shlex.quote(m)}" for m in cfg.modules),
        *(
            f"export {k}=${{{k}:-{shlex.quote(v)}}}"
            for k, v in sorted(env_defaults(launch).items())
        ),
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
    ]
    # One node without a container: the batch step is already on it, so neither scontrol nor
    # an srun step (each a round trip to the controller, 0.1-0.2 s together) is needed.
    single = launch.nodes == 1 and not image
    if single:
        lines += ["JT_HOSTS=${SLURMD_NODENAME:-$(hostname)}", "export MASTER_ADDR=$JT_HOSTS"]
    else:
        lines += [
            'JT_HOSTS=$(scontrol show hostnames "$SLURM_JOB_NODELIST")',
            'export MASTER_ADDR=$(printf "%s\\n" "$JT_HOSTS" | head -n 1)',
        ]
    # On the node that hosts the rendezvous, step past a port in use there: in a held
    # allocation's step every node runs this script, so only when there is one node.
    if not in_step or launch.nodes == 1:
        lines.append(NEXT_FREE_PORT)
    entry = launcher(launch.launcher)
    topology = Topology(
        rendezvous_known=False,
        hostfile=f"{plan.run_dir}/hostfile" if entry.reads_hostfile else None,
    )
    if entry.endpoint_var:
        lines.append(f'export {entry.endpoint_var}="$MASTER_ADDR:$MASTER_PORT"')
    if topology.hostfile:
        lines.append(
            f'printf "%s slots={launch.procs}\\n" $JT_HOSTS > {shlex.quote(topology.hostfile)}'
        )
    argv = entry.argv(launch, plan, topology, {**env_defaults(launch), **env, "MASTER_ADDR": ""})
    if entry.rank_vars:
        lines.append(
            "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in entry.rank_vars.items())
        )
    # srun starts what does not reach the nodes itself: a launcher on every node, or the rank.
    srun = ["srun", "--kill-on-bad-exit=1", "--export=ALL"]
    if image:
        srun.append(f"--container-image={image}")
    if not single and not in_step and entry.placement == "every_node":
        argv = [*srun, "--ntasks-per-node=1", *argv]
    elif not single and not in_step and entry.placement == "one_rank":
        argv = [*srun, "--ntasks=1", *argv]
    if cfg.preemption and not in_step:
        lines += preempt_lines(argv, single)
    else:
        lines.append("exec " + shlex.join(argv))
    return "\n".join(lines) + "\n"


# SIGUSR1 to each rank of this node, by the pid in its record (ranks/rank-<r>.json, in the
# run folder, the job's working directory) while that pid is a process of the run.
TELL_RANKS = (
    "for f in ranks/rank-*.json; do case $f in *.attempt-*) continue;; esac; "
    '[ -e "$f" ] || continue; '
    'grep -q "\\"host\\": \\"$(hostname)\\"" "$f" || continue; '
    'p=$(sed -n \'s/.*"pid": *\\([0-9][0-9]*\\).*/\\1/p\' "$f" | head -n 1); '
    '[ -n "$p" ] || continue; '
    'tr "\\0" "\\n" < "/proc/$p/environ" 2>/dev/null | grep -qx "JT_RUN_ID=$JT_RUN_ID" '
    '&& kill -USR1 "$p" 2>/dev/null; done; true'
)


def preempt_lines(argv: list[str], single: bool) -> list[str]:
    """The launcher in the background and the batch shell waiting for it, passing a SIGUSR1
    it receives (Slurm's ``--signal=B:USR1``, ``scancel --signal=USR1 --batch``) on to every
    rank; on several nodes through an ``srun --overlap`` step on each. Once the launcher has
    ended after such a signal, the job requeues itself (as Lightning's auto-requeue does),
    and Slurm runs it again as the next attempt (``SLURM_RESTART_COUNT``)."""
    tell = (
        TELL_RANKS
        if single
        else "srun --overlap --ntasks-per-node=1 --export=ALL bash -c " + shlex.quote(TELL_RANKS)
    )
    return [
        "export JT_ATTEMPT=$(( ${JT_ATTEMPT:-0} + ${SLURM_RESTART_COUNT:-0} ))",
        "JT_TOLD=0",
        "rm -f preempted.[0-9]*",  # an earlier attempt's: this one has started
        f"trap {shlex.quote('JT_TOLD=1; ' + tell)} USR1",
        shlex.join(argv) + " &",
        "JT_LAUNCHER=$!",
        "while :; do",
        '  wait "$JT_LAUNCHER" && JT_CODE=0 || JT_CODE=$?',
        '  kill -0 "$JT_LAUNCHER" 2>/dev/null || break',
        "done",
        # Slurm ends the requeued job's batch shell itself; it is not to end first, as done
        'if [ "$JT_TOLD" = 1 ]; then : > "preempted.${SLURM_RESTART_COUNT:-0}"; '
        'scontrol requeue "$SLURM_JOB_ID" && sleep 60; fi',
        'exit "$JT_CODE"',
    ]


def parse_job_id(output: str) -> str:
    """The job id from ``sbatch --parsable`` (``ID`` or ``ID;cluster``)."""
    job = output.strip().split(";")[0]
    if not job.isdigit():
        raise TargetError(f"sbatch did not return a job id: {output.strip()!r}")
    return job


def render_for_golden(argv: Sequence[str], script: str) -> str:
    return "sbatch argv:\n" + "".join(f"  {a!r}\n" for a in argv) + "script:\n" + script
