"""The cost meter: what a run has cost so far, and what it will have cost when it ends, from
its target's price (``spec.target.price``: targets/pricing.py), the time it has been
running and, while it runs, the ETA of its progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def run_cost(
    spec: Any, state: Mapping[str, Any], now: float, eta: float | None = None
) -> dict[str, Any] | None:
    """``{"so_far", "projected" (None without an ETA), "currency", "units", "unit"}``, or
    None when the target has no price. A GPU-hour is one rank's for an hour (a rank per
    GPU); a node-hour, one node's. The clock runs from the ``running`` stage's start to the
    run's end (a queued run costs nothing yet)."""
    price = getattr(getattr(spec, "target", None), "price", None) or {}
    if "price_per_gpu_hour" in price:
        rate, unit, units = price["price_per_gpu_hour"], "GPU", spec.launch.world_size
    elif "price_per_node_hour" in price:
        rate, unit, units = price["price_per_node_hour"], "node", spec.launch.nodes
    else:
        return None
    running = (state.get("stages") or {}).get("running") or {}
    start = running.get("start")
    end = running.get("end") or state.get("ended") or now
    hours = max(0.0, end - start) / 3600 if isinstance(start, (int, float)) else 0.0
    so_far = rate * units * hours
    live = state.get("status") == "running"
    projected = so_far + rate * units * eta / 3600 if live and eta is not None else None
    return {
        "so_far": so_far,
        "projected": projected,
        "currency": price.get("currency", "$"),
        "units": units,
        "unit": unit,
        "rate": rate,
    }


def money(value: float, currency: str) -> str:
    """``$1.23``, ``0.42 EUR``: a symbol goes before the figure, a code after it."""
    figure = f"{value:,.2f}" if value >= 0.01 or value == 0 else f"{value:.4f}"
    return f"{currency}{figure}" if len(currency) == 1 else f"{figure} {currency}"


def cost_words(cost: Mapping[str, Any]) -> str:
    """``cost $1.23 (2 GPUs at $2.50 an hour), $4.56 when done``."""
    currency = cost["currency"]
    plural = "s" if cost["units"] != 1 else ""
    text = (
        f"cost {money(cost['so_far'], currency)} ({cost['units']} {cost['unit']}{plural} at "
        f"{money(cost['rate'], currency)} an hour)"
    )
    if cost.get("projected") is not None:
        text += f", {money(cost['projected'], currency)} when done"
    return text


def sweep_cost(runs: Any, now: float) -> str | None:
    """``cost $12.40 over 6 trials``: what the sweep's trial runs have cost together (each
    at its own target's price), or None when none has a price."""
    costs = []
    for run in runs:
        try:
            cost = run_cost(run.spec, run.state, now)
        except Exception:  # a trial's damaged record: the total is of the others
            continue
        if cost is not None:
            costs.append(cost)
    if not costs:
        return None
    currencies = {cost["currency"] for cost in costs}
    if len(currencies) > 1:
        return "cost: trials priced in " + ", ".join(sorted(currencies)) + " (no total)"
    total = sum(cost["so_far"] for cost in costs)
    plural = "s" if len(costs) != 1 else ""
    return f"cost {money(total, currencies.pop())} over {len(costs)} trial{plural}"
