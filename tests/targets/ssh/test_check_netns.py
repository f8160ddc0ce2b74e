"""``jupyter-trainer check`` across ssh hosts with networks of their own (network namespaces,
tests/support/ssh_netns.py): a firewall inside one of them, and one link of three slowed by ``tc``.

The link is slowed with an HTB class and a u32 filter on each end: this machine's kernel has
no ``sch_netem`` (nor ``prio``), so a delay cannot be added, only a rate."""

from __future__ import annotations

import os
import subprocess
from contextlib import contextmanager

import pytest
import torch
from conftest import leftover
from support.ssh_netns import (  # noqa: F401 (fixtures)
    far,
    netns_hosts,
    netns_trio,
)

from jupyter_trainer.api.check import check
from jupyter_trainer.nodes.ssh import close_masters, control_dir
from jupyter_trainer.targets.registry import add_target


def in_ns(ns: str, *argv: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, *argv], check=True, capture_output=True)


@contextmanager
def firewall(ns: str):
    """Inside ``ns``: drop every TCP packet that comes in on eth0, but ssh's (nftables)."""
    in_ns(ns, "nft", "add", "table", "inet", "jtcheck")
    try:
        in_ns(ns, "nft", "add", "chain", "inet", "jtcheck", "input",
              "{ type filter hook input priority 0 ; }")  # fmt: skip
        in_ns(ns, "nft", "add", "rule", "inet", "jtcheck", "input",
              "iifname", "eth0", "tcp", "dport", "!=", "22", "drop")  # fmt: skip
        yield
    finally:
        in_ns(ns, "nft", "delete", "table", "inet", "jtcheck")


@pytest.mark.parametrize("hot", ["1", "0"], ids=["rank-pool", "torchrun-agents"])
def test_a_node_whose_firewall_drops_the_rendezvous_port_is_named_in_seconds(
    far, netns_hosts, monkeypatch, hot
):
    # node-a holds the rendezvous; its firewall drops what node-b sends it. With the rank
    # pool rank 1 starts and cannot connect; with torchrun node-b's agent never gets in.
    monkeypatch.setenv("JT_HOT", hot)
    far()
    limit = 8
    with firewall(netns_hosts.names[0]):
        result = check("far", nodes=2, procs=1, max_bytes=1 << 16, time_limit=limit)
    assert not result.ok
    address = netns_hosts.addresses[0]
    said = " | ".join(result.problems)
    if hot == "1":
        assert f"rank 1 on node-b never joined the rendezvous at {address}:" in said, said
        assert "does not answer: the connection timed out after 3 s" in said, said
    else:
        assert f"rank 1 never started: node a2 cannot reach the rendezvous at {address}:" in said
        assert "timed out after 3 s: nothing answered (a firewall may drop it)" in said, said
    running = result.run.state["stages"]["running"]
    assert running["end"] - running["start"] < limit + 30, running  # canceled at the limit
    assert result.run.status in ("canceled", "failed")
    assert leftover(result.run.id) == []


@contextmanager
def slowed(ns: str, to: str, mbit: int):
    """Inside ``ns``: what eth0 sends to ``to`` goes at ``mbit`` Mbit/s at most (HTB)."""
    tc = ("tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10")
    in_ns(ns, *tc)
    try:
        in_ns(ns, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:10",
              "htb", "rate", "10gbit")  # fmt: skip
        in_ns(ns, "tc", "class", "add", "dev", "eth0", "parent", "1:", "classid", "1:20",
              "htb", "rate", f"{mbit}mbit", "ceil", f"{mbit}mbit")  # fmt: skip
        in_ns(ns, "tc", "filter", "add", "dev", "eth0", "protocol", "ip", "parent", "1:",
              "prio", "1", "u32", "match", "ip", "dst", f"{to}/32", "flowid", "1:20")  # fmt: skip
        yield
    finally:
        in_ns(ns, "tc", "qdisc", "del", "dev", "eth0", "root")


