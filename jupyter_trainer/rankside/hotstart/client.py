"""The supervisor's side of a pool: find or start the pool for a run's interpreter,
environment and modules, hand it the run's ranks, and follow them to their end."""

from __future__ import annotations

import ast
import errno
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..host import procs
from ..host.home import default_home
from .records import POOLS_DIR, PoolUnavailable, own_pools, read_json
from .server import DEFAULT_IDLE_S, unix_address

IDLE_ENV = "JT_POOL_IDLE_S"
START_TIMEOUT_S = 90.0  # importing torch on a loaded machine
BASE_MODULES = ("torch", "torch.distributed")
_NOT_PRELOADED = ("jupyter_trainer", "__future__", "__main__")


def pools_dir(home: str | os.PathLike | None = None) -> Path:
    """``<home>/pools``, made if missing: ``home`` is this user's own folder of the store
    (``Settings.user_dir``; on a node, its workdir). ``PoolUnavailable`` when the folder is
    not this user's alone."""
    folder = Path(home) if home is not None else default_home()
    return own_pools(folder / POOLS_DIR)


def pool_key(python: str, env_id: str, modules: Sequence[str]) -> str:
    """One pool per interpreter, environment and module set (and PYTHONPATH, which decides
    what those names import): a changed one gets a new pool, never a stale one."""
    text = json.dumps(
        [os.path.abspath(python), env_id, sorted(set(modules)), os.environ.get("PYTHONPATH", "")]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def entry_modules(code_dir: str, entry: str) -> list[str]:
    """torch, and the modules ``entry`` imports that are neither part of the snapshot (those
    change from run to run, so a pool never holds them) nor in the standard library (cheap
    to import in the rank: a cell that adds ``import time`` keeps its pool)."""
    found = set(BASE_MODULES)
    try:
        tree = ast.parse(Path(code_dir, entry).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return sorted(found)
    for node in ast.walk(tree):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module]
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
            else []
        )
        for name in names:
            top = name.split(".")[0]
            if (
                top in _NOT_PRELOADED
                or top in sys.stdlib_module_names
                or any(Path(code_dir, top + s).exists() for s in ("", ".py"))
                or Path(code_dir, "_jt", "azureml_v1", top).exists()  # v1's script side
            ):
                continue
            found.add(name)
    return sorted(found)


def torchrun_env(
    base: Mapping[str, str],
    *,
    rank: int,
    world_size: int,
    master_port: int,
    elastic_id: str,
    error_dir: str,
    master_addr: str = "localhost",
    local_rank: int | None = None,
    local_world_size: int | None = None,
    node_rank: int = 0,
    nodes: int = 1,
) -> dict[str, str]:
    """What torchrun gives worker ``rank``, over ``base``: on one node as ``--standalone``
    does, or (``node_rank`` of ``nodes``, ``local_world_size`` ranks each) as one of a
    multi-node c10d rendezvous does. One difference: ``TORCHELASTIC_USE_AGENT_STORE`` is
    False (there is no agent, so rank 0 hosts the store at MASTER_ADDR:MASTER_PORT, as
    ``env://`` does outside torchrun)."""
    local = rank if local_rank is None else local_rank
    per_node = world_size if local_world_size is None else local_world_size
    env = dict(base)
    env.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "GROUP_RANK": str(node_rank),
            "ROLE_RANK": str(rank),
            "ROLE_NAME": "default",
            "WORLD_SIZE": str(world_size),
            "LOCAL_WORLD_SIZE": str(per_node),
            "GROUP_WORLD_SIZE": str(nodes),
            "ROLE_WORLD_SIZE": str(world_size),
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": elastic_id,
            "TORCHELASTIC_USE_AGENT_STORE": "False",
            "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
            "TORCHELASTIC_ERROR_FILE": os.path.join(
                error_dir, "attempt_0", str(local), "error.json"
            ),
        }
    )
    return env


def error_dir(run_dir: str, elastic_id: str) -> str:
    """torchrun's per-run folder of error files (``@record`` writes a rank's error there), in
    the run's scratch as ``--log-dir`` puts torchrun's own, never a new folder in /tmp."""
    return os.path.join(run_dir, "work", ".torchrun", elastic_id)


def new_elastic_id() -> str:
    return str(uuid.uuid4())


