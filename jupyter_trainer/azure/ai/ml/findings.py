"""What ``azure check`` finds: one ``Finding`` per v2 call, and its verdict."""

from __future__ import annotations

from ....azureml.check import Finding

__all__ = ["BREAKS", "DIFFERS", "REFUSED", "WORKS", "Finding", "summary"]

WORKS, DIFFERS, BREAKS, REFUSED = "works", "works differently", "will break", "refused"


def summary(findings: list[Finding]) -> dict[str, int]:
    counts = dict.fromkeys((WORKS, DIFFERS, BREAKS, REFUSED), 0)
    for f in findings:
        counts[f.verdict] += 1
    return counts
