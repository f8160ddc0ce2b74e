"""What ``azure check`` finds: one ``Finding`` per v2 call, and its verdict."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

WORKS, DIFFERS, BREAKS, REFUSED = "works", "works differently", "will break", "refused"


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    name: str
    verdict: str
    note: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "line": self.line,
            "name": self.name,
            "verdict": self.verdict,
            "note": self.note,
        }


def summary(findings: list[Finding]) -> dict[str, int]:
    counts = dict.fromkeys((WORKS, DIFFERS, BREAKS, REFUSED), 0)
    for f in findings:
        counts[f.verdict] += 1
    return counts
