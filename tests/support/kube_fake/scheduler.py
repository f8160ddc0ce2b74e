"""Fits pods onto the one fake node by their resource requests, with the scheduler's messages."""

from __future__ import annotations

import re
from decimal import Decimal

NODE = "fake-node"
SUFFIX = {
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
    "": Decimal(1),
}


def quantity(value) -> Decimal:
    m = re.match(
        r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$", str(value)
    )
    if not m:
        raise ValueError(f"quantities must match the regular expression: {value!r}")
    return Decimal(m.group(1)) * SUFFIX[m.group(2) or ""]


def pod_requests(spec: dict) -> dict[str, Decimal]:
    """The pod's effective requests: the sum over containers, at least each init container's."""

    def of(c):
        res = c.get("resources") or {}
        req = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {k: quantity(v) for k, v in req.items()}

    total: dict[str, Decimal] = {}
    for c in spec.get("containers") or []:
        for k, v in of(c).items():
            total[k] = total.get(k, Decimal(0)) + v
    for c in spec.get("initContainers") or []:
        for k, v in of(c).items():
            total[k] = max(total.get(k, Decimal(0)), v)
    total["pods"] = Decimal(1)
    return total


def fits(node: dict, pod: dict, bound: list[dict]) -> str | None:
    """None when the pod fits the node next to the pods already bound there, else the message
    the default scheduler writes into its FailedScheduling event."""
    alloc = {k: quantity(v) for k, v in node["status"]["allocatable"].items()}
    want = pod_requests(pod["spec"])
    used: dict[str, Decimal] = {}
    for other in bound:
        for k, v in pod_requests(other["spec"]).items():
            used[k] = used.get(k, Decimal(0)) + v
    reasons = []
    selector = pod["spec"].get("nodeSelector") or {}
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in selector.items()):
        reasons.append("1 node(s) didn't match Pod's node affinity/selector")
    if len(bound) + 1 > alloc.get("pods", Decimal(110)):
        reasons.append("1 Too many pods")
    for name, amount in sorted(want.items()):
        if name == "pods" or amount == 0:
            continue
        if used.get(name, Decimal(0)) + amount > alloc.get(name, Decimal(0)):
            reasons.append(f"1 Insufficient {name}")
    if not reasons:
        return None
    preemption = (
        "preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."
        if any("selector" in r for r in reasons)
        else "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    return f"0/1 nodes are available: {', '.join(sorted(reasons))}. {preemption}"
