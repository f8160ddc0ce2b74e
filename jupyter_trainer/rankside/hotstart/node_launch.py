"""A hot run's launcher on a remote node (ssh): what the node's keeper starts in torchrun's
place, exactly as it would start torchrun (so following, stopping and the recorded exit are
unchanged).

``python <run folder>/pool/launch.py warm|run ARGS``: the pool's files (this package,
shipped as ``_jt_node_pool`` by ``bundle``) in the run folder; nothing else of
jupyter_trainer needs to be installed on the node.

- ``warm``: install the pool's files once under ``<workdir>/pools/code-<hash>`` (the pool
  outlives the run, so it never runs from a run folder), then find the node's pool for the
  run's interpreter, environment and modules or start it (detached; it exits when idle),
  and print ``{"ok": true, "warm": ..., "pool": pid}`` or ``{"ok": false, "why": ...}``.
  The target warms every node before any launcher starts, so either every node of a run
  is hot or every node runs torchrun (their rendezvous differ).
- ``run``: hand the pool this node's ranks with what torchrun gives the workers of a
  multi-node run (``RANK = node_rank * procs + local_rank``, ``GROUP_RANK`` the node rank,
  ``MASTER_ADDR``/``MASTER_PORT`` node 0's address and the run's port, where rank 0 hosts
  the store), follow them, and exit as torchrun does: 0, or 1 with its failure summary when
  a rank failed. SIGTERM, SIGINT or SIGHUP stop the ranks (SIGTERM, then SIGKILL) and this
  waits for their end. The pool watches this process: killing it ends the ranks too,
  ``SUPERVISOR_GRACE_S`` later (the run's supervisor sees the launcher's death first and
  stops them itself, as it stops torchrun's orphans). A pool killed mid-run takes its ranks
  with it, and this launcher says so in its log and ends by SIGKILL, as its ranks did.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .client import (
    PoolUnavailable,
    ask,
    connect_or_start,
    error_dir,
    pools_dir,
    start_ranks,
    torchrun_env,
)

BUNDLE_PACKAGE = "_jt_node_pool"
SUPERVISOR_GRACE_S = 5.0
KEEPER_START_S = 60.0  # a new allocation's keeper starts with its first step
IMPORT_SHAPING = (
    "PYTHONPATH",
    "PYTHONHOME",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "VIRTUAL_ENV",
    "CUDA_HOME",
    "CUDA_VISIBLE_DEVICES",
)


def pool_env(env: dict[str, str]) -> dict[str, str]:
    """The pool's environment: the launcher's, less jt's own variables (a pool serves many
    runs, and a process showing ``JT_RUN_ID`` would count as one of that run's)."""
    return {k: v for k, v in env.items() if not k.startswith("JT_")}


def as_launched(args: dict[str, Any]) -> dict[str, str]:
    """The environment the node's keeper gives the launcher (``warm`` runs from the agent,
    which passes its own), from the launch's ``env``, ``env_defaults`` and ``path_prepend``."""
    env = dict(args.get("env_defaults") or {}, **pool_env(dict(os.environ)))
    env.update(args.get("env") or {})
    if args.get("path_prepend"):
        env["PATH"] = os.pathsep.join([*args["path_prepend"], env.get("PATH", os.defpath)])
    return env


