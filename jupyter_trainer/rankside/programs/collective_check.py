"""The program of ``jupyter-trainer check``: every rank of the allocation joins the process
group, then times the collectives and the links between nodes, as nccl-tests does.

    python collective_check.py [--max-bytes N] [--min-bytes N] [--time-limit S]

Before it joins, each rank records what it is (host, the network interface toward the
rendezvous host and the one the backend was told to use, torch, CUDA and NCCL versions) as
one event, so that a rank that never joins is still described. After it joins, it records
the time it took. Then, for ``all_reduce``, ``all_gather`` and ``broadcast`` over message
sizes doubling from ``--min-bytes`` to ``--max-bytes``, it times enough iterations (after a
warm-up) and logs, with the size in bytes as the step:

- ``OP/time_us``: the mean time of one operation;
- ``OP/algbw_GBps``: bytes / time;
- ``OP/busbw_GBps``: the algorithm bandwidth times nccl-tests' factor, ``2(n-1)/n`` for
  ``all_reduce``, ``(n-1)/n`` for ``all_gather`` (whose size is the gathered total) and 1 for
  ``broadcast``, so that it can be compared with the hardware's link speed.

With several nodes, the first rank of each node sends to the first rank of every other node
in turn (the others wait): 8 bytes many times for the latency, ``min(max-bytes, 64 MiB)`` for
the bandwidth. Rank 0 writes everything to ``outputs/check.json``. Torch is imported inside
``main``: the node has it by definition.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import socket
import struct
import sys
import time
from typing import Any

OPS = ("all_reduce", "all_gather", "broadcast")
P2P_BYTES = 64 << 20
MIN_SECONDS = 0.05  # time each size for about this long...
MIN_ITERS = 5  # ...in at least this many iterations (one is all noise at 64 MiB)...
MAX_ITERS = 50  # ...and at most this many
SIOCGIFADDR = 0x8915


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' factor from algorithm bandwidth to bus bandwidth."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "all_gather":
        return (n - 1) / n
    return 1.0


def sizes(low: int, high: int, step: int = 2) -> list[int]:
    """``low`` to ``high``, each ``step`` times the last; ``high`` itself always."""
    out, size = [], max(low, 1)
    while size <= high:
        out.append(size)
        size *= step
    if out and out[-1] != high:
        out.append(high)
    return out


def interface_of(address: str) -> str | None:
    """The local interface that holds ``address`` (an IPv4 address), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                packed = struct.pack("256s", name.encode()[:15])
                got = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, packed)
            except OSError:
                continue
            if socket.inet_ntoa(got[20:24]) == address:
                return name
    return None


def route_to(host: str, port: int) -> dict[str, Any]:
    """The local address and interface this host would use to reach ``host``."""
    found: dict[str, Any] = {"rendezvous": f"{host}:{port}"}
    try:
        target = socket.gethostbyname(host)
    except OSError as exc:
        found["resolve_error"] = f"{host} does not resolve: {exc}"
        return found
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((target, port or 9))
            local = probe.getsockname()[0]
    except OSError as exc:
        found["route_error"] = f"no route to {host} ({target}): {exc}"
        return found
    found.update(local_address=local, interface=interface_of(local))
    return found


def port_error(host: str, port: int, timeout: float = 3.0) -> str | None:
    """Why a TCP connection to ``host:port`` fails now, or None when it opens."""
    try:
        socket.create_connection((host, port), timeout).close()
    except TimeoutError:
        return (
            f"the rendezvous port {host}:{port} does not answer: the connection timed out "
            f"after {timeout:g} s (a firewall may drop it)"
        )
    except OSError as exc:
        return f"the rendezvous port {host}:{port} is unreachable: {exc.strerror or exc}"
    return None


def probe_while_joining(jt: Any, after: float) -> Any:
    """If this rank has not joined ``after`` seconds from now, try the rendezvous port and
    record why it cannot be reached (``rank/port_error``); returns the Event that stops it
    (set once the rank joined). By then rank 0's side listens, if rank 0 started."""
    import threading

    host = os.environ.get("MASTER_ADDR")
    port = int(os.environ.get("MASTER_PORT", "0") or 0)
    joined = threading.Event()

    def probe() -> None:
        if joined.wait(after) or not host or not port:
            return
        why = port_error(host, port)
        if why and not joined.is_set():
            jt.log(step=0, **{"rank/port_error": why})
            jt.flush()

    threading.Thread(target=probe, name="jt-check-probe", daemon=True).start()
    return joined


def describe_rank(backend: str) -> dict[str, Any]:
    """What this rank is, before it joins: host, interfaces, versions."""
    import torch

    names = [name for _, name in socket.if_nameindex()]
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "backend": backend,
        "interfaces": names,
    }
    if torch.cuda.is_available():
        try:
            info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception:
            pass
    for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
        value = os.environ.get(variable)
        if value:
            info[variable] = value
            wanted = [v.strip().lstrip("^=") for v in value.split(",") if v.strip()]
            if value.startswith("^"):
                continue  # an exclusion list names interfaces not to use
            missing = [w for w in wanted if not any(n.startswith(w) for n in names)]
            if missing:
                info["interface_error"] = (
                    f"{variable}={value} names no interface of this host ({', '.join(names)})"
                )
    host = os.environ.get("MASTER_ADDR")
    port = int(os.environ.get("MASTER_PORT", "0") or 0)
    if host:
        info.update(route_to(host, port))
    return info


