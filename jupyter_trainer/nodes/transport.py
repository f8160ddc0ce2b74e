"""How the node layer reaches a node: the ``NodeShell`` protocol, and this machine.

Everything the node layer does on a node (pre-flight, staging, building an environment,
starting, following, ending a run) is a call of the agent (rankside/agent/): a command line made
by commands.py, a payload on its standard input, frames on its standard output. So a way
to reach a node only has to run one command line there and hand back its output. The ssh
transport (ssh.py) runs it through OpenSSH; ``LocalShell`` through ``/bin/sh`` on this
machine; any other (a process started by a scheduler, a Ray actor on the node) implements
the same protocol and plugs into ``RemoteFolder`` (folder.py) unchanged.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, Protocol, runtime_checkable

from ..core.errors import TargetError

_PR_SET_PDEATHSIG = 1


class NodeSession(Protocol):
    """A long-lived agent call (a follow) as ``subprocess.Popen`` offers it. ``stdout`` and
    ``stderr`` must be real pipes (the follower reads them by ``fileno()`` without
    blocking); ``stdin`` takes requests (``{"finish": ...}``) while it runs. They are None
    only where a session was started without pipes, which ``Pipes.of`` refuses."""

    @property
    def stdin(self) -> IO[bytes] | None: ...

    @property
    def stdout(self) -> IO[bytes] | None: ...

    @property
    def stderr(self) -> IO[bytes] | None: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def kill(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


@dataclass(frozen=True)
class Pipes:
    """The three pipes of a node session, every one of them there."""

    stdin: IO[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]

    @classmethod
    def of(cls, session: NodeSession, host: str) -> Pipes:
        stdin, stdout, stderr = session.stdin, session.stdout, session.stderr
        if stdin is None or stdout is None or stderr is None:
            raise TargetError(
                f"node {host}: a session was started without stdin, stdout and stderr pipes"
            )
        return cls(stdin, stdout, stderr)


@runtime_checkable
class NodeShell(Protocol):
    """One node, reachable. ``host`` names it in every message. ``remote_command`` is a
    shell command line whose arguments are quoted with ``shlex.join``: run it as a POSIX
    shell would on the node. Exit code 255 means the transport itself failed (the node
    could not be reached), with the reason on stderr, as ssh does."""

    @property
    def host(self) -> str: ...

    def run(
        self,
        remote_command: str,
        *,
        input: bytes | None = None,
        timeout: float = 60.0,
        what: str = "a command",
    ) -> subprocess.CompletedProcess:
        """Run it and wait at most ``timeout`` seconds (then raise a TargetError saying
        ``what`` did not finish); stdout and stderr are captured as bytes."""
        ...

    def popen(self, remote_command: str, **kwargs: Any) -> NodeSession:
        """Start it and return at once; ``kwargs`` are Popen's (``stdin``/``stdout``/
        ``stderr=subprocess.PIPE``). The session must end if this process dies."""
        ...

    def resolve(self) -> dict[str, list[str]]:
        """What is known of the node without contacting it: at least ``hostname``."""
        ...

    def close(self) -> None:
        """Release what the transport keeps open for this node (a ControlMaster)."""
        ...


def die_with_parent() -> None:
    """In a child: get SIGTERM when the thread that started it dies, so nothing follows a
    node for a supervisor that is gone."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def run_argv(
    argv: Sequence[str], *, host: str, input: bytes | None, timeout: float, what: str, fix: str
) -> subprocess.CompletedProcess:
    """``argv`` run here for a call on ``host``; ``fix`` says how to get its program."""
    try:
        return subprocess.run(
            list(argv),
            input=input,
            capture_output=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise TargetError(f"node {host}: {what} did not finish within {timeout:.0f} s") from exc
    except OSError as exc:
        raise TargetError(f"cannot run {argv[0]}: {exc}; {fix}") from exc


@dataclass(frozen=True)
class LocalShell:
    """This machine as a node: a command runs in ``/bin/sh`` here (a Slurm target without a
    login node stages into its workdir through it, with the same agent)."""

    host: str = "localhost"

    def argv(self, remote: str | None = None) -> list[str]:
        return ["/bin/sh", "-c", remote or "true"]

    def run(
        self,
        remote_command: str,
        *,
        input: bytes | None = None,
        timeout: float = 60.0,
        what: str = "a command",
    ) -> subprocess.CompletedProcess:
        return run_argv(
            self.argv(remote_command),
            host=self.host,
            input=input,
            timeout=timeout,
            what=what,
            fix="this machine needs a POSIX /bin/sh",
        )

    def popen(self, remote_command: str, **kwargs: Any) -> subprocess.Popen:
        return subprocess.Popen(self.argv(remote_command), preexec_fn=die_with_parent, **kwargs)

    def resolve(self) -> dict[str, list[str]]:
        return {"hostname": ["localhost"]}

    def close(self) -> None:
        pass
