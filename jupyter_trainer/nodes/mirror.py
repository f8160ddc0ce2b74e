"""Live copies of a remote run's files in the local run directory.

Each node runs the agent's ``follow`` (rankside/agent/follow.py) behind one long-lived ssh session: it
sends the new bytes of every rank's log and events, each rank record when it changes, and
its launcher's state, as frames. Here they are written under the same names as a local run
(``logs/rank-<r>.log``, ``events/rank-<r>.jsonl``, ``ranks/rank-<r>.json``), so the monitor,
the CLI and the API read a remote run exactly like a local one.

Offsets make this safe to repeat: a frame says where its bytes start, and bytes already on
disk are skipped. So after a network blip the follower is simply started again from the
local files' sizes, and nothing is lost or doubled; on a filesystem the nodes share, two
nodes sending the same file write it once.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import re
import select
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import TargetError
from ..core.files import current_umask
from .frames import FrameReader
from .ssh import classify
from .transport import NodeSession, NodeShell, Pipes

_APPENDED = re.compile(r"(logs/rank-\d+\.(?:log|times)|events/rank-\d+\.jsonl)")
_REPLACED = re.compile(
    r"ranks/rank-\d+(?:\.attempt-\d+)?\.json|events/rank-\d+\.beat"
    r"|collectives/rank-\d+\.json"  # a rank's Flight Recorder dump
    r"|session/(?:ready\.\d+|stop|results/\d+\.\d+\.(?:json|pkl))"  # a live session's
)
_LAUNCHER = re.compile(r"logs/launcher-(\d+)\.log")
STALL_S = 10.0  # no frame (not even a heartbeat) this long: the session is dead
RETRY_S = (0.2, 3.0)  # first and longest pause between reconnections


class LocalFiles:
    """Writes frames into the local run directory, idempotently."""

    def __init__(self, run_dir: str) -> None:
        self.root = Path(run_dir)
        self.launcher_offsets: dict[int, int] = {}
        self._partial: dict[int, bytes] = {}
        self.bytes_written = 0
        # a replaced file's newest version here, by its modification time on the node
        self._versions: dict[str, int] = {}

    def offsets(self) -> dict[str, int]:
        """Where a (re)started follower should resume: the local files' sizes."""
        found = {}
        for sub in ("logs", "events"):
            folder = self.root / sub
            for path in folder.iterdir() if folder.is_dir() else ():
                rel = f"{sub}/{path.name}"
                if _APPENDED.fullmatch(rel):
                    found[rel] = path.stat().st_size
        return found

    def resume_offsets(self, node: int) -> dict[str, int]:
        return {**self.offsets(), f"logs/launcher-{node}.log": self.launcher_offsets.get(node, 0)}

    def apply(self, node: int, label: str, header: dict[str, Any], payload: bytes) -> None:
        rel = str(header.get("p", ""))
        kind = header.get("t")
        if kind == "file" and _APPENDED.fullmatch(rel):
            self._append_at(self.root / rel, int(header["o"]), payload)
        elif kind == "put" and _REPLACED.fullmatch(rel):
            stamp = header.get("m")
            if isinstance(stamp, int):
                # Nodes that share a filesystem each send the same file; one's older read of
                # it may arrive after another's newer one, and must not replace it.
                if stamp < self._versions.get(rel, -1):
                    return
                self._versions[rel] = stamp
            self._replace(self.root / rel, payload)
        elif kind == "file" and (m := _LAUNCHER.fullmatch(rel)) and int(m.group(1)) == node:
            self._launcher_log(node, label, int(header["o"]), payload)

    def _append_at(self, path: Path, offset: int, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            size = fh.seek(0, os.SEEK_END)
            if offset + len(data) <= size:
                return  # already here (a resend, or the other node of a shared filesystem)
            if offset > size:
                # A gap cannot happen with offsets taken from these files; keep the bytes
                # rather than lose them, and say so in the file.
                data = f"\n[jt: {offset - size} bytes missing here]\n".encode() + data
            else:
                data = data[size - offset :]
            fh.write(data)
            self.bytes_written += len(data)

    def _replace(self, path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if path.read_bytes() == data:
                return
        except OSError:
            pass
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)

    def _launcher_log(self, node: int, label: str, offset: int, data: bytes) -> None:
        """Each node's launcher output, line by line, into the local launcher.log."""
        have = self.launcher_offsets.get(node, 0)
        if offset + len(data) <= have:
            return
        data = data[max(0, have - offset) :]
        self.launcher_offsets[node] = max(have, offset) + len(data)
        text = self._partial.pop(node, b"") + data
        lines = text.split(b"\n")
        if lines[-1]:
            self._partial[node] = lines[-1]
        prefix = f"[{label}] ".encode()
        out = b"".join(prefix + line + b"\n" for line in lines[:-1])
        if out:
            self.log(out)

    def flush_partial(self) -> None:
        for node, rest in sorted(self._partial.items()):
            self.log(f"[node {node}] ".encode() + rest + b"\n")
        self._partial.clear()

    def log(self, data: bytes | str) -> None:
        path = self.root / "logs" / "launcher.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)


class NodeFollower:
    """One node's follow session: started, read without blocking, restarted after a blip,
    and declared lost when the node stays unreachable for ``node_timeout`` seconds."""

    def __init__(
        self,
        client: NodeShell,
        command: Callable[[], str],
        node: int,
        label: str,
        files: LocalFiles,
        node_timeout: float,
    ) -> None:
        self.client = client
        self.command = command
        self.node = node
        self.label = label
        self.files = files
        self.node_timeout = node_timeout
        self.proc: NodeSession | None = None
        self.pipes: Pipes | None = None  # the session's, while there is one
        self.reader = FrameReader()
        self.status: dict[str, Any] = {}
        self.last_frame = 0.0
        self.down_since: float | None = None
        self.next_try = 0.0
        self.retry = RETRY_S[0]
        self.reconnects = 0
        self.error = ""
        self._stderr = b""

    def start(
        self,
        session: NodeSession | None = None,
        request: dict[str, Any] | None = None,
        reader: FrameReader | None = None,
    ) -> None:
        """A new follow session, or ``session`` (the run's own, nodes/session.py) turned
        into one with ``request``."""
        proc = session or self.client.popen(
            self.command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        pipes = Pipes.of(proc, self.label)
        self.proc, self.pipes = proc, pipes
        for stream in (pipes.stdout, pipes.stderr):
            fd = stream.fileno()
            fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
        start = {**(request or {}), "offsets": self.files.resume_offsets(self.node)}
        try:
            pipes.stdin.write(json.dumps(start).encode() + b"\n")
            pipes.stdin.flush()
        except OSError:
            pass  # the session died already: pump() sees it
        self.reader = reader or FrameReader()
        self.last_frame = time.monotonic()
        self._stderr = b""

    def pump(self) -> None:
        """Apply every frame that has arrived; notice a dead session and restart it."""
        now = time.monotonic()
        proc, pipes = self.proc, self.pipes
        if proc is None or pipes is None:
            if now >= self.next_try:
                self.start()
            return
        got = False
        while True:
            try:
                data = os.read(pipes.stdout.fileno(), 1 << 20)
            except BlockingIOError:
                break
            if not data:
                break
            for header, payload in self.reader.feed(data):
                got = True
                if header.get("t") == "status":
                    self.status = header
                else:
                    self.files.apply(self.node, self.label, header, payload)
        self._read_stderr(pipes)
        if got:
            self.last_frame = now
            if self.down_since is not None:
                self.files.log(
                    f"[jt] node {self.label}: connection back after "
                    f"{now - self.down_since:.1f} s; resumed from offsets\n"
                )
            self.down_since, self.retry = None, RETRY_S[0]
        dead = proc.poll() is not None
        if dead or now - self.last_frame > STALL_S:
            self._lost_session(proc, pipes, now, dead)

    def _read_stderr(self, pipes: Pipes) -> None:
        try:
            while chunk := os.read(pipes.stderr.fileno(), 65536):
                self._stderr = (self._stderr + chunk)[-4000:]
        except (BlockingIOError, ValueError, OSError):
            pass

    def _lost_session(self, proc: NodeSession, pipes: Pipes, now: float, dead: bool) -> None:
        exit_code = proc.returncode if dead else None
        code = 255 if exit_code is None else exit_code  # a stalled session counts as ssh's
        self.kill(keep_stderr=True)
        self._read_stderr(pipes)
        pipes.stderr.close()
        err = self._stderr.decode(errors="replace")
        self.error = (
            classify(self.client.host, code, err)
            if code == 255
            else (" ".join(err.split())[-600:] or f"the follow session ended with code {code}")
        )
        if self.down_since is None:
            self.down_since = now
            self.files.log(
                f"[jt] node {self.label}: connection lost ({self.error}); reconnecting\n"
            )
        self.proc = self.pipes = None
        self.reconnects += 1
        self.next_try = now + self.retry
        self.retry = min(RETRY_S[1], self.retry * 2)

    def request_finish(self, args: dict[str, Any]) -> bool:
        """Ask the live session to end the run on its node (the agent's ``finish``): no new
        connection, shell or interpreter. False when there is no live session to ask."""
        return self.request({"finish": args})

    def request(self, body: dict[str, Any]) -> bool:
        """Send one request line to the live session; False when there is none."""
        if self.proc is None or self.pipes is None or self.proc.poll() is not None:
            return False
        try:
            self.pipes.stdin.write(json.dumps(body).encode() + b"\n")
            self.pipes.stdin.flush()
        except OSError:
            return False
        return True

    def await_finish(self, idle_timeout: float) -> tuple[dict[str, Any], bytes] | None:
        """Apply frames until the node's answer to ``request_finish``: (answer, outputs tar).
        None if the session ends or stays silent ``idle_timeout`` seconds first."""
        return self.await_answer("finished", idle_timeout)

    def await_answer(self, kind: str, idle_timeout: float) -> tuple[dict[str, Any], bytes] | None:
        """Apply frames until one of type ``kind``: (it, the tar frames' bytes before it).
        None if the session ends or stays silent ``idle_timeout`` seconds first."""
        tar = bytearray()
        if self.pipes is None:
            return None
        fd = self.pipes.stdout.fileno()
        deadline = time.monotonic() + idle_timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], min(0.5, deadline - time.monotonic()))
            if not ready:
                continue
            try:
                data = os.read(fd, 1 << 20)
            except BlockingIOError:
                continue
            if not data:
                return None
            deadline = time.monotonic() + idle_timeout  # progress: a big outputs/ is fine
            for header, payload in self.reader.feed(data):
                got = header.get("t")
                if got == kind:
                    return header, bytes(tar)
                if got == "tar":
                    tar += payload
                elif got == "status":
                    self.status = header
                else:
                    self.files.apply(self.node, self.label, header, payload)
        return None

    def lost_for(self) -> float:
        return 0.0 if self.down_since is None else time.monotonic() - self.down_since

    def kill(self, keep_stderr: bool = False) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        if self.proc is not None and self.pipes is not None:
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
            streams = [self.pipes.stdin, self.pipes.stdout]
            for stream in streams if keep_stderr else [*streams, self.pipes.stderr]:
                try:
                    stream.close()
                except OSError:
                    pass


