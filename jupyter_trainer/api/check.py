"""``jupyter-trainer check``: prove, before a long run, that every rank of an allocation
joins and that the collectives and the links between nodes run at the speed they should.

A check is a run like any other (the same target, launcher, backend and path), of the
program ``rankside/programs/collective_check.py``, tagged ``kind=check``: it is listed with the runs,
and two checks compare with ``diff``. It has a hard time limit of seconds: a rank that has not
joined by then is named, with what its own record says about why (its host does not
resolve, it has no route, its socket interface does not exist, its versions differ), and the
run is canceled.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import SpecError
from ..rankside import CHECK, source
from ..targets import get_target
from .runs import Run, submit

VERSION_KEYS = ("torch", "cuda", "nccl", "python")


@dataclass
class CheckResult:
    """What a check found: ``ok``, the run, each rank's description, the collectives'
    figures and the links', and ``problems`` in words."""

    run: Run
    ok: bool
    world_size: int
    ranks: dict[int, dict[str, Any]]
    joined: dict[int, float]
    collectives: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    links: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def slowest_link(self) -> dict[str, Any] | None:
        return min(self.links, key=lambda row: row["bandwidth_GBps"]) if self.links else None


def check(
    target: str | None = None,
    *,
    nodes: int = 1,
    procs: int | None = None,
    backend: str | None = None,
    launcher: str | None = None,
    min_bytes: int = 8,
    max_bytes: int = 256 << 20,
    step: int = 2,
    time_limit: float = 60.0,
    env: str | None = None,
    home: str | os.PathLike | None = None,
) -> CheckResult:
    """Run the collective check on ``target`` with the allocation a run would get, and
    wait for it, at most ``time_limit`` seconds for the ranks to join plus the measuring.
    A rank that never joins ends the check as failed, naming it; nothing is left running.
    Message sizes go from ``min_bytes`` to ``max_bytes``, each ``step`` times the last."""
    if not 2 <= step <= 1024:
        raise SpecError(f"step {step}: give a factor between message sizes from 2 to 1024")
    if not 0 < time_limit <= 3600:
        raise SpecError(f"--time-limit {time_limit:g}: give seconds between 1 and 3600")
    if not 1 <= min_bytes <= max_bytes <= 16 << 30:
        raise SpecError(
            f"--min-bytes {min_bytes} and --max-bytes {max_bytes}: give 1 <= min <= max <= 16 GiB"
        )
    folder = Path(tempfile.mkdtemp(prefix="jt-check-"))
    try:
        script = folder / Path(CHECK).name  # collective_check.py, the run's script
        script.write_bytes(source(CHECK))
        given = {"target": target, "procs": procs, "launcher": launcher}
        run = submit(
            script=str(script),
            args=[
                f"--min-bytes={min_bytes}",
                f"--max-bytes={max_bytes}",
                f"--step={step}",
                f"--time-limit={time_limit:g}",
            ],
            name="check",
            nodes=nodes,
            backend=backend,
            env=env,
            autolog=False,
            system_interval=0,  # no sampler thread beside the collectives being timed
            home=home,
            **{k: v for k, v in given.items() if v is not None},  # type: ignore[arg-type]
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert isinstance(run, Run)
    return follow_check(run, time_limit)


def follow_check(run: Run, time_limit: float) -> CheckResult:
    """Wait for the ranks to join within ``time_limit`` (from the launcher's start), cancel
    the run if some never do, then read what it found."""
    world = run.spec.launch.world_size
    deadline = None
    reach: dict[int, str] = {}
    while True:
        state = run.store.current_state(run.id) or {}
        status = state.get("status")
        if status in ("completed", "failed", "canceled", "lost"):
            break
        if status == "running" and deadline is None:
            deadline = time.monotonic() + time_limit + 5
        if deadline is not None and time.monotonic() > deadline:
            missing = sorted(set(range(world)) - set(joined_ranks(run)))
            if not missing:
                deadline = float("inf")  # everyone joined: the measuring may take its time
                continue
            reach = unreachable(run, missing)  # while the rendezvous still listens
            run.cancel(
                reason=f"check: rank(s) {', '.join(map(str, missing))} never joined "
                f"within {time_limit:g} s"
            )
            break
        time.sleep(0.25)
    run.wait(timeout=60, raise_on_failure=False)
    return read_check(run, reach)


def unreachable(run: Run, missing: list[int]) -> dict[int, str]:
    """Why the nodes of ranks in ``missing`` that never started cannot join: each such node
    is asked, over the target's transport, to open a TCP connection to the rendezvous
    endpoint torchrun was given (``Target.reaches``). rank -> words; empty when every node
    reaches it, or the target cannot ask its nodes."""
    state = run.store.current_state(run.id) or {}
    launcher: dict[str, Any] = dict(state.get("launcher") or {})
    endpoint = re.search(r"--rdzv-endpoint=(\S+):(\d+)", " ".join(launcher.get("argv") or []))
    nodes = [n.get("host") for n in launcher.get("nodes") or [] if isinstance(n, dict)]
    if endpoint is None or len(nodes) < 2:
        return {}
    host, port = endpoint.group(1).strip("[]"), int(endpoint.group(2))
    started = set(described(run))
    per_node = run.spec.launch.procs
    target = get_target(run.spec.target.name, run.store.home)
    found = {}
    for index, node in enumerate(nodes):
        ranks = [r for r in range(index * per_node, (index + 1) * per_node) if r in missing]
        if not ranks or started & set(ranks) or not isinstance(node, str):
            continue
        why = target.reaches(launcher, node, host, port)
        if why:
            for rank in ranks:
                found[rank] = f"node {node} cannot reach the rendezvous at {host}:{port}: {why}"
    return found


def rank_events(run: Run, rank: int) -> list[dict[str, Any]]:
    try:
        return [e for e in run.store.iter_events(run.id, rank) if e.get("kind") == "metric"]
    except OSError:
        return []


def joined_ranks(run: Run) -> dict[int, float]:
    found = {}
    for rank in run.store.ranks(run.id):
        for event in rank_events(run, rank):
            if "rendezvous_s" in event.get("values", {}):
                found[rank] = float(event["values"]["rendezvous_s"])
    return found


def described(run: Run) -> dict[int, dict[str, Any]]:
    """What each rank said of itself before it joined (host, interfaces, versions)."""
    ranks: dict[int, dict[str, Any]] = {}
    for rank in range(run.spec.launch.world_size):
        for event in rank_events(run, rank):
            values = event.get("values", {})
            said = {k[5:]: v for k, v in values.items() if k.startswith("rank/")}
            if said:
                ranks.setdefault(rank, {}).update(said)
    return ranks


def read_check(run: Run, reach: dict[int, str] | None = None) -> CheckResult:
    """A finished check's result, from its events and ``outputs/check.json``; ``reach``:
    why the nodes of ranks that never started cannot reach the rendezvous."""
    world = run.spec.launch.world_size
    ranks = described(run)
    joined = joined_ranks(run)
    report: dict[str, Any] = {}
    path = run.outputs / "check.json"
    if path.is_file():
        try:
            report = json.loads(path.read_text())
        except ValueError:
            report = {}
    problems = diagnose(world, ranks, joined, reach or {})
    status = run.status
    if status != "completed" and not problems:
        problems.append(f"the check run ended {status}: {run.state.get('error') or ''}".strip())
    ok = status == "completed" and not problems
    return CheckResult(
        run=run,
        ok=ok,
        world_size=world,
        ranks=ranks,
        joined=joined,
        collectives=report.get("collectives", {}),
        links=report.get("links", []),
        problems=problems,
    )


def diagnose(
    world: int,
    ranks: dict[int, dict[str, Any]],
    joined: dict[int, float],
    reach: dict[int, str] | None = None,
) -> list[str]:
    """Why ranks did not join, as far as their own records and their nodes tell
    (``reach``), and versions that differ."""
    problems = []
    for rank in range(world):
        if rank in joined:
            continue
        info = ranks.get(rank)
        if info is None:
            node = (reach or {}).get(rank) or "no record of it reached the run"
            problems.append(f"rank {rank} never started: {node}")
            continue
        keys = ("resolve_error", "route_error", "interface_error", "port_error")
        why = [info[k] for k in keys if k in info]
        where = f"rank {rank} on {info.get('host', '?')} never joined the rendezvous at " + str(
            info.get("rendezvous", "?")
        )
        problems.append(where + (": " + "; ".join(why) if why else ""))
    for key in VERSION_KEYS:
        seen: dict[str, list[int]] = {}
        for rank, info in sorted(ranks.items()):
            seen.setdefault(str(info.get(key)), []).append(rank)
        if len(seen) > 1:
            parts = [f"{value} on rank(s) {', '.join(map(str, r))}" for value, r in seen.items()]
            problems.append(f"the environment differs: {key} " + "; ".join(parts))
    return problems
