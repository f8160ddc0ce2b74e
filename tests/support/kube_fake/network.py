"""Pod networks for the fake node: each pod in a network namespace of its own, its ``eth0`` a
veth on one bridge per cluster, with a pod IP from 10.244.0.0/16 (the bridge has no address:
the host reaches no pod, pods reach each other). Without it every pod shares the host's
network and is 127.0.0.1."""

from __future__ import annotations

import subprocess
import threading

SUBNET = "10.244"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class PodNetwork:
    def __init__(self, token: str):
        self.tag = token[:6]
        self.bridge = f"jtkb{self.tag}"
        self._lock = threading.Lock()
        self._next = 0
        self.pods: dict[str, tuple[str, str, str]] = {}  # uid -> (netns, host veth, ip)
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("link", "set", self.bridge, "up")

    def ip(self, uid: str) -> str | None:
        entry = self.pods.get(uid)
        return entry[2] if entry else None

    def netns(self, uid: str) -> str:
        """The pod's network namespace, made on first use."""
        with self._lock:
            if uid not in self.pods:
                self._next += 1
                n = self._next
                ns, veth = f"jtk{self.tag}-{n}", f"jtk{self.tag}{n}"
                ip = f"{SUBNET}.{n // 250}.{n % 250 + 2}"
                _ip("netns", "add", ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                _ip("link", "set", veth, "master", self.bridge, "up")
                _ip("-n", ns, "addr", "add", f"{ip}/16", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                self.pods[uid] = (ns, veth, ip)
            return self.pods[uid][0]

    def release(self, uid: str) -> None:
        with self._lock:
            entry = self.pods.pop(uid, None)
        if entry:
            _ip("netns", "del", entry[0], check=False)
            _ip("link", "del", entry[1], check=False)

    def close(self) -> None:
        for uid in list(self.pods):
            self.release(uid)
        _ip("link", "del", self.bridge, check=False)
