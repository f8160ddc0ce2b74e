"""What the ssh target asks of its nodes beyond the node layer's pre-flight: the address
other nodes reach a node at (an ssh alias is not an address), and the ``ssh -G`` options a
hop between nodes needs.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping

from ...core.errors import TargetError
from .commands import HOP_OPTIONS, HostConfig


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def node_address(
    host: HostConfig, options: Mapping[str, list[str]], seen_from_first: Mapping[str, list[str]]
) -> str:
    """An address the other nodes can reach ``host`` at. In order: the host's ``address``,
    its ssh HostName when that is an IP, the HostName resolved on node 0 (where it matters;
    a ProxyJump'd private name may not resolve here), then resolved here. Loopback answers
    are skipped (Debian maps its own hostname to 127.0.1.1)."""
    if host.address:
        return host.address
    name = options["hostname"][0]
    if is_ip(name):
        return name
    candidates = list(seen_from_first.get(name, []))
    try:
        found = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
        candidates += [addr for *_, (addr, *_) in found if isinstance(addr, str)]
    except OSError:
        pass
    usable = [a for a in candidates if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    usable.sort(key=lambda a: ":" in a)  # IPv4 first
    if not usable:
        raise TargetError(
            f"node {host.host}: its HostName {name!r} does not resolve to a "
            "non-loopback address; set the host's address in the target, e.g. "
            f'hosts = [{{host = "{host.host}", address = "10.0.0.5"}}]'
        )
    return usable[0]


def hop_options(options: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """The ``ssh -G`` options a hop between nodes needs, as ssh printed them (a ``~`` in a
    key's path is the node user's home there, which is where a node keeps its own keys)."""
    return {k: list(dict.fromkeys(options[k])) for k in HOP_OPTIONS if k in options}
