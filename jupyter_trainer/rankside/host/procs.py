"""Process facts from /proc, and tree teardown, for this host.

Linux only. Used by the supervisor (to end a run's processes and prove none is left)
and by readers (to tell a live supervisor from a dead one, despite pid reuse).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple


def die_with_parent() -> None:
    """In a launcher child: get SIGTERM if the supervisor dies, so no run outlives it."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants (``PR_SET_CHILD_SUBREAPER``):
    one whose parent ends is re-parented here, not to init, so a process that leaves its
    session and empties its environment (``setsid env -i ...``) is still found among this
    process's children. False where the kernel refuses."""
    import ctypes

    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except OSError:
        return False


_PF_EXITING = 0x4  # of a process's flags: it has begun to exit


class Stat(NamedTuple):
    """What ``/proc/PID/stat`` says of a process."""

    pid: int
    state: str  # R, S, D, Z (a zombie: ended, its exit not yet collected), ...
    parent: int
    pgid: int
    session: int
    flags: int
    start_ticks: int

    @property
    def ended(self) -> bool:
        return self.state in ("Z", "X")

    @property
    def ending(self) -> bool:
        """Ended, or in the kernel's exit path (a thread of it may still run)."""
        return self.ended or bool(self.flags & _PF_EXITING)


def stat(pid: int | str) -> Stat | None:
    """What ``/proc/PID/stat`` says of ``pid``; None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    f = text[text.rindex(")") + 2 :].split()
    return Stat(int(pid), f[0], int(f[1]), int(f[2]), int(f[3]), int(f[6]), int(f[19]))


def stats() -> Iterator[Stat]:
    """Every process of this host, zombies included, as its ``/proc/PID/stat`` says."""
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            found = stat(entry.name)
            if found is not None:
                yield found


def process_table() -> dict[int, tuple[int, int]]:
    """Every live process of this host (zombies left out): pid -> (parent pid, start ticks)."""
    return {p.pid: (p.parent, p.start_ticks) for p in stats() if not p.ended}


def descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> set[int]:
    """The live processes below ``roots`` in ``table`` (``process_table``), roots left out."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def detach() -> None:
    """Fork into a new session; the parent exits at once, so whoever started this process
    never waits for it."""
    if os.fork():
        os._exit(0)
    os.setsid()


