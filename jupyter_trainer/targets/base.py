"""The interface every target implements."""

from __future__ import annotations

import base64
import os
import re
import shlex
import shutil
import socket
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..core.errors import TargetError
from ..core.spec import LaunchSpec, RunSpec
from ..launchers.table import WORK_DIR, Command, LaunchPlan, shell_text
from ..rankside.host import procs

Handle = dict  # JSON-serialisable: written into state.json so another process can follow it


@dataclass(frozen=True)
class BuiltEnvironment:
    """A run's locked environment as a target built it on its own nodes: the interpreter
    the ranks run, and what the run's state records of the build (``environment`` there)."""

    python: str  # on node 0 (or the cluster); the ranks run it
    env_id: str | None = None
    python_version: str | None = None
    torch: str | None = None
    built: bool | None = None  # built now (False: it was cached there)
    build_seconds: float | None = None
    built_at: str | None = None
    nodes: Mapping[str, Mapping[str, Any]] | None = None  # host -> that node's build
    on: str | None = None  # the one host it was built on

    def record(self) -> dict[str, Any]:
        """The fields the run's state keeps under ``environment``."""
        data: dict[str, Any] = {
            "python": self.python,
            "env_id": self.env_id,
            "python_version": self.python_version,
            "torch": self.torch,
            "built": self.built,
            "build_seconds": self.build_seconds,
            "built_at": self.built_at,
        }
        if self.nodes is not None:
            data["nodes"] = {host: dict(info) for host, info in self.nodes.items()}
        if self.on is not None:
            data["on"] = self.on
        return data