def node_pool_key(args: dict[str, Any], env: dict[str, str]) -> str:
    """One pool per host and network namespace (nodes may share a workdir, and a unix
    socket reaches across namespaces), interpreter, environment, module set,
    import-shaping variables and version of the pool's files."""
    try:
        netns = os.readlink("/proc/self/ns/net")
    except OSError:
        netns = ""
    text = json.dumps(
        [
            socket.gethostname(),
            netns,
            os.path.abspath(args["python"]),
            args["env_id"],
            sorted(set(args["modules"])),
            {k: env.get(k) for k in IMPORT_SHAPING},
            args.get("bundle", ""),
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def pool_program(args: dict[str, Any]) -> list[str] | None:
    """How to start a pool here: from the installed copy of the shipped files (None: this
    is jupyter_trainer itself, ``python -m jupyter_trainer.rankside.hotstart``)."""
    if not (__package__ or "").startswith(BUNDLE_PACKAGE):
        return None
    shipped = Path(__file__).resolve().parents[2]
    installed = pools_dir(args["home"]) / f"code-{args['bundle']}"
    if not installed.is_dir():
        tmp = installed.with_name(f".{installed.name}.{os.getpid()}.tmp")
        shutil.copytree(shipped, tmp, ignore=shutil.ignore_patterns("__pycache__"))
        try:
            os.rename(tmp, installed)
        except OSError:  # another node sharing this workdir installed it first
            shutil.rmtree(tmp, ignore_errors=True)
    return [args["python"], "-u", str(installed / "pool.py")]


def _keeper_path(args: dict[str, Any]) -> Path | None:
    """The node's keeper of a held Slurm allocation (``args["keeper"]``), else None."""
    if not args.get("keeper"):
        return None
    from .keeper import keeper_socket

    return keeper_socket(args["home"], os.environ["SLURM_JOB_ID"], socket.gethostname())


def _keeper_spawn(args: dict[str, Any], key: str) -> Any:
    """``spawn`` for ``connect_or_start``: the node's keeper starts the pool, in its step."""
    path = _keeper_path(args)
    if path is None:
        return None

    def spawn(argv: Sequence[str], env: dict[str, str], cwd: str) -> subprocess.CompletedProcess:
        sock = _keeper_connection(path)
        try:
            said = ask(
                sock,
                {
                    "op": "spawn",
                    "argv": list(argv),
                    "env": env,
                    "cwd": cwd,
                    "record": str(pools_dir(args["home"]) / f"{key}.json"),
                },
                90,
            )
        finally:
            sock.close()
        if not said.get("ok"):
            raise OSError(f"the allocation's keeper could not start the pool: {said.get('why')}")
        return subprocess.CompletedProcess(argv, said["returncode"], b"", said["stderr"].encode())

    return spawn


def _keeper_connection(path: Path, wait: float = KEEPER_START_S) -> socket.socket:
    """A connection to the node's keeper, which may still be starting in a new allocation."""
    from .server import unix_address

    deadline = time.monotonic() + wait
    while True:
        address, dir_fd = unix_address(str(path))
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            if time.monotonic() >= deadline:
                raise PoolUnavailable(
                    f"the allocation's keeper does not answer at {path}: {exc}"
                ) from exc
        finally:
            if dir_fd is not None:
                os.close(dir_fd)
        time.sleep(0.1)


def warm(args: dict[str, Any]) -> dict[str, Any]:
    env = pool_env(as_launched(args))
    key = node_pool_key(args, env)
    try:
        program = pool_program(args)
        for attempt in (1, 2):  # a pool whose files changed exits when asked: start anew
            sock, was_warm = connect_or_start(
                args["python"],
                key,
                args["modules"],
                env,
                args["home"],
                args.get("idle"),
                program,
                _keeper_spawn(args, key),
            )
            try:
                said = ask(sock, {"op": "ping"}, timeout=30)
            finally:
                sock.close()
            if said.get("ok"):
                return {
                    "ok": True,
                    "warm": was_warm,
                    "pool": said.get("pool"),
                    "key": key,
                    "host": socket.gethostname(),
                }
            if attempt == 2 or "changed" not in str(said.get("why")):
                return {"ok": False, "why": said.get("why") or "the pool refused"}
    except (PoolUnavailable, OSError, ValueError) as exc:
        return {"ok": False, "why": str(exc)}
    return {"ok": False, "why": "the pool refused"}


def rank_request(args: dict[str, Any], base: dict[str, str]) -> dict[str, Any]:
    """This node's ranks, each with the environment torchrun gives a multi-node worker."""
    per_node, node, nodes = args["procs"], args["node_rank"], args["nodes"]
    errors = error_dir(args["run_dir"], args["elastic_id"])
    ranks = [
        {
            "rank": node * per_node + local,
            "local_rank": local,
            "env": torchrun_env(
                base,
                rank=node * per_node + local,
                world_size=per_node * nodes,
                master_port=args["master_port"],
                elastic_id=args["elastic_id"],
                error_dir=errors,
                master_addr=args["master_addr"],
                local_rank=local,
                local_world_size=per_node,
                node_rank=node,
                nodes=nodes,
            ),
        }
        for local in range(per_node)
    ]
    run_dir = args["run_dir"]
    # A killed launcher is seen by the run's supervisor, which stops the ranks as it would
    # torchrun's orphans; the pool ends them itself only if nobody has by then.
    request = {
        "run_id": args["run_id"],
        "run_dir": run_dir,
        "cwd": run_dir,
        "ranks": ranks,
        "supervisor_grace": SUPERVISOR_GRACE_S,
        "log": os.path.join(run_dir, "logs", f"launcher-{node}.log"),
        "argv": args["argv"],
    }
    if node == 0:  # rank 0's node holds the rendezvous port while its ranks start
        # One node: any free port, which no other node needs to be told. Several: the run's
        # own, which every node's ranks are given.
        request["store"] = {"port": int(args["master_port"]) if nodes > 1 else 0}
    return request


def run(args: dict[str, Any]) -> int:
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))
    if args.get("node_rank") is None:  # a step of a held Slurm allocation: one task a node
        args = {
            **args,
            "node_rank": int(os.environ["SLURM_NODEID"]),
            "master_addr": os.environ["MASTER_ADDR"],
        }
    env = pool_env(dict(os.environ))
    request = rank_request(args, dict(os.environ))
    key = node_pool_key(args, env)
    try:
        keeper = _keeper_path(args)
        lease = None if keeper is None else _keeper_connection(keeper)
        if lease is not None:  # the allocation stays while this run trains
            ask(lease, {"op": "lease"}, 30)
        program, spawn = pool_program(args), _keeper_spawn(args, key)
        try:
            pool_run = start_ranks(
                args["python"],
                key,
                args["modules"],
                env,
                request,
                args["home"],
                args.get("idle"),
                program,
                spawn,
            )
        except PoolUnavailable as exc:
            if "changed" not in str(exc):
                raise
            pool_run = start_ranks(
                args["python"],
                key,
                args["modules"],
                env,
                request,
                args["home"],
                args.get("idle"),
                program,
                spawn,
            )
    except (PoolUnavailable, OSError) as exc:
        print(
            f"[jt pool] node {args['node_rank']}: the rank pool could not start the ranks: {exc}",
            flush=True,
        )
        return 1
    pool_run.local_ranks = {r["rank"]: r["local_rank"] for r in request["ranks"]}
    print(
        f"[jt pool] node {args['node_rank']}: ranks "
        f"{', '.join(str(r['rank']) for r in request['ranks'])} forked by the rank pool "
        f"(pid {pool_run.reply['pool']}, {'warm' if pool_run.warm else 'started now'})",
        flush=True,
    )
    asked = False
    while pool_run.poll() is None:
        if stopping and not asked:
            pool_run.stop()
            asked = True
        try:
            select.select([pool_run.sock], [], [], 0.2)
        except (OSError, ValueError):
            pass
    if pool_run.lost:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return pool_run.exit or 0


def main(argv: Sequence[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("warm", "run"):
        sys.stderr.write("usage: launch.py warm|run ARGS\n")
        return 2
    args = json.loads(argv[1])
    if argv[0] == "warm":
        print(json.dumps(warm(args)), flush=True)
        return 0
    return run(args)
