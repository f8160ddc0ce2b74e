"""How much a URL input may download, and for how long, and what is said while it does.

Two limits bound each URL input's download, as curl's ``--max-filesize`` and
``--max-time`` do:

- ``$JUPYTER_TRAINER_MAX_DOWNLOAD_BYTES`` (default 20 GiB; ``50G``, ``500MiB`` or bytes):
  a server that says it has more is refused before anything is written, and one that
  sends more than it is allowed is cut off at the limit;
- ``$JUPYTER_TRAINER_DOWNLOAD_TIMEOUT`` (default 3600 seconds): the whole download, from
  the first connection to the last byte. A server that stops sending, or trickles, is cut
  off when it is up, not one idle timeout later: a watchdog shuts the connection down.

Both are read when a run is submitted, so ``%env`` in a notebook or the shell's
environment sets them. While it downloads, a ``Transfer`` says how far it has got every
``SAID_EVERY_S`` (bytes of the total, rate), in the form the text monitor gives staging.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import SpecError
from ..core.units import format_bytes, parse_bytes
from ..rankside.host.home import HOME_ENV

MAX_BYTES_ENV = "JUPYTER_TRAINER_MAX_DOWNLOAD_BYTES"
TIMEOUT_ENV = "JUPYTER_TRAINER_DOWNLOAD_TIMEOUT"
DEFAULT_MAX_BYTES = 20 << 30
DEFAULT_TIMEOUT_S = 3600.0
SAID_EVERY_S = 2.0

Say = Callable[[str], None]


def say_on_stderr(line: str) -> None:
    """Where a submit reports its downloads: stderr, so a CLI's stdout stays the run id."""
    print(f"[jt] {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Limits:
    max_bytes: int = DEFAULT_MAX_BYTES
    seconds: float = DEFAULT_TIMEOUT_S

    @classmethod
    def from_env(cls) -> Limits:
        raw_size = os.environ.get(MAX_BYTES_ENV, "").strip()
        raw_time = os.environ.get(TIMEOUT_ENV, "").strip()
        size = parse_bytes(raw_size) if raw_size else DEFAULT_MAX_BYTES
        if not size:
            raise SpecError(
                f"{MAX_BYTES_ENV}={raw_size!r} is not a size: set it to bytes or a "
                "size such as 50G or 500MiB, or unset it for the default (20G)"
            )
        try:
            seconds = float(raw_time) if raw_time else DEFAULT_TIMEOUT_S
        except ValueError:
            seconds = -1.0
        if not 0 < seconds < float("inf"):
            raise SpecError(
                f"{TIMEOUT_ENV}={raw_time!r} is not a number of seconds above 0: set "
                "it to, say, 7200, or unset it for the default (3600)"
            )
        return cls(size, seconds)


class Transfer:
    """One download within its ``Limits``: counts bytes, says progress, and shuts down the
    watched connections when its time is up (``expired``). A context manager: the watchdog
    runs from ``__enter__`` to ``__exit__``."""

    def __init__(
        self, name: str, shown: str, limits: Limits, say: Say | None, room: Path | None = None
    ) -> None:
        self.name, self.shown, self.limits, self.say = name, shown, limits, say
        self.room = room  # the folder the download goes to: its free space is checked
        self.total: int | None = None  # what the server says it has, when it says
        self.bytes = 0
        self.expired = False
        self._started = time.monotonic()
        self._said = 0.0
        self._announced = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._finished = False
        self._timer = threading.Timer(limits.seconds, self._expire)
        self._timer.daemon = True

    def __enter__(self) -> Transfer:
        self._started = time.monotonic()
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._finished = True
        self._timer.cancel()

    # -- limits --------------------------------------------------------------------
    def left(self) -> float:
        return self.limits.seconds - (time.monotonic() - self._started)

    def expect(self, total: int | None) -> None:
        """The size the server gave (None: it did not say): over the limit, or over the
        free space where it goes, stops here, before a byte is written."""
        if total is not None:
            self.total = total
            if total > self.limits.max_bytes:
                raise SpecError(
                    f"the data input {self.name} ({self.shown}) is "
                    f"{format_bytes(total)}, over the download limit of "
                    f"{format_bytes(self.limits.max_bytes)}; raise it with "
                    f"{MAX_BYTES_ENV}={_size_hint(total)}"
                )
            free = shutil.disk_usage(self.room).free if self.room is not None else total
            if total > free:
                raise SpecError(
                    f"the data input {self.name} ({self.shown}) is "
                    f"{format_bytes(total)}, and {self.room} has {format_bytes(free)} "
                    f"free; make room there, or set {HOME_ENV} to a store on a "
                    "larger disk"
                )
        if self.say and not self._announced:
            self._announced = True
            size = f" {format_bytes(self.total)}" if self.total is not None else ""
            self.say(f"data {self.name} from {self.shown}: downloading{size}")

    def add(self, count: int) -> None:
        """``count`` more bytes arrived: over the size or the time stops the download."""
        self.bytes += count
        if self.bytes > self.limits.max_bytes:
            said = (
                f" (it said {format_bytes(self.total)})"
                if self.total is not None
                else " (it did not say its size)"
            )
            raise SpecError(
                f"the data input {self.name} ({self.shown}) sent more than the "
                f"download limit of {format_bytes(self.limits.max_bytes)}{said}; "
                f"the download was stopped and removed; raise the limit with "
                f"{MAX_BYTES_ENV}={_size_hint(self.bytes)}"
            )
        self.check_time()
        now = time.monotonic()
        if self.say and now - self._said >= SAID_EVERY_S:
            self._said = now
            self.say(self.progress_text())

    def check_time(self) -> None:
        if self.expired or self.left() <= 0:
            raise self.timeout_error()

    def timeout_error(self) -> SpecError:
        got = (
            f"{format_bytes(self.bytes)} of {format_bytes(self.total)}"
            if self.total
            else format_bytes(self.bytes)
        )
        return SpecError(
            f"the data input {self.name} ({self.shown}) did not download within "
            f"the limit of {self.limits.seconds:g} s ({got} arrived); the download "
            f"was stopped and removed; raise the limit with {TIMEOUT_ENV}="
            f"{max(60, int(self.limits.seconds * 4))} (seconds), or check the server"
        )

    # -- progress ------------------------------------------------------------------
    def rate(self) -> float:
        return self.bytes / max(time.monotonic() - self._started, 1e-6)

    def progress_text(self) -> str:
        of = f" of {format_bytes(self.total)}" if self.total else ""
        return (
            f"data {self.name} from {self.shown}: {format_bytes(self.bytes)}{of}, "
            f"{format_bytes(int(self.rate()))}/s"
        )

    def done_text(self) -> str:
        seconds = time.monotonic() - self._started
        return (
            f"data {self.name} from {self.shown}: {format_bytes(self.bytes)} downloaded in "
            f"{seconds:.1f} s, {format_bytes(int(self.rate()))}/s"
        )

    # -- the watchdog --------------------------------------------------------------
    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the time is up (at once, if it is up already)."""
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            if not self._finished:
                for sock in self._sockets:
                    _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    """End the connection under a blocked read in another thread. ``socket.socket``'s own
    method, not ``ssl.SSLSocket``'s (which drops its TLS state under the reader): the reader
    sees the end of the stream, or an error, and finds ``expired`` set. A socket closed
    since has no descriptor any more (-1), so nothing else can be hit."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _size_hint(size: int) -> str:
    """A limit that takes ``size`` with room: twice it, rounded up in its unit, as the
    variable takes it (``64G``)."""
    for unit, scale in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20)):
        if size >= scale:
            return f"{-(-size // scale) * 2}{unit}"
    return "1M"
