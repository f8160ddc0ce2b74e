"""Blocks of ports that one test process holds for as long as it lives, so that test sessions
running side by side on one machine (two clones' suites, say) never take the same ones.

Each block has a lock file in ``$TMPDIR/jt-port-blocks``; a process holds a block by an
exclusive ``flock`` on it, which the kernel releases when the process ends, however it ends.
A block whose first ports are taken by something else is passed over. Every block lies
below the ports ``procs.free_port`` draws from (the lower half of the kernel's ephemeral
range's start and up), where a run's rendezvous port or a test's server could take a port of
a fixture that is not yet listening.
"""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import zlib
from pathlib import Path

from jupyter_trainer.rankside.host import procs

_HELD: dict[tuple[str, int, int], tuple[int, int]] = {}  # (kind, first, size) -> (base, fd)


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def held_block(kind: str, first: int, size: int, count: int, worker: int = 0) -> int:
    """The first port of a block of ``size`` ports in ``first .. first + size * count`` that
    this process holds (the same one on every call); the search starts at a place of this
    test session and worker, so that blocks are found at the first try."""
    key = (kind, first, size)
    drawn, _ = procs.free_port_range()
    if first + size * count > drawn:
        raise RuntimeError(
            f"the {kind} ports {first}-{first + size * count - 1} reach {drawn}, where "
            "procs.free_port draws ports: give the fixture a range below it"
        )
    if key in _HELD:
        return _HELD[key][0]
    folder = Path(tempfile.gettempdir()) / "jt-port-blocks"
    folder.mkdir(mode=0o700, exist_ok=True)
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID") or str(os.getpid())
    start = zlib.crc32(uid.encode()) + worker
    for i in range(count):
        slot = (start + i) % count
        fd = os.open(folder / f"{kind}-{first}-{size}-{slot}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        base = first + size * slot
        if _free(base) and _free(base + 1):
            _HELD[key] = (base, fd)
            return base
        os.close(fd)
    raise RuntimeError(
        f"no free block of {size} ports for {kind} in {first}-{first + size * count}"
    )
