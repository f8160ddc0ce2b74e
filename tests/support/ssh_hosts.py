"""Two "remote" hosts for tests: a real OpenSSH server on 127.0.0.2 and one on 127.0.0.3.

One pair per xdist worker, each daemon on a port free when it starts, so neither workers
nor other test sessions on the machine ever share a server.
Both hosts share this machine's filesystem and process table; only the addresses differ.
Clients reach them through an ssh config with aliases (``n1``, ``n2``) written into a
temporary HOME, the way a user's ``~/.ssh/config`` names cluster nodes.

Each daemon runs in the foreground (``sshd -D``) in its own session, so a test can take a
node down (``kill_node``) or cut its connections without taking the node down
(``drop_connections``, a network blip), and the fixture can end every process it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jupyter_trainer.rankside.host import procs
from jupyter_trainer.targets.registry import add_target
from support.daemons import die_with_this_process

SSHD = "/usr/sbin/sshd"
ADDRESSES = ("127.0.0.2", "127.0.0.3")
ALIASES = ("n1", "n2")

SSHD_CONFIG = """\
Port {port}
ListenAddress {address}
HostKey {root}/host_key
PidFile {root}/sshd-{address}.pid
AuthorizedKeysFile {root}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxSessions 50
MaxStartups 50:30:100
LogLevel VERBOSE
SetEnv PATH={root}/bin-{address}:/usr/local/bin:/usr/bin:/bin
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def _free_port(address: str) -> int:
    """A port free on ``address`` now. Fixed ports would collide with another test session
    on the same machine, whose sshd would then refuse this session's key."""
    return procs.free_port(address)


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def _children(pid: int) -> list[int]:
    """Direct children of ``pid``: for an sshd listener, one process per connection."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
            found.append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


@dataclass
class SshHosts:
    root: Path
    ports: dict[str, int]
    key: Path  # the client's private key (authorized on both hosts)
    wrong_key: Path  # a key no host accepts
    daemons: dict[str, subprocess.Popen] = field(default_factory=dict)

    def alias_address(self, alias: str) -> str:
        return ADDRESSES[ALIASES.index(alias)]

    def bin_dir(self, address: str) -> Path:
        """A folder first on the PATH of every session on ``address`` (for fake tools)."""
        return self.root / f"bin-{address}"

    def client_config(self, *, key: Path | None = None, extra: str = "") -> str:
        """An ssh config naming both hosts by alias, as a user would write it."""
        blocks = []
        for alias, address in zip(ALIASES, ADDRESSES):
            blocks.append(
                f"Host {alias}\n  HostName {address}\n  Port {self.ports[address]}\n"
                f"  User root\n  IdentityFile {key or self.key}\n  IdentitiesOnly yes\n"
            )
        blocks.append(
            f"Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
            f"  LogLevel ERROR\n{extra}"
        )
        return "\n".join(blocks)

    def write_home(self, home: Path, **kwargs) -> Path:
        """A HOME whose ``.ssh/config`` has the aliases; returns the config's path."""
        ssh = home / ".ssh"
        ssh.mkdir(parents=True, exist_ok=True)
        config = ssh / "config"
        config.write_text(self.client_config(**kwargs))
        config.chmod(0o600)
        return config

    def start_node(self, address: str) -> None:
        conf = self.root / f"sshd-{address}.conf"
        conf.write_text(
            SSHD_CONFIG.format(root=self.root, address=address, port=self.ports[address])
        )
        self.bin_dir(address).mkdir(exist_ok=True)
        log = self.root / f"sshd-{address}.log"
        proc = subprocess.Popen(
            [SSHD, "-D", "-f", str(conf), "-E", str(log)],
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_this_process(),
        )
        self.daemons[address] = proc
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"sshd on {address} exited: {log.read_text()[-2000:]}")
            try:
                with socket.create_connection((address, self.ports[address]), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sshd on {address}:{self.ports[address]} did not listen in 10 s")

    def drop_connections(self, address: str) -> int:
        """Kill every open connection to ``address`` but keep it listening: a network blip.
        Returns how many connections were cut."""
        daemon = self.daemons[address]
        conns = _children(daemon.pid)
        for pid in conns:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return len(conns)

    def kill_node(self, address: str) -> None:
        """Take ``address`` down: its daemon and every session it serves."""
        daemon = self.daemons.pop(address, None)
        if daemon is None:
            return
        victims = _descendants(daemon.pid)
        daemon.kill()
        daemon.wait()
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        for address in list(self.daemons):
            self.kill_node(address)


def start_hosts(root: Path) -> SshHosts:
    if not os.path.exists(SSHD):
        raise RuntimeError(
            "the OpenSSH server is not installed: apt-get install openssh-server "
            "(scripts/setup.sh does)"
        )
    if not shutil.which("ssh"):
        raise RuntimeError("the OpenSSH client is not installed: apt-get install openssh-client")
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege-separation directory
    root.mkdir(parents=True, exist_ok=True)
    _keygen(root / "host_key")
    _keygen(root / "client_key")
    _keygen(root / "wrong_key")
    auth = root / "authorized_keys"
    auth.write_text((root / "client_key.pub").read_text())
    auth.chmod(0o600)
    ports = {address: _free_port(address) for address in ADDRESSES}
    hosts = SshHosts(root, ports, root / "client_key", root / "wrong_key")
    try:
        for address in ADDRESSES:
            hosts.start_node(address)
    except BaseException:
        hosts.stop()
        raise
    return hosts


# -- pytest fixtures (imported by the tests/test_ssh*.py modules) --------------------------


@pytest.fixture(scope="session")
def ssh_pair(worker_id):
    """Two sshd per xdist worker, for the whole session. Their keys live outside pytest's
    basetemp: another pytest session on the machine may rotate that away while this one
    still runs, and sshd would then refuse every key."""
    root = Path(tempfile.mkdtemp(prefix=f"jt-sshd-{worker_id}-"))
    hosts = start_hosts(root / "hosts")
    yield hosts
    hosts.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def user_home(ssh_pair, tmp_path, monkeypatch):
    """A temporary HOME whose ~/.ssh/config names the hosts n1 and n2; the runs' supervisors
    inherit it from the submitting process."""
    home = tmp_path / "user"
    ssh_pair.write_home(home)
    monkeypatch.setenv("HOME", str(home))
    return home


def add_pair_target(name: str, home, tmp_path, **keys) -> None:
    """A target ``name`` of ``home``'s targets.toml on n1 and n2, with a shared workdir;
    ``keys`` (``replace`` among them) add to or replace its settings."""
    settings = {
        "hosts": list(ALIASES),
        "workdir": str(tmp_path / "remote"),
        "env": {"GLOO_SOCKET_IFNAME": "lo"},
        "connect_timeout": 5,
        **keys,
    }
    add_target(name, "ssh", home=home, **settings)


@pytest.fixture
def pair(ssh_pair, user_home, home, tmp_path):
    """A target 'pair' on n1 and n2 (a shared workdir); both hosts are up before and after,
    and the test's ControlMasters are closed at the end."""
    from jupyter_trainer.nodes.ssh import close_masters, control_dir

    for address in ADDRESSES:
        if address not in ssh_pair.daemons:
            ssh_pair.start_node(address)
    home.mkdir(parents=True, exist_ok=True)
    add_pair_target("pair", home, tmp_path)
    yield ssh_pair
    close_masters(control_dir(home))
    shutil.rmtree(control_dir(home), ignore_errors=True)
    for address in ADDRESSES:  # a test that took a node down brings it back for the next
        if address not in ssh_pair.daemons:
            ssh_pair.start_node(address)


LOOPBACK_MPI = {
    "OMPI_MCA_oob_tcp_if_include": "lo",
    "OMPI_MCA_btl": "self,tcp",
    "OMPI_MCA_btl_tcp_if_include": "lo",
    "GLOO_SOCKET_IFNAME": "lo",
    "HOROVOD_GLOO_IFACE": "lo",
}


@pytest.fixture
def mpi_pair(pair, home, tmp_path):
    add_pair_target(
        "pair", home, tmp_path, replace=True, env=LOOPBACK_MPI, network_interfaces=["lo"]
    )
    return pair


def fail_with_logs(run, ranks):
    logs = "".join(f"\n--- rank {r}\n{run.logs(r)}" for r in range(ranks))
    path = run.store.existing(run.id).logs / "launcher.log"
    launcher = path.read_text()[-4000:] if path.exists() else ""
    pytest.fail(f"{run.state.get('error')}{logs}\n--- launcher.log\n{launcher}")