def _connect(path: Path) -> socket.socket | None:
    address, dir_fd = unix_address(str(path))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address)
        return sock
    except OSError:
        sock.close()
        return None
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def _lock_free(folder: Path, key: str) -> bool:
    """True when no pool holds ``key``'s lock (none runs, or it died starting)."""
    fd = os.open(folder / f"{key}.lock", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        return False
    finally:
        os.close(fd)


def _spawn_here(argv: Sequence[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(argv),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=60,
        start_new_session=True,
    )


def connect_or_start(
    python: str,
    key: str,
    modules: Sequence[str],
    env: Mapping[str, str],
    home: str | os.PathLike | None = None,
    idle: float | None = None,
    program: Sequence[str] | None = None,
    spawn: Any = None,
) -> tuple[socket.socket, bool]:
    """A connection to pool ``key`` and whether it was warm (already running). ``program``
    starts a pool (default ``python -u -m jupyter_trainer.rankside.hotstart``; a node runs its copy of
    the pool's files, see ``node_launch``); ``spawn(argv, env, cwd)`` runs it (default: here;
    in a held Slurm allocation, the node's keeper)."""
    folder = pools_dir(home)
    path = folder / f"{key}.sock"
    sock = _connect(path)
    if sock is not None:
        return sock, True
    if idle is None:
        idle = float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S)
    argv = [
        *(program or (python, "-u", "-m", "jupyter_trainer.rankside.hotstart")),
        "--socket",
        str(path),
        "--key",
        key,
        "--idle",
        str(idle),
        "--modules",
        ",".join(modules),
    ]
    try:
        starter = (spawn or _spawn_here)(argv, dict(env), str(folder))
    except (OSError, subprocess.SubprocessError) as exc:
        raise PoolUnavailable(f"the pool could not start: {exc}") from exc
    if starter.returncode != 0:
        said = starter.stderr.decode(errors="replace").strip().splitlines()
        raise PoolUnavailable(
            f"the pool could not start: {said[-1] if said else starter.returncode}"
        )
    started = time.monotonic()
    while time.monotonic() - started < START_TIMEOUT_S:
        sock = _connect(path)
        if sock is not None:
            return sock, False
        if time.monotonic() - started > 3.0 and _lock_free(folder, key):
            break
        time.sleep(0.05)
    log = folder / f"{key}.log"
    tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
    raise PoolUnavailable(f"the pool did not start listening{': ' + tail[0] if tail else ''}")


def ask(sock: socket.socket, request: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """Send one request to a pool over ``sock`` and return its one-line JSON answer."""
    sock.settimeout(timeout)
    sock.sendall(json.dumps(request).encode() + b"\n")
    data = b""
    while b"\n" not in data:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise PoolUnavailable("the pool closed the connection without an answer")
        data += chunk
    line, rest = data.split(b"\n", 1)
    reply = json.loads(line)
    reply["_rest"] = rest
    return reply


class PoolRun:
    """A run's ranks in a pool, followed over the connection that started them."""

    def __init__(
        self, sock: socket.socket, reply: dict[str, Any], warm: bool, log_path: str
    ) -> None:
        self.sock, self.reply, self.warm, self.log_path = sock, reply, warm, log_path
        self.buffer: bytes = reply.pop("_rest", b"")
        self.exits: dict[int, int] = {}
        self.exit: int | None = None
        self.lost: str | None = None
        self.local_ranks: dict[int, int] = {}  # rank -> local rank, where they differ
        sock.setblocking(False)

    def poll(self) -> int | None:
        """None while ranks run; then 0, or 1 when a rank failed (as torchrun exits), or
        -SIGKILL when the pool itself went away (its ranks died with it)."""
        if self.exit is not None:
            return self.exit
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._lost()
                break
            self.buffer += chunk
        while b"\n" in self.buffer and self.exit is None:
            line, self.buffer = self.buffer.split(b"\n", 1)
            self._message(json.loads(line))
        return self.exit

    def _message(self, message: dict[str, Any]) -> None:
        if "rank" in message:
            self.exits[int(message["rank"])] = int(message["exit"])
        if message.get("done"):
            self.exit = int(message["exit"])
            failed = {r: c for r, c in sorted(self.exits.items()) if c != 0}
            if failed:
                self._note(_summary(failed, self.reply.get("ranks") or {}, self.local_ranks))
            self.close()

    def _lost(self) -> None:
        if self.exit is not None:
            return
        pool = self.reply.get("pool")
        self.lost = (
            f"the rank pool (pid {pool}) ended while the ranks ran; its ranks were "
            f"killed with it (SIGKILL)"
        )
        self._note(f"[jt pool] {self.lost}\n")
        self.exit = -signal.SIGKILL
        self.close()

    def _note(self, text: str) -> None:
        try:
            with open(self.log_path, "a", encoding="utf-8") as log:
                log.write(text)
        except OSError:
            pass

    def stop(self) -> None:
        """Ask the pool to end the ranks (SIGTERM, then SIGKILL); ``poll`` still follows them
        to their end."""
        if self.exit is None:
            try:
                self.sock.sendall(b'{"op": "stop"}\n')
            except OSError:
                pass

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _summary(
    failed: dict[int, int], ranks: dict[str, Any], local_ranks: Mapping[int, int] | None = None
) -> str:
    """Failed ranks in torchrun's own words, which the supervisor already reads."""
    lines = ["[jt pool] ranks failed:"]
    for rank, code in failed.items():
        pid = (ranks.get(str(rank)) or {}).get("pid")
        local = (local_ranks or {}).get(rank, rank)
        lines += [
            f"  rank      : {rank} (local_rank: {local})",
            f"  exitcode  : {code} (pid: {pid})",
        ]
    return "\n".join(lines) + "\n"


def start_ranks(
    python: str,
    key: str,
    modules: Sequence[str],
    pool_env: Mapping[str, str],
    request: dict[str, Any],
    home: str | os.PathLike | None = None,
    idle: float | None = None,
    program: Sequence[str] | None = None,
    spawn: Any = None,
) -> PoolRun:
    """Start a run's ranks in pool ``key`` (started first if none runs); PoolUnavailable
    says why when the pool cannot (the caller falls back to torchrun)."""
    sock, warm = connect_or_start(python, key, modules, pool_env, home, idle, program, spawn)
    try:
        reply = ask(
            sock,
            {
                "op": "run",
                **request,
                "supervisor": {"pid": os.getpid(), "start_ticks": procs.start_ticks(os.getpid())},
            },
        )
    except (OSError, ValueError) as exc:
        sock.close()
        raise PoolUnavailable(f"the pool did not answer: {exc}") from exc
    except PoolUnavailable:
        sock.close()
        raise
    if not reply.get("ok"):
        sock.close()
        raise PoolUnavailable(reply.get("why") or "the pool refused the run")
    return PoolRun(sock, reply, warm, request["log"])


def pool_record(key: str, home: str | os.PathLike | None = None) -> dict[str, Any]:
    return read_json(pools_dir(home) / f"{key}.json")
