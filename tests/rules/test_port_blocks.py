"""The fixtures' fixed ports: each Ray cluster stays inside the block it holds, and no block
lies where the package draws the ports it binds a moment later (``procs.free_port``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.port_blocks import held_block
from support.ray_cluster import BLOCK, node_argvs

from jupyter_trainer.rankside.host import procs


def _node_ports(named: dict[str, int]) -> list[int]:
    """A node's ports by Ray's names (``min_worker_port`` ...), its worker range spelled out."""
    low, high = named.pop("min_worker_port"), named.pop("max_worker_port")
    return [*named.values(), *range(low, high + 1)]


def test_the_ports_of_a_ray_cluster_lie_inside_its_block_and_differ():
    base = 10100 + 3 * BLOCK
    head, second = node_argvs(base, Path("/tmp/x"), 2)
    flags = dict(re.findall(r"^--([a-z-]+-port)=(\d+)$", "\n".join(head), re.M))
    named = {name.replace("-", "_"): int(port) for name, port in flags.items()}
    ports = _node_ports(named) + _node_ports(json.loads(second[-1]))
    assert len(ports) > 80  # both nodes' worker ranges are there
    assert len(ports) == len(set(ports)), sorted({p for p in ports if ports.count(p) > 1})
    assert base <= min(ports) and max(ports) < base + BLOCK, (base, min(ports), max(ports))


def test_a_block_where_free_port_draws_is_refused():
    low, _ = procs.ephemeral_ports()
    with pytest.raises(RuntimeError, match="free_port"):
        held_block("overlap", low // 2 - 4, 8, 1)
