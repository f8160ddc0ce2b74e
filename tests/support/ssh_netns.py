"""Two hosts with networks of their own: a network namespace each, joined by a bridge, with
an sshd inside each namespace under its own hostname (``unshare --uts``).

Unlike 127.0.0.2/127.0.0.3, nothing here is loopback: each "host" has only its own
interface (``eth0``, 10.200.K.2 or .3), the bridge (10.200.K.1) is this machine's way in,
and processes started over ssh run inside the namespace. Filesystem and process table are
still shared. Only addresses inside these namespaces are ever used.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from jupyter_trainer.nodes.ssh import close_masters, control_dir
from jupyter_trainer.targets.registry import add_target
from support.daemons import die_with_this_process
from support.ssh_hosts import SSHD, _descendants, _keygen

SSHD_CONFIG = """\
Port 22
ListenAddress {address}
HostKey {root}/host_key
PidFile none
AuthorizedKeysFile {root}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 50
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=check)


class NetnsHosts:
    """``a1``, ``a2`` (and ``a3``...): namespaced hosts ``node-a``, ``node-b``...;
    ``client_config`` names them for ssh."""

    def __init__(self, count: int = 2) -> None:
        used = _ip("-br", "addr").stdout
        self.k = next(k for k in random.sample(range(10, 250), 240) if f"10.200.{k}." not in used)
        self.root = Path(tempfile.mkdtemp(prefix=f"jt-netns-{self.k}-"))
        self.bridge = f"jtbr{self.k}"
        self.names = [f"jt{self.k}{'abcdef'[i]}" for i in range(count)]
        self.addresses = [f"10.200.{self.k}.{2 + i}" for i in range(count)]
        self.daemons: list[subprocess.Popen] = []

    def start(self) -> NetnsHosts:
        _keygen(self.root / "host_key")
        _keygen(self.root / "client_key")
        auth = self.root / "authorized_keys"
        auth.write_text((self.root / "client_key.pub").read_text())
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"10.200.{self.k}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, (ns, address) in enumerate(zip(self.names, self.addresses)):
            _ip("netns", "add", ns)
            _ip("link", "add", f"{ns}v", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", f"{ns}v", "master", self.bridge, "up")
            _ip("addr", "add", f"{address}/24", "dev", "eth0", ns=ns)
            _ip("link", "set", "eth0", "up", ns=ns)
            _ip("link", "set", "lo", "up", ns=ns)
            conf = self.root / f"sshd-{ns}.conf"
            conf.write_text(SSHD_CONFIG.format(root=self.root, address=address))
            log = self.root / f"sshd-{ns}.log"
            script = f"hostname node-{'abcdef'[i]} && exec {SSHD} -D -f {conf} -E {log}"
            self.daemons.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", ns, "unshare", "--uts", "sh", "-c", script],
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    preexec_fn=die_with_this_process(),
                )
            )
        for address in self.addresses:  # wait until each sshd answers
            for _ in range(100):
                probe = subprocess.run(["ssh-keyscan", "-T", "1", address], capture_output=True)
                if probe.returncode == 0 and probe.stdout:
                    break
            else:
                raise RuntimeError(f"sshd on {address} did not come up")
        return self

    @property
    def aliases(self) -> list[str]:
        return [f"a{i + 1}" for i in range(len(self.names))]

    def client_config(self) -> str:
        blocks = [
            f"Host {alias}\n  HostName {address}\n  User root\n"
            f"  IdentityFile {self.root / 'client_key'}\n  IdentitiesOnly yes\n"
            for alias, address in zip(self.aliases, self.addresses)
        ]
        blocks.append(
            "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n"
        )
        return "\n".join(blocks)

    def stop(self) -> None:
        for daemon in self.daemons:
            victims = _descendants(daemon.pid)
            for pid in [daemon.pid, *victims]:
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            daemon.wait()
        for ns in self.names:
            _ip("netns", "del", ns, check=False)
            _ip("link", "del", f"{ns}v", check=False)
        _ip("link", "del", self.bridge, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


def started_hosts(count: int):
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        pytest.fail("network namespaces need root, iproute2 and unshare (util-linux)")
    hosts = NetnsHosts(count)
    try:
        yield hosts.start()
    finally:
        hosts.stop()


@pytest.fixture(scope="module")
def netns_hosts():
    yield from started_hosts(2)


@pytest.fixture(scope="module")
def netns_trio():
    """Three namespaced hosts: ``a1``, ``a2``, ``a3`` (``node-a``, ``node-b``, ``node-c``)."""
    yield from started_hosts(3)


@pytest.fixture
def far(netns_hosts, home, tmp_path, monkeypatch):
    user = tmp_path / "user"
    (user / ".ssh").mkdir(parents=True)
    (user / ".ssh" / "config").write_text(netns_hosts.client_config())
    monkeypatch.setenv("HOME", str(user))
    home.mkdir(parents=True, exist_ok=True)
    yield lambda **env: add_target(
        "far",
        "ssh",
        home=home,
        replace=True,
        hosts=["a1", "a2"],
        workdir=str(tmp_path / "remote"),
        connect_timeout=5,
        env={"GLOO_SOCKET_IFNAME": "eth0", **env},
    )
    close_masters(control_dir(home))
