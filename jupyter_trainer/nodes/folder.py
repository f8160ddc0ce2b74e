"""A run's working folder on one node, and the node it is on."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Mapping, Sequence


@dataclass(frozen=True)
class Node:
    """One node of a run, resolved: who it is, where its files are, how the others reach it."""

    index: int
    host: str                       # the ssh destination (an alias is fine)
    address: str                    # an address the other nodes can reach
    workdir: str                    # absolute, on the node
    python: str
    hop: Mapping[str, Sequence[str]] = field(default_factory=dict)  # ssh -G options, for hops

    @property
    def run_root(self) -> str:
        return posixpath.join(self.workdir, "runs")

    def run_dir(self, run_id: str) -> str:
        return posixpath.join(self.workdir, "runs", run_id)