def test_the_check_names_the_one_slow_link_of_three_nodes_with_its_figures(
    netns_trio, home, tmp_path, monkeypatch
):
    user = tmp_path / "user"
    (user / ".ssh").mkdir(parents=True)
    (user / ".ssh" / "config").write_text(netns_trio.client_config())
    monkeypatch.setenv("HOME", str(user))
    home.mkdir(parents=True, exist_ok=True)
    add_target("trio", "ssh", home=home, hosts=netns_trio.aliases,
               workdir=str(tmp_path / "remote"), connect_timeout=5,
               env={"GLOO_SOCKET_IFNAME": "eth0"})  # fmt: skip
    (_, b, c), (_, to_b, to_c) = netns_trio.names, netns_trio.addresses
    try:
        with slowed(b, to_c, 80), slowed(c, to_b, 80):  # node-b <-> node-c: 10 MB/s
            result = check("trio", nodes=3, procs=1, max_bytes=1 << 20, time_limit=60)
    finally:
        close_masters(control_dir(home))
    assert result.ok, result.problems
    assert sorted(result.joined) == [0, 1, 2]
    links = {tuple(link["nodes"]): link for link in result.links}
    assert sorted(links) == [(0, 1), (0, 2), (1, 2)]
    slow = result.slowest_link
    assert slow["nodes"] == [1, 2], result.links
    assert slow["bandwidth_GBps"] < 0.0105  # 80 Mbit/s is 0.01 GB/s
    assert min(links[(0, 1)]["bandwidth_GBps"], links[(0, 2)]["bandwidth_GBps"]) > 0.05
    assert leftover(result.run.id) == []


def test_a_wrong_socket_interface_on_the_nodes_is_named(far, netns_hosts):
    # each node has eth0 and lo only
    far(GLOO_SOCKET_IFNAME="eth9")
    result = check("far", nodes=2, procs=1, max_bytes=1 << 16, time_limit=8)
    assert not result.ok
    said = " | ".join(result.problems)
    for rank, node in ((0, "node-a"), (1, "node-b")):
        assert f"rank {rank} on {node} never joined the rendezvous" in said, said
    assert "GLOO_SOCKET_IFNAME=eth9 names no interface of this host (lo, eth0)" in said, said
    assert leftover(result.run.id) == []


def other_torch() -> str:
    """The interpreter of a virtual environment with another torch than this one's, which
    ``scripts/setup.sh tests`` builds once, outside the repository (``scripts/test.sh``
    names it in ``$JT_OTHER_TORCH_PYTHON``)."""
    python = os.environ.get("JT_OTHER_TORCH_PYTHON")
    if not python or not os.access(python, os.X_OK):
        pytest.fail(
            f"no interpreter with another torch ($JT_OTHER_TORCH_PYTHON={python!r}): "
            "scripts/setup.sh tests builds one"
        )
    return python


def test_a_node_with_another_torch_is_named_with_both_versions(
    netns_hosts, home, tmp_path, monkeypatch
):
    """Node b runs a virtual environment of its own, with another torch: the check names
    the versions and the ranks of each before anything hangs."""
    user = tmp_path / "user"
    (user / ".ssh").mkdir(parents=True)
    (user / ".ssh" / "config").write_text(netns_hosts.client_config())
    monkeypatch.setenv("HOME", str(user))
    home.mkdir(parents=True, exist_ok=True)
    add_target("mixed", "ssh", home=home, hosts=["a1", {"host": "a2", "python": other_torch()}],
               workdir=str(tmp_path / "remote"), connect_timeout=5,
               env={"GLOO_SOCKET_IFNAME": "eth0"})  # fmt: skip
    try:
        result = check("mixed", nodes=2, procs=1, max_bytes=1 << 16, time_limit=60)
    finally:
        close_masters(control_dir(home))
    assert not result.ok
    said = " | ".join(result.problems)
    mine = torch.__version__
    theirs = subprocess.run(
        [other_torch(), "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert mine != theirs
    assert f"the environment differs: torch {mine} on rank(s) 0; {theirs} on rank(s) 1" in said
    assert leftover(result.run.id) == []
