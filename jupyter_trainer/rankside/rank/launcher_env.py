"""Which rank a process is, from the variables of whichever launcher started it.

Open MPI, Horovod, Slurm and PMI each name ranks their own way; ``rank_source`` reads them as
torch's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``/... names. The boot script also sets up
``init_process_group`` here (``force_backend``, ``separate_restarts``). Imported inside the
ranks, so it is copied into every snapshot and uses the standard library only (torch is
imported only where it is patched).
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from ..frameworks.import_hooks import when_imported

STORE_FD_ENV = "JT_STORE_LISTEN_FD"  # pool.child.STORE_FD_ENV
LEAVE_WITHIN = 60.0  # how long rank 0 keeps the store for ranks that have not left yet
_stores: list[tuple[Any, int, int]] = []  # (store, rank, world size) of each rendezvous


def slurm_tasks_on_node(spec: str, node: int) -> str | None:
    """Tasks on node ``node`` from ``SLURM_TASKS_PER_NODE`` such as ``"2(x3),1"``."""
    counts: list[str] = []
    for part in spec.split(","):
        count, _, repeat = part.partition("(x")
        counts.extend([count] * (int(repeat.rstrip(")")) if repeat else 1))
    return counts[node] if 0 <= node < len(counts) else None


def ompi_node_index(env: os._Environ[str] | dict[str, str]) -> str | None:
    """This node's index among the job's nodes, where Open MPI's variables pin it down.

    ``OMPI_COMM_WORLD_NODE_RANK`` is *not* that (it is a rank among the processes on this
    node). With one node it is 0; with a uniform by-slot layout (the default: node 0's
    slots first) it is rank // local size; otherwise it is left unknown.
    """
    try:
        nodes = int(env.get("OMPI_MCA_orte_num_nodes", ""))
        rank, size = int(env["OMPI_COMM_WORLD_RANK"]), int(env["OMPI_COMM_WORLD_SIZE"])
        local, local_size = (
            int(env["OMPI_COMM_WORLD_LOCAL_RANK"]),
            int(env["OMPI_COMM_WORLD_LOCAL_SIZE"]),
        )
    except (KeyError, ValueError):
        return None
    if nodes == 1:
        return "0"
    if local_size > 0 and size == nodes * local_size and local == rank % local_size:
        return str(rank // local_size)
    return None


def map_ranks(env: os._Environ[str] | dict[str, str]) -> None:
    """Fill torch's rank variables in ``env`` from the launcher's, unless ``RANK`` is set
    already (the runtime does this to ``os.environ`` when a rank imports it)."""
    if "RANK" in env:
        return
    for name, value in rank_source(env).items():
        if value is not None and value != "":
            env[name] = value


def rank_source(env: os._Environ[str] | dict[str, str]) -> dict[str, str | None]:
    """RANK, WORLD_SIZE, ... as the first launcher found in ``env`` gives them (may be empty)."""
    if "OMPI_COMM_WORLD_RANK" in env:
        node = ompi_node_index(env)
        return {
            "RANK": env["OMPI_COMM_WORLD_RANK"],
            "WORLD_SIZE": env.get("OMPI_COMM_WORLD_SIZE"),
            "LOCAL_RANK": env.get("OMPI_COMM_WORLD_LOCAL_RANK"),
            "LOCAL_WORLD_SIZE": env.get("OMPI_COMM_WORLD_LOCAL_SIZE"),
            "GROUP_RANK": node,
            "NODE_RANK": node,
        }
    if "HOROVOD_RANK" in env:
        node = env.get("HOROVOD_CROSS_RANK")
        return {
            "RANK": env["HOROVOD_RANK"],
            "WORLD_SIZE": env.get("HOROVOD_SIZE"),
            "LOCAL_RANK": env.get("HOROVOD_LOCAL_RANK"),
            "LOCAL_WORLD_SIZE": env.get("HOROVOD_LOCAL_SIZE"),
            "GROUP_RANK": node,
            "NODE_RANK": node,
        }
    if "SLURM_PROCID" in env:
        node = env.get("SLURM_NODEID")
        local_size = None
        if node is not None and env.get("SLURM_TASKS_PER_NODE"):
            try:
                local_size = slurm_tasks_on_node(env["SLURM_TASKS_PER_NODE"], int(node))
            except ValueError:
                local_size = None
        return {
            "RANK": env["SLURM_PROCID"],
            "WORLD_SIZE": env.get("SLURM_NTASKS"),
            "LOCAL_RANK": env.get("SLURM_LOCALID"),
            "LOCAL_WORLD_SIZE": local_size,
            "GROUP_RANK": node,
            "NODE_RANK": node,
        }
    if "PMI_RANK" in env:
        return {
            "RANK": env["PMI_RANK"],
            "WORLD_SIZE": env.get("PMI_SIZE"),
            "LOCAL_RANK": env.get("MPI_LOCALRANKID"),
            "LOCAL_WORLD_SIZE": env.get("MPI_LOCALNRANKS"),
        }
    return {}


def force_backend(backend: str) -> None:
    """Make ``init_process_group()`` without a backend use the one the user forced."""
    import torch.distributed as dist

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args and args[0] is None:
            args = (backend, *args[1:])
        elif not args and kwargs.get("backend") is None:
            kwargs["backend"] = backend
        return original(*args, **kwargs)

    # torch's own type for the attribute; the wrapper takes the same arguments
    setattr(dist, "init_process_group", init_process_group)  # noqa: B010


def join_before_returning() -> None:
    """``init_process_group`` returns only once every rank has made the group.

    Since torch 2.1 it returns as soon as this rank's own connections are made. A rank that
    then ends at once (a cell with no collective, a rank with nothing to do) closes its
    connections while a slower peer is still setting up its side, and the peer fails with
    Gloo's "Connection closed by peer", blamed on a crash that never happened. torch's own
    store-based barrier after the group is made closes that window, for one store round
    trip; a run whose environment sets ``TORCH_DIST_INIT_BARRIER`` keeps its own choice.
    """
    os.environ.setdefault("TORCH_DIST_INIT_BARRIER", "1")


def separate_restarts() -> None:
    """After torchrun restarted the ranks, give this attempt's process group keys of its own.

    torchrun points every attempt's ranks at the same store (its agent's) with no prefix per
    attempt, so the keys an earlier attempt's ranks left (their Gloo addresses) are still
    there: a rank that reads a peer's key before the peer has written it again connects to a
    process that is gone, and fails with "Connection refused". Here ``init_process_group``
    with the default ``env://`` rendezvous gets that store under ``/jt/attempt_<n>/``.
    """
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    if attempt in ("", "0") or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return
    import torch.distributed as dist
    from torch.distributed.constants import default_pg_timeout

    original = dist.init_process_group

    @functools.wraps(original)
    def init_process_group(
        backend: Any = None,
        init_method: Any = None,
        timeout: Any = None,
        world_size: int = -1,
        rank: int = -1,
        store: Any = None,
        **kwargs: Any,
    ) -> Any:
        if store is None and init_method in (None, "env://"):
            world_size = int(os.environ["WORLD_SIZE"]) if world_size == -1 else world_size
            rank = int(os.environ["RANK"]) if rank == -1 else rank
            shared = dist.TCPStore(
                os.environ["MASTER_ADDR"],
                int(os.environ["MASTER_PORT"]),
                world_size,
                is_master=False,
                timeout=timeout or default_pg_timeout,
            )
            store, init_method = dist.PrefixStore(f"/jt/attempt_{attempt}/", shared), None
        return original(backend, init_method, timeout, world_size, rank, store, **kwargs)

    # torch's own type for the attribute; the wrapper takes the same arguments
    setattr(dist, "init_process_group", init_process_group)  # noqa: B010


def host_store_on_held_port() -> None:
    """Rank 0 of a run forked by a pool: host the rendezvous store on the socket the pool
    bound and listens on (``$JT_STORE_LISTEN_FD``, port ``$MASTER_PORT``), rather than bind
    that port anew, which another process may have taken since it was chosen.

    torch's ``env://`` and ``tcp://`` rendezvous make their store in
    ``torch.distributed.rendezvous._create_c10d_store``; the first store rank 0 makes there on
    that port is made on the held socket (``TCPStore(master_listen_fd=...)``), the rest as
    torch makes them. Patched now if torch is loaded (a warm pool preloads it), else when the
    cell imports it."""
    text = os.environ.pop(STORE_FD_ENV, None)
    if not text:
        return
    held = [int(text)]
    port = int(os.environ.get("MASTER_PORT", "0"))

    def patch(rendezvous: Any) -> None:
        original = rendezvous._create_c10d_store

        @functools.wraps(original)
        def create_store(
            hostname: str,
            port_: int,
            rank: int,
            world_size: int,
            timeout: Any,
            use_libuv: bool = True,
        ) -> Any:
            if (
                held
                and rank == 0
                and int(port_) == port
                and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
            ):
                return rendezvous.TCPStore(
                    host_name=hostname,
                    port=port,
                    world_size=world_size,
                    is_master=True,
                    timeout=timeout,
                    multi_tenant=True,
                    master_listen_fd=held.pop(),
                    use_libuv=use_libuv,
                )
            return original(hostname, port_, rank, world_size, timeout, use_libuv)

        rendezvous._create_c10d_store = create_store

    when_imported("torch.distributed.rendezvous", patch)


def keep_rendezvous_stores() -> None:
    """Keep the store of each ``env://`` or ``tcp://`` rendezvous this rank makes, for
    ``leave_together``.

    Without torchrun's agent, rank 0's process hosts that store, and it closes when rank 0
    ends. A peer that still has a store call to make then fails with "Broken pipe", blamed
    on a crash that never happened: torch's own barrier at the end of
    ``init_process_group`` is such a call, and a finished rank 0 can end before a peer
    descheduled under load has made it. Under torchrun the agent hosts the store and
    outlives the ranks, so nothing is kept there; nor in a one-rank run."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return
    if os.environ.get("WORLD_SIZE", "1") in ("", "0", "1"):
        return

    def patch(rendezvous: Any) -> None:
        original = rendezvous._create_c10d_store

        @functools.wraps(original)
        def create_store(
            hostname: str, port: int, rank: int, world_size: int, *args: Any, **kwargs: Any
        ) -> Any:
            store = original(hostname, port, rank, world_size, *args, **kwargs)
            _stores.append((store, int(rank), int(world_size)))
            return store

        rendezvous._create_c10d_store = create_store

    when_imported("torch.distributed.rendezvous", patch)


