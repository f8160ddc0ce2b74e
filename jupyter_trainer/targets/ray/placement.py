"""Where a run's Ray placement group stands, and what the cluster lacks while it waits."""

from __future__ import annotations

from typing import Any


def words(bundle: dict[str, float]) -> str:
    return " + ".join(f"{v:g} {k}" for k, v in bundle.items())


def phase(pg: Any, bundle: dict[str, float], strategy: str) -> dict[str, Any]:
    """``{"stage": "running"}`` once Ray has created the placement group; else ``queued``
    with Ray's state, what is missing and the reason in words."""
    import ray
    from ray.util.placement_group import placement_group_table

    table = placement_group_table(pg)
    if table.get("state") == "CREATED":
        return {"stage": "running", "placement_group": pg.id.hex()}
    stats = table.get("stats") or {}
    alive = [n for n in ray.nodes() if n.get("Alive")]
    have = ", ".join(f"{n.get('Resources', {}).get('CPU', 0):g} CPU" for n in alive)
    count = len(table.get("bundles") or {})
    lacking = missing(count, bundle, strategy, [n.get("Resources") or {} for n in alive])
    reason = (
        f"Ray placement group {table.get('state')} "
        f"({stats.get('scheduling_state', 'unknown')}): the run needs {count} node(s) "
        f"x {words(bundle)} ({strategy}); the cluster has {len(alive)} "
        f"alive node(s)" + (f" ({have})" if have else "") + f"; {lacking['words']}"
    )
    return {
        "stage": "queued",
        "placement_group": pg.id.hex(),
        "state": table.get("state"),
        "scheduling_state": stats.get("scheduling_state"),
        "missing": lacking,
        "reason": reason,
    }


def missing(
    bundles: int, bundle: dict[str, float], strategy: str, nodes: list[dict[str, float]]
) -> dict[str, Any]:
    """What the cluster lacks for ``bundles`` bundles of ``bundle``: ``nodes`` more nodes as
    large as a bundle (none of its nodes could ever hold one more), or, where its nodes are
    large enough, the resources that other work holds now (``busy``: what is free)."""
    fit = [n for n in nodes if all(n.get(k, 0.0) >= v for k, v in bundle.items())]
    need = bundles if strategy == "STRICT_SPREAD" else min(bundles, 1)
    if len(fit) < need:
        short = need - len(fit)
        largest = max((n.get("CPU", 0.0) for n in nodes), default=0.0)
        return {
            "nodes": short,
            "bundle": dict(bundle),
            "words": f"missing: {short} more node(s) with {words(bundle)} "
            f"(the largest node has {largest:g} CPU)",
        }
    import ray

    free = {k: float(ray.available_resources().get(k, 0.0)) for k in bundle}
    return {
        "nodes": 0,
        "busy": free,
        "words": "its nodes are large enough, but other work holds their resources "
        f"(free now, across the cluster: {words(free)})",
    }