def timed(run: Any, sync: Any, agree: Any) -> tuple[float, int]:
    """Mean seconds of ``run()`` over enough iterations, after a warm-up. Every rank runs
    the same number of them: rank 0's estimate (``agree``), or the collectives would not
    match up."""
    run()
    sync()
    start = time.perf_counter()
    run()
    sync()
    once = max(time.perf_counter() - start, 1e-9)
    iters = agree(min(MAX_ITERS, max(MIN_ITERS, int(MIN_SECONDS / once))))
    start = time.perf_counter()
    for _ in range(iters):
        run()
    sync()
    return (time.perf_counter() - start) / iters, iters


def operation(op: str, dist: Any, torch: Any, device: Any, count: int, n: int) -> Any:
    """One call of ``op`` on ``count`` float32 values (the gathered total for all_gather)."""
    if op == "all_gather":
        part = max(count // n, 1)
        send = torch.ones(part, dtype=torch.float32, device=device)
        out = torch.empty(part * n, dtype=torch.float32, device=device)
        return lambda: dist.all_gather_into_tensor(out, send)
    buf = torch.ones(count, dtype=torch.float32, device=device)
    if op == "all_reduce":
        return lambda: dist.all_reduce(buf)
    return lambda: dist.broadcast(buf, 0)


def collectives(dist: Any, torch: Any, device: Any, sizes_: list[int], jt: Any) -> dict[str, Any]:
    n = dist.get_world_size()
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    results: dict[str, Any] = {op: [] for op in OPS}
    count_of = torch.zeros(1, dtype=torch.int64, device=device)

    def agree(iters: int) -> int:
        count_of.fill_(iters)
        dist.broadcast(count_of, 0)
        return int(count_of.item())

    for size in sizes_:
        count = max(size // 4, 1)
        for op in OPS:
            run = operation(op, dist, torch, device, count, n)
            seconds, iters = timed(run, sync, agree)
            moved = count * 4 if op != "all_gather" else max(count // n, 1) * n * 4
            algbw = moved / seconds / 1e9
            row = {
                "bytes": moved,
                "time_us": seconds * 1e6,
                "algbw_GBps": algbw,
                "busbw_GBps": algbw * bus_factor(op, n),
                "iterations": iters,
            }
            results[op].append(row)
            jt.log(
                step=moved,
                **{f"{op}/{k}": row[k] for k in ("time_us", "algbw_GBps", "busbw_GBps")},
            )
    return results


def links(dist: Any, torch: Any, device: Any, nbytes: int, jt: Any) -> list[dict[str, Any]]:
    """Latency and bandwidth between the first ranks of every two nodes, one pair at a time."""
    leaders = [None] * dist.get_world_size()
    mine = (jt.node_rank, socket.gethostname()) if jt.local_rank == 0 else None
    dist.all_gather_object(leaders, mine)
    nodes = sorted({(node, host, rank) for rank, (node, host) in _firsts(leaders)})
    out = []
    small = torch.zeros(2, dtype=torch.float32, device=device)
    big = torch.zeros(max(nbytes // 4, 1), dtype=torch.float32, device=device)
    for i, (node_a, host_a, rank_a) in enumerate(nodes):
        for node_b, host_b, rank_b in nodes[i + 1 :]:
            me = dist.get_rank()
            if me in (rank_a, rank_b):
                peer = rank_b if me == rank_a else rank_a
                latency = _pingpong(dist, small, me == rank_a, peer, 20)
                seconds = _pingpong(dist, big, me == rank_a, peer, 3)
                row: dict[str, Any] = {
                    "nodes": [node_a, node_b],
                    "hosts": [host_a, host_b],
                    "latency_us": latency / 2 * 1e6,
                    "bandwidth_GBps": big.numel() * 4 / (seconds / 2) / 1e9,
                }
                if me == rank_a:
                    out.append(row)
            dist.barrier()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, out)
    return [found for part in gathered for found in (part or [])]


def _firsts(leaders: list[Any]) -> list[tuple[int, tuple[int, str]]]:
    return [(rank, tuple(found)) for rank, found in enumerate(leaders) if found is not None]


def _pingpong(dist: Any, buf: Any, first: bool, peer: int, rounds: int) -> float:
    """Mean seconds of a send and its echo back."""
    start = time.perf_counter()
    for _ in range(rounds):
        if first:
            dist.send(buf, peer)
            dist.recv(buf, peer)
        else:
            dist.recv(buf, peer)
            dist.send(buf, peer)
    return (time.perf_counter() - start) / rounds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--min-bytes", type=int, default=8)
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--time-limit", type=float, default=60.0)
    parser.add_argument("--step", type=int, default=2)
    opts = parser.parse_args(argv)

    import datetime

    import torch
    import torch.distributed as dist

    from jupyter_trainer.rankside.rank import runtime as jt

    backend = os.environ.get("JT_BACKEND") or ("nccl" if torch.cuda.is_available() else "gloo")
    info = describe_rank(backend)
    jt.log(step=0, **{f"rank/{k}": v for k, v in info.items() if not isinstance(v, list)})
    jt.tag(kind="check")
    jt.flush()
    start = time.perf_counter()
    probing = probe_while_joining(jt, min(5.0, opts.time_limit / 2))
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=opts.time_limit))
    probing.set()
    joined = time.perf_counter() - start
    jt.log(step=0, rendezvous_s=joined)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", jt.local_rank)
        torch.cuda.set_device(device)
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, dict(info, rendezvous_s=joined))
    measured = collectives(
        dist, torch, device, sizes(opts.min_bytes, opts.max_bytes, opts.step), jt
    )
    between = links(dist, torch, device, min(opts.max_bytes, P2P_BYTES), jt)
    if jt.rank == 0:
        report = {
            "world_size": dist.get_world_size(),
            "backend": backend,
            "ranks": everyone,
            "collectives": measured,
            "links": between,
        }
        path = jt.outputs_dir / "check.json"
        path.write_text(json.dumps(report, indent=1))
        print(f"[jt] check: wrote {path}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