def redirect_output(path: Path) -> None:
    """Send this process's stdout and stderr to ``path`` (appended) and read stdin from
    /dev/null, as a detached process does."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)


def start_ticks(pid: int) -> int | None:
    """The process start time in clock ticks since boot, or None if there is no such process
    (or it is a zombie)."""
    found = stat(pid)
    return None if found is None or found.state == "Z" else found.start_ticks


def is_alive(pid: int | None, ticks: int | None = None) -> bool:
    """True when ``pid`` runs and, if ``ticks`` is given, is the same process as before."""
    if not pid:
        return False
    now = start_ticks(pid)
    return now is not None and (ticks is None or now == ticks)


def pids_with_env(name: str, value: str) -> list[int]:
    """Live processes whose initial environment has ``name=value`` (this process excluded).

    Every process of a run inherits ``JT_RUN_ID`` from its launcher, including those that
    left the launcher's process group, so this finds stragglers that a group kill misses.
    """
    needle = f"{name}={value}".encode()
    found = []
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            environ = Path(entry.path, "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and start_ticks(int(entry.name)) is not None:
            found.append(int(entry.name))
    return sorted(found)


def describe(pid: int) -> str:
    try:
        cmd = (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        cmd = "?"
    return f"{pid} {cmd.strip()[:200]}"


def signal_group(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def wait_gone(pids_fn, timeout: float, poll: float = 0.05) -> list[int]:
    """Poll ``pids_fn()`` until it returns no pids or ``timeout`` passes; return what is left."""
    deadline = time.monotonic() + timeout
    left = pids_fn()
    while left and time.monotonic() < deadline:
        time.sleep(poll)
        left = pids_fn()
    return left


def ephemeral_ports() -> tuple[int, int]:
    """The range the kernel picks a connection's local port from (Linux's default if unread)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port_range() -> tuple[int, int]:
    """The ports ``free_port`` draws from, ``first <= port < end``: the upper half of those
    below the kernel's ephemeral range."""
    low, _ = ephemeral_ports()
    return max(1024, low // 2), low


def free_port(host: str = "127.0.0.1", *, tries: int = 64) -> int:
    """A port nothing listens on now, for a process that binds it a moment later.

    It is drawn at random from below the kernel's ephemeral range: a port from inside it
    (what ``bind(0)`` gives) is one the kernel may hand to any outgoing connection (a Gloo
    pair, another run's store client) in the moment between this check and the bind, and
    on a busy machine it does. Below the range only another explicit bind can take it."""
    import random

    first, low = free_port_range()
    for _ in range(tries if low - first > 1000 else 0):
        port = random.randrange(first, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def termination_signal_name(code: int | None) -> str | None:
    """``-15`` (Popen) or ``143`` (shell) -> ``'SIGTERM'``; other codes -> None."""
    if code is None:
        return None
    num = -code if code < 0 else code - 128 if code > 128 else None
    if num is None:
        return None
    try:
        return signal.Signals(num).name
    except ValueError:
        return None


def py_spy() -> str | None:
    """The ``py-spy`` program: beside this interpreter (it is installed with the package),
    else on PATH."""
    import shutil

    beside = Path(os.path.dirname(os.path.abspath(sys.executable))) / "py-spy"
    return str(beside) if os.access(beside, os.X_OK) else shutil.which("py-spy")


def python_stack(pid: int, timeout: float = 15.0) -> str:
    """The Python stack of every thread of ``pid`` on this host, as ``py-spy dump`` prints it;
    a line saying why when it cannot be read."""
    import subprocess

    program = py_spy()
    if program is None:
        return "(no stack: py-spy is not installed; pip install py-spy)"
    if not is_alive(pid):
        return f"(no stack: process {pid} has ended)"
    try:
        done = subprocess.run(
            [program, "dump", "--pid", str(pid)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=plain_env(os.environ),
        )
    except subprocess.TimeoutExpired:
        return f"(no stack: py-spy did not answer within {timeout:g} s)"
    except OSError as exc:
        return f"(no stack: cannot run py-spy: {exc})"
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        hint = (
            " (reading another process's memory needs ptrace permission: run as the same "
            "user with kernel.yama.ptrace_scope=0, or give py-spy CAP_SYS_PTRACE)"
            if any("ermission" in line for line in why)
            else ""
        )
        return f"(no stack: py-spy failed: {why[-1] if why else done.returncode}{hint})"
    return done.stdout


# What makes a program colour its output even into a pipe: ipykernel sets the first two, so
# a run started from a notebook would store py-spy's stacks full of escape codes
_FORCED_COLOUR = ("FORCE_COLOR", "CLICOLOR_FORCE")


def plain_env(env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a program whose output is stored as text: no colour forced on it."""
    return {**{k: v for k, v in env.items() if k not in _FORCED_COLOUR}, "NO_COLOR": "1"}


def py_spy_argv(python: str | None, pid: object) -> list[str]:
    """``py-spy dump --pid PID`` for another host: the py-spy beside ``python`` (the ranks'
    interpreter) when there is one, else the one on that host's PATH."""
    beside = os.path.join(os.path.dirname(python), "py-spy") if python else "py-spy"
    return [
        "sh",
        "-c",
        'if [ -x "$1" ]; then s="$1"; else s=py-spy; fi; '
        'exec env -u FORCE_COLOR -u CLICOLOR_FORCE NO_COLOR=1 "$s" dump --pid "$2"',
        "sh",
        beside,
        str(pid),
    ]


def pids_in_group(pgid: int, session: int | None = None) -> list[int]:
    """Live processes in process group ``pgid`` (and, if given, in session ``session``).

    Ranks forked by a warm pool (``jupyter_trainer.rankside.hotstart``) keep the pool's initial
    environment in ``/proc/PID/environ``, so ``pids_with_env`` cannot see them; their
    process group (one per run, inside the pool's session) can. The session check keeps a
    later, unrelated group that happens to reuse the number out."""
    return sorted(
        p.pid
        for p in stats()
        if not p.ended and p.pgid == pgid and (session is None or p.session == session)
    )