# folder -> key in the report
COLLECTED = {"outputs": "outputs", "logs/user": "logs", "checkpoints": "checkpoints"}


def merge_outputs(data: bytes, run_dir: Path) -> dict[str, Any]:
    """Unpack one node's ``outputs/``, ``logs/user/`` and ``checkpoints/`` (a tar) into the run
    folder; a file already there is kept. Reports what was added, relative to each folder.

    Each file gets the mode it had on the node less this process's umask, as if it had been
    written here: a node's user may keep a looser umask than a shared workspace's 027."""
    found: dict[str, list[str]] = {key: [] for key in COLLECTED.values()}
    mask = current_umask()
    if not data:
        return {"outputs": []}
    kept = []
    with tempfile.TemporaryDirectory(dir=run_dir, prefix=".outputs-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, filter="data")
            else:  # Python < 3.11.4: refuse what the data filter would
                for member in tar.getmembers():
                    if (
                        member.name.startswith("/")
                        or ".." in member.name.split("/")
                        or not (member.isfile() or member.isdir())
                    ):
                        raise TargetError(f"refusing output {member.name!r} from a node")
                tar.extractall(tmp)
        for folder, key in COLLECTED.items():
            base = Path(tmp, folder)
            for path in sorted(base.rglob("*")) if base.is_dir() else ():
                if path.is_dir():
                    continue
                rel = path.relative_to(base)
                dest = run_dir / folder / rel
                if dest.exists():
                    kept.append(f"{folder}/{rel}")
                    continue
                dest.parent.mkdir(parents=True, exist_ok=True)
                if not path.is_symlink():
                    path.chmod(stat.S_IMODE(path.lstat().st_mode) & ~mask)
                path.replace(dest)
                found[key].append(str(rel))
    report: dict[str, Any] = {"outputs": found["outputs"]}
    report.update({key: found[key] for key in ("logs", "checkpoints") if found[key]})
    return {**report, **({"conflicts_kept_first": kept} if kept else {})}