class Target(ABC):
    """A place that runs launchers. Subclasses fill the hooks; the supervisor drives them,
    in this order:

    ``check`` (in the submitting process, before anything is created, so bad input fails
    fast) -> ``reserve`` (a scheduler's hold on the nodes, if any; the run is ``queued``
    until it is granted) -> ``plan`` (resolve the nodes, pre-flight them; the LaunchPlan) ->
    ``build_environment`` (the run's locked environment on nodes with their own
    filesystems) -> ``stage`` (the snapshot where the ranks will read it) -> ``command``
    (the launcher's, from the launcher table in launch.py) -> ``start`` (the handle) ->
    ``phase``/``sync``/``poll`` while it runs -> ``stop`` (and ``leftovers``) ->
    ``collect``/``report``/``snapshot_hashes`` -> ``discard_workdirs`` (a run that ended
    well) -> ``release``. Every hook after ``check`` runs inside the run's supervisor.
    """

    kind: ClassVar[str]
    price: dict[str, Any] = {}  # what it costs (pricing.py); the registry sets each one's
    storage: str | None = None  # its runs' storage URL (``storage`` in targets.toml)
    queues: ClassVar[bool] = False  # True when a scheduler may hold the run before it starts
    # True when the ranks see this machine's filesystem (the run store included), so an
    # environment built here is usable there as it is.
    shares_filesystem: ClassVar[bool] = False
    runs_images: ClassVar[bool] = False  # True when ranks can run in a container image

    def __init__(self, name: str, config: Mapping[str, Any] | None = None) -> None:
        self.name = name
        self.config = dict(config or {})
        # Set by the supervisor: called with what staging has done so far (the data inputs'
        # bytes sent and rate, per node), which the run's state shows while it is preparing.
        self.on_staging: Callable[[dict[str, Any]], None] = lambda record: None

    # -- submit side -------------------------------------------------------------------
    def check(self, spec: RunSpec) -> None:
        """Raise if this target cannot run ``spec`` as asked. Starts nothing."""

    def gpus_per_node(self) -> int:
        """CUDA GPUs each node offers (0 on CPU-only nodes)."""
        return int(self.config.get("gpus_per_node", 0))

    def resolve_backend(self, launch: LaunchSpec) -> str:
        """The process-group backend: the user's choice, else NCCL with GPUs, else Gloo."""
        if launch.backend:
            return launch.backend
        return "nccl" if self.gpus_per_node() > 0 else "gloo"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, **self.config}

    # -- dry run (``--dry-run``): check -> dry_plan -> command -> dry_run, in the submitting
    # process; nothing is started, staged or built, and no run is created -----------------
    def dry_plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        """``plan`` for a dry run: the same LaunchPlan, found without changing anything on
        the target (no folder made, nothing installed there). ``run_id`` is a placeholder and
        ``run_dir`` a temporary folder holding the snapshot (``code/``) and ``spec.json``.
        Here: ``plan``, for targets whose plan only reads."""
        return self.plan(spec, run_id, run_dir, backend)

    def dry_run(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> str:
        """What a run would start, as the text ``--dry-run`` prints (alone on the CLI's
        stdout, so it may be fed to another tool). Here: the launcher's argv and the
        variables jupyter_trainer adds to the environment it inherits, as shell lines with
        every value quoted as it would be passed. Raises like a real submit on bad input."""
        return shell_text(command)

    def dry_run_parts(self, spec: RunSpec, plan: LaunchPlan, command: Command) -> dict[str, Any]:
        """Structured parts of the dry run beyond the command's argv and env (``nodes``: each
        node's command; ``script``: a batch script), for ``DryRun``'s fields."""
        return {}

    # -- supervisor side ---------------------------------------------------------------
    def warm_up(self) -> None:
        """Import what the later hooks need, while the supervisor waits for its run (the
        submitting process is still capturing it). Never raises on the run's behalf."""

    def reserve(self, spec: RunSpec, run_id: str, run_dir: str) -> Handle | None:
        """Ask a scheduler for the run's nodes before anything is planned on them (a Ray
        placement group). The supervisor then keeps the run ``queued``, following ``phase``
        of the returned handle, until they are granted, and stops it like a started run
        if the run ends first. Targets that plan without a reservation return None."""
        return None

    @abstractmethod
    def plan(self, spec: RunSpec, run_id: str, run_dir: str, backend: str) -> LaunchPlan:
        """Resolve interpreter, ports and node facts for one run."""

    def build_environment(self, spec: RunSpec, plan: LaunchPlan) -> BuiltEnvironment | None:
        """Build ``spec.env`` on the target's own nodes; None where the supervisor's build
        on this machine is what the ranks use (a shared filesystem, or no ``--env``). The
        supervisor then runs the ranks with the returned ``python``."""
        return None

    def stage(self, spec: RunSpec, plan: LaunchPlan, run_dir: str) -> None:
        """Put the snapshot (``run_dir/code``) where the ranks will read it. Nothing to do
        where they read the run's own folder."""

    @abstractmethod
    def command(self, spec: RunSpec, plan: LaunchPlan) -> Command:
        """The launcher command for ``plan``."""

    @abstractmethod
    def start(self, command: Command, run_dir: str, log_path: str) -> Handle:
        """Start the launcher detached from the caller's terminal; return a handle."""

    @abstractmethod
    def poll(self, handle: Handle) -> int | None:
        """The launcher's exit code, or None while it runs."""

    @abstractmethod
    def stop(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """End every process of the run: SIGTERM, then SIGKILL after ``grace`` seconds."""

    def end_attempt(self, handle: Handle, run_id: str, grace: float) -> dict[str, Any]:
        """End every process of one attempt of the run, so that ``start`` can begin the next
        (``--max-restarts`` with a launcher that does not restart its ranks itself). The run
        goes on: nothing is collected. Here: ``stop``."""
        return self.stop(handle, run_id, grace)

    @abstractmethod
    def leftovers(self, run_id: str) -> list[str]:
        """Processes of the run still alive, described; empty when the run is fully gone."""

    def phase(self, handle: Handle) -> dict[str, Any]:
        """Where a started run stands with the scheduler: ``{"stage": "queued", "reason": ...}``
        or ``{"stage": "running", ...}``. Targets without a queue are running once started."""
        return {"stage": "running"}

    def sync(self, handle: Handle) -> None:
        """Bring the ranks' new logs, events and rank records into the local run directory.
        Called often while the run goes; targets whose ranks write it directly do nothing."""

    def collect(self, handle: Handle) -> dict[str, Any]:
        """At the end: a last ``sync`` and the run's ``outputs/`` brought back; returns what
        was collected, for the run's state."""
        return {}

    def report(self, handle: Handle) -> dict[str, Any]:
        """What the scheduler says of a finished run (final state, exit code); ``error`` when
        the scheduler itself ended it (time limit, out of memory, node failure)."""
        return {}

    def snapshot_hashes(self, handle: Handle) -> dict[str, str | None]:
        """After ``stop``: the content hash of each copy of the snapshot the ranks were started
        from on the nodes (``"host:path" -> hash``; None where the node did not answer).
        Targets whose ranks use the run's own ``code/`` have none."""
        return {}

    def discard_workdirs(self, handle: Handle | None, run_dir: str) -> dict[str, Any]:
        """Remove every node's working directory (``<run>/work/``), the scratch of a run that
        ended well. Here: the run folder's own, which is the nodes' on a shared filesystem."""
        return remove_workdirs(run_dir)

    def stacks(self, handle: Handle | None, ranks: dict[int, dict[str, Any]]) -> dict[int, str]:
        """The live Python stack of each rank in ``ranks`` (rank -> its record, which names its
        ``host`` and ``pid``), as ``py-spy dump`` prints it. Here: ranks on this host; a target
        whose ranks run elsewhere asks their nodes."""
        here = socket.gethostname()
        found = {}
        for rank, record in ranks.items():
            pid, host = record.get("pid"), record.get("host")
            if not isinstance(pid, int):
                found[rank] = "(no stack: the rank has not recorded its process id)"
            elif host not in (None, here):
                found[rank] = f"(no stack: rank {rank} runs on {host}, not on this host)"
            else:
                found[rank] = procs.python_stack(pid)
        return found

    def reaches(self, handle: Handle | None, node: str, host: str, port: int) -> str | None:
        """Whether ``node`` (a host of the run, as its launcher record names it) opens a TCP
        connection to ``host:port`` now, tried on that node: None when it does, else why
        (``reach_probe``). Here: a target whose nodes cannot be asked says None."""
        return None

    def debug_relay(self, handle: Handle | None, record: dict[str, Any]) -> Any:
        """A process (``subprocess.Popen``'s interface) whose stdin and stdout pipes reach the
        debugger a rank serves on its node (``record``: the rank's own, with its ``host`` and
        ``debugging.socket``), over this target's transport (``relay_command``). None here:
        the socket is on this host, to connect to directly."""
        return None

    def release(self, handle: Handle | None) -> None:
        """The run is settled (its state is terminal): close what the target kept open
        for its end (sessions with the nodes). Never raises on the run's behalf."""


REACH_TIMEOUT_S = 3.0
# Run on a node with python3 -c HOST PORT: a TCP connection to HOST:PORT, and why not.
_REACH = """import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3])).close()
except socket.timeout:
    print(f"timed out after {sys.argv[3]} s: nothing answered (a firewall may drop it)")
    sys.exit(1)
except OSError as exc:
    print(exc.strerror or exc)
    sys.exit(1)
"""


def reach_probe(host: str, port: int) -> str:
    """The shell command that tries, on a node, a TCP connection to ``host:port`` within
    ``REACH_TIMEOUT_S``: exit 0, or 1 with the reason on stdout."""
    return shlex.join(["python3", "-c", _REACH, host, str(port), f"{REACH_TIMEOUT_S:g}"])


# What rankside/debug/debugger.py makes: rank-<r>.sock in a folder of tempfile.mkdtemp's
_DEBUG_SOCKET = re.compile(r"/(?:[^/\0]+/)*jt-debug-[A-Za-z0-9_]+/rank-\d+\.sock")


def debug_socket(record: dict[str, Any]) -> str:
    """The debugger socket a rank's record names, checked to be one the rank side makes
    (``<tmp>/jt-debug-XXXX/rank-<r>.sock``) before anything connects to it."""
    path = (record.get("debugging") or {}).get("socket")
    if not path:
        raise TargetError(f"rank {record.get('rank')} is not waiting in a debugger")
    if not isinstance(path, str) or ".." in path or not _DEBUG_SOCKET.fullmatch(path):
        raise TargetError(
            f"rank {record.get('rank')}'s record names {path!r} as its debugger's socket, "
            "which is no socket jupyter_trainer makes; the record is damaged"
        )
    return path


def relay_command(record: dict[str, Any]) -> str:
    """The shell command that joins its stdin and stdout to the debugger socket ``record``
    names, on the rank's node (``rankside/debug/debug_relay.py``)."""
    from .. import rankside

    return shlex.join(["python3", "-c", rankside.text(rankside.DEBUG_RELAY), debug_socket(record)])


def checkpoint_blobs(run_dir: str) -> dict[str, str]:
    """A resumed run's checkpoint (put in ``checkpoints/`` before it starts: a file, or a
    framework's folder) as the base64 ``blobs`` of a node's start, for a target whose nodes
    do not see this machine's files. Node 0 gets it: its rank 0 loads it and broadcasts it
    (``jt.load_checkpoint``), or the framework loads it on that node."""
    root = Path(run_dir) / "checkpoints"
    return {
        f"checkpoints/{path.relative_to(root).as_posix()}": base64.b64encode(
            path.read_bytes()
        ).decode()
        for path in sorted(root.rglob("*"))
        if path.is_file() and not path.is_symlink() and not path.name.startswith(".")
    }


def remove_workdirs(run_dir: str) -> dict[str, Any]:
    """Remove ``<run_dir>/work/``, files a script made read-only included."""
    path = Path(run_dir) / WORK_DIR

    def writable(func: Any, name: str, _exc: Any) -> None:
        os.chmod(os.path.dirname(name), 0o700)
        if not os.path.islink(name):
            os.chmod(name, 0o700)
        func(name)

    if not os.path.lexists(path):
        return {"removed": []}
    try:
        shutil.rmtree(path, onerror=writable)
    except OSError as exc:
        return {"removed": [], "error": f"cannot remove {path}: {exc}"}
    return {"removed": [str(path)]}


def require_program(program: str, fix: str) -> str:
    path = shutil.which(program)
    if not path:
        raise TargetError(f"{program} was not found on PATH; {fix}")
    return path


def refuse_ranks_beyond_gpus(target: Target, launch: LaunchSpec, where: str) -> None:
    """NCCL runs one rank per GPU and refuses two on one ("Duplicate GPU detected"): more
    ranks per node than its GPUs is refused before anything starts, with both ways out."""
    gpus = target.gpus_per_node()
    if target.resolve_backend(launch) == "nccl" and launch.procs > gpus > 0:
        how = "--backend nccl needs" if launch.backend else "NCCL (chosen on GPUs) needs"
        raise TargetError(
            f"{how} one GPU per rank, and --procs {launch.procs} asks for more ranks than "
            f"the {gpus} GPU(s) {where} (NCCL refuses two ranks on one GPU); use --procs "
            f"{gpus}, or --backend gloo to let ranks share a GPU"
        )


def count_nvidia_gpus(timeout: float = 10.0) -> int:
    """GPUs that ``nvidia-smi -L`` lists, honouring CUDA_VISIBLE_DEVICES; 0 without a driver."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    count = sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip() not in ("", "-1")]))
    return count
