"""The system OpenSSH client, so a user's ``~/.ssh/config`` (aliases, ProxyJump, agent, keys)
just works, and multiplexed, so a run pays the ssh handshake once per host.

Every connection goes through one ControlMaster per host (``ControlMaster=auto``), kept
``ControlPersist`` seconds after its last use so the next run reuses it. ``BatchMode``
makes a missing key fail at once instead of prompting on a terminal nobody watches;
``ConnectTimeout`` and ``ServerAliveInterval``/``CountMax`` bound how long an unreachable or
silently dead host can hold a call. Remote commands are strings made by ``shlex.join``
(see commands.py): no user value reaches the remote shell unquoted. ``SshClient`` is a
``NodeShell`` (transport.py).
"""

from __future__ import annotations

import hashlib
import os
import pwd
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import TargetError
from .transport import die_with_parent, run_argv

# A unix socket path has room for 107 bytes; ssh adds ".XXXXXXXXXXXXXXXX" while it binds.
_SOCKET_ROOM = 107 - 17
_SAFE_PATH = re.compile(r"[A-Za-z0-9/._+-]+")
ALIVE_INTERVAL_S = 5
ALIVE_COUNT = 3


def control_dir(home: Path) -> Path:
    """Where the ControlMaster sockets of ``home`` live: ``home/ssh``, or, when that path is
    too long for a unix socket or needs quoting, a private folder under the runtime dir."""
    preferred = Path(home) / "ssh"
    if len(str(preferred)) + 41 <= _SOCKET_ROOM and _SAFE_PATH.fullmatch(str(preferred)):
        folder = preferred
    else:
        base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
        tag = hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:12]
        parent = base / f"jt-ssh-{os.getuid()}"
        parent.mkdir(mode=0o700, exist_ok=True)
        st = parent.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            raise TargetError(f"{parent} is not a private folder of this user; remove it")
        folder = parent / tag
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def user_config_file() -> str | None:
    """``$HOME/.ssh/config`` when HOME is not the passwd home directory.

    ssh reads its config from the passwd entry's home, not ``$HOME``. In containers started
    with another HOME (or an arbitrary uid), that hides the user's config; honour ``$HOME``."""
    home = os.environ.get("HOME")
    try:
        passwd_home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        passwd_home = None
    if home and os.path.realpath(home) != os.path.realpath(passwd_home or "/nonexistent"):
        path = os.path.join(home, ".ssh", "config")
        if os.path.isfile(path):
            return path
    return None


def classify(host: str, returncode: int, stderr: str) -> str:
    """ssh's own failure (exit 255) in words that name the node and the likely fix."""
    text = " ".join(stderr.split())[-600:]
    low = text.lower()
    if "permission denied" in low or "too many authentication failures" in low:
        why = "authentication failed (check the key, the user and the agent for this host)"
    elif "host key verification failed" in low or "remote host identification" in low:
        why = "its host key is unknown or changed (ssh once by hand, or fix known_hosts)"
    elif "could not resolve hostname" in low:
        why = "its name does not resolve (check the alias in ~/.ssh/config)"
    elif any(s in low for s in ("timed out", "no route to host", "network is unreachable")):
        why = "it is unreachable (connection timed out)"
    elif "connection refused" in low:
        why = "it refused the connection (is sshd running there?)"
    elif "closed by remote host" in low or "connection reset" in low or "broken pipe" in low:
        why = "the connection was lost"
    else:
        why = f"ssh failed with exit code {returncode}"
    return f"{why}: {text}" if text else why


def option_args(options: Sequence[tuple[str, str]]) -> list[str]:
    """``-o Key=Value`` for each option; ssh parses the value like a config line, so one
    with spaces is double-quoted (config validation refuses quotes inside values)."""
    args = []
    for key, value in options:
        args += ["-o", f'{key}="{value}"' if any(c.isspace() for c in value) else f"{key}={value}"]
    return args


@dataclass(frozen=True)
class SshClient:
    """How to reach one host: its destination, the target's options, the control folder."""

    host: str
    control: str  # folder of ControlMaster sockets
    options: tuple[tuple[str, str], ...] = ()  # the target's ssh_options
    config_file: str | None = None  # ``ssh -F``
    connect_timeout: int = 10
    persist: int = 120
    program: str = "ssh"

    def argv(self, remote: str | None = None, *, extra: Sequence[str] = ()) -> list[str]:
        """``ssh ... HOST [REMOTE]``. The target's options come first: ssh keeps the first
        value it sees for an option, so a user's ssh_options override these defaults."""
        argv = [self.program]
        if self.config_file:
            argv += ["-F", self.config_file]
        argv += option_args(self.options)
        argv += [
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={self.connect_timeout}",
            "-o",
            f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o",
            f"ServerAliveCountMax={ALIVE_COUNT}",
            "-o",
            "ControlMaster=auto",
            "-o",
            f"ControlPath={self.control}/%C",
            "-o",
            f"ControlPersist={self.persist}" if self.persist else "ControlPersist=no",
            "-T",
            *extra,
            "--",
            self.host,
        ]
        if remote is not None:
            argv.append(remote)
        return argv

    def run(
        self,
        remote: str,
        *,
        input: bytes | None = None,
        timeout: float = 60.0,
        what: str = "a command",
    ) -> subprocess.CompletedProcess:
        """Run ``remote`` on the host and wait, at most ``timeout`` seconds."""
        return run_argv(
            self.argv(remote),
            host=self.host,
            input=input,
            timeout=timeout,
            what=what,
            fix="install the OpenSSH client (apt-get install openssh-client)",
        )

    def popen(self, remote_command: str, **kwargs: Any) -> subprocess.Popen[bytes]:
        """A long-lived session (a follow). It gets SIGTERM when the calling thread's process
        dies, so a dead supervisor stops following and its nodes notice (their lease goes
        stale and they end the run after ``orphan_timeout``). Call from the main thread:
        the death signal is tied to the thread that started the child."""
        return subprocess.Popen(self.argv(remote_command), preexec_fn=die_with_parent, **kwargs)

    def resolve(self) -> dict[str, list[str]]:
        """``ssh -G HOST``: the options ssh would use (HostName, Port, User, keys, ...).
        Local only: reads the config, contacts nobody."""
        argv = [self.program, *(["-F", self.config_file] if self.config_file else [])]
        argv += option_args(self.options)
        try:
            done = subprocess.run(
                [*argv, "-G", "--", self.host],
                capture_output=True,
                text=True,
                timeout=15,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise TargetError(f"ssh -G {self.host} failed: {exc}") from exc
        if done.returncode != 0:
            raise TargetError(
                f"node {self.host}: ssh cannot use this destination: {done.stderr.strip()}"
            )
        options: dict[str, list[str]] = {}
        for line in done.stdout.splitlines():
            key, _, value = line.partition(" ")
            options.setdefault(key.lower(), []).append(value)
        return options

    def close(self) -> None:
        """End this host's ControlMaster (``ssh -O exit``), if one is running."""
        subprocess.run(
            [*self.argv(extra=["-O", "exit"])],
            capture_output=True,
            timeout=15,
            stdin=subprocess.DEVNULL,
        )


def close_masters(folder: Path) -> int:
    """End every ControlMaster whose socket is in ``folder``; returns how many answered."""
    count = 0
    if not Path(folder).is_dir():
        return 0
    for sock in Path(folder).iterdir():
        if sock.is_socket():
            done = subprocess.run(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "jt"],
                capture_output=True,
                timeout=15,
                stdin=subprocess.DEVNULL,
            )
            count += done.returncode == 0
    return count