def leave_together(
    within: float = LEAVE_WITHIN, peers_gone: Callable[[int], bool] | None = None
) -> None:
    """Called once the rank's code has ended well: say so in each store kept by
    ``keep_rendezvous_stores``, and on rank 0, which hosts it, keep it open until every rank
    has said so, until ``peers_gone(world_size)`` says every other rank's process has ended
    (one that ended some other way: ``os._exit``, a signal), or for ``within`` seconds."""
    for index, (store, rank, world_size) in enumerate(_stores):
        key = f"jt/left/{index}"
        try:
            left = store.add(key, 1)
        except Exception:  # rank 0 and its store are gone already: nothing to wait for
            continue
        deadline, pause = time.monotonic() + within, 0.01
        while rank == 0 and left < world_size and time.monotonic() < deadline:
            if peers_gone is not None and peers_gone(world_size):
                break
            time.sleep(pause)
            pause = min(2 * pause, 0.2)
            try:
                left = store.add(key, 0)
            except Exception:
                break
    _stores.clear()


def leave_with_peers(rank_death: Any, ranks: str | None) -> None:
    """``leave_together``, where rank 0 counts a peer whose record in ``ranks`` says its
    process has exited as left too (a record on another node, or not written yet, says
    nothing)."""

    def peers_gone(world_size: int) -> bool:
        return ranks is not None and all(
            "exited" in (rank_death.read_record(os.path.join(ranks, f"rank-{rank}.json")) or {})
            for rank in range(1, world_size)
        )

    leave_together(peers_gone=peers_gone)


def flight_recorder(why: str | None = None) -> None:
    """PyTorch's Flight Recorder turned on for this rank (``why`` None), or this rank's
    recorder dumped into the run folder, and asked of every other rank unless ``why`` is
    ``"end"`` (``rankside/observe/flight_recorder.py``)."""
    try:
        from ..observe import flight_recorder as recorder
    except ImportError:  # a rank side that does not ship it
        return
    try:
        if why is None:
            recorder.install(os.environ.get("JT_RUN_DIR") or None)
        else:
            recorder.dump_now(why, share=why != "end")
    except Exception as exc:  # the rank's own start or end goes on all the same
        print(f"[jt] the flight recorder failed: {exc!r}", file=sys.stderr)
