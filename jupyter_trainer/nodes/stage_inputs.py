"""A run's data inputs sent to a node's cache, ``<workdir>/data/<content hash>/<name>``.

One probe per node answers which inputs are there already (then nothing is sent), the
previous copy of each input name (``names/<input>``), and whether the node has rsync. An
input that is missing is sent into a private ``.partial-*`` folder and renamed into place
when complete, so a run never reads half an input and two nodes sharing one workdir never
mix their copies:

- with rsync on both ends, ``rsync -a`` over the node's own transport (the same ssh
  ControlMaster as every other call), ``--link-dest`` the previous copy: unchanged files
  are hard links, only changed files travel (rsync's delta transfer for those);
- without, a tar of the files whose hash differs from the previous copy's manifest, and a
  small program on the node (``node_unpack.py``) that links the unchanged ones.

Each copy's manifest (``<hash>.json``) stays next to it. Progress (bytes, rate) goes to a
callback the target hands on to the run's state.
"""

from __future__ import annotations

import io
import json
import posixpath
import re
import secrets
import shlex
import shutil
import subprocess
import tarfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import rankside
from ..core.errors import TargetError
from ..core.spec import DataSpec
from ..core.units import format_bytes
from ..inputs.digest import Manifest
from .transport import LocalShell, NodeShell

Progress = Callable[[str, dict[str, Any]], None]  # (input name, its record on this node)
_PROGRESS = re.compile(rb"^\s*([\d,]+)\s+(\d+)%\s+([\d.]+[kMGT]?B/s)")
_STAT = re.compile(
    r"^(Total bytes sent|Number of regular files transferred|"
    r"Total transferred file size):\s*([\d,]+)",
    re.M,
)
_UNPACK = rankside.DATA_UNPACK
DATA_STAGED_ENV = "JT_DATA_STAGED"  # set for the ranks: jt.data is in <workdir>/data
PROBE_TIMEOUT_S = 60
COPY_TIMEOUT_S = 24 * 3600


@dataclass
class NodeCache:
    """One node's data cache: how to reach it, where it is, how to rsync to it."""

    shell: NodeShell
    root: str  # <workdir>/data, absolute on the node
    python: str  # the node's interpreter (for the tar fallback)
    rsync_shell: list[str] | None = None  # rsync's -e command; None: a local folder
    present: set[str] = field(default_factory=set)
    previous: dict[str, str] = field(default_factory=dict)
    has_rsync: bool = False

    @property
    def label(self) -> str:
        return self.shell.host

    @property
    def can_rsync(self) -> bool:
        """rsync at both ends, and a transport it can use (ssh, or this machine's folders)."""
        reachable = self.rsync_shell is not None or isinstance(self.shell, LocalShell)
        return self.has_rsync and reachable and shutil.which("rsync") is not None

    def run(
        self,
        script: str,
        *,
        input: bytes | None = None,
        what: str,
        timeout: float = PROBE_TIMEOUT_S,
    ) -> str:
        # sh -c: some transports exec the split command line without a shell (Ray's)
        done = self.shell.run(
            shlex.join(["sh", "-c", script]), input=input, timeout=timeout, what=what
        )
        if done.returncode != 0:
            raise TargetError(
                f"node {self.label}: {what} failed (exit {done.returncode}): "
                f"{done.stderr.decode(errors='replace').strip()[-800:]}"
            )
        return done.stdout.decode(errors="replace")


def rsync_shell(shell: NodeShell) -> list[str] | None:
    """rsync's ``-e`` for an ssh transport: its own ssh command line, host left out."""
    argv = getattr(shell, "argv", None)
    if argv is None or isinstance(shell, LocalShell):
        return None
    full = list(argv())
    if "--" not in full:
        return None
    return full[: full.index("--")]


def probe(cache: NodeCache, inputs: Sequence[DataSpec]) -> None:
    """Which inputs the node has, the previous copy of each name, and rsync."""
    q = shlex.quote
    lines = [f"mkdir -p {q(cache.root)}/names && cd {q(cache.root)} || exit 3"]
    lines += [
        f"[ -d {q(d.hash)} ] && [ -f {q(d.hash + '.json')} ] && echo have {q(d.hash)}"
        for d in inputs
    ]
    lines += [
        f'p=$(cat names/{q(d.name)} 2>/dev/null) && [ -d "$p" ] && [ -f "$p.json" ] && '
        f'echo prev {q(d.name)} "$p"'
        for d in inputs
    ]
    lines.append("command -v rsync >/dev/null 2>&1 && echo rsync")
    lines.append("exit 0")
    out = cache.run("\n".join(lines), what="looking for the data inputs in its cache")
    for line in out.splitlines():
        word, *rest = line.split()
        if word == "have" and rest:
            cache.present.add(rest[0])
        elif word == "prev" and len(rest) == 2 and re.fullmatch(r"[0-9a-f]{16,64}", rest[1]):
            cache.previous[rest[0]] = rest[1]
        elif word == "rsync":
            cache.has_rsync = True


def stage(cache: NodeCache, item: DataSpec, found: Manifest, progress: Progress) -> dict[str, Any]:
    """Make ``item`` present on the node; returns what was done (bytes and files sent)."""
    record: dict[str, Any] = {"total": item.size, "bytes": 0, "files": 0}
    if item.hash in cache.present:
        record.update(state="cached")
        progress(item.name, record)
        return record
    partial = posixpath.join(cache.root, f".partial-{item.hash}-{secrets.token_hex(4)}")
    previous = cache.previous.get(item.name)
    started = time.monotonic()
    record.update(state="sending", started=time.time())
    progress(item.name, record)
    try:
        if cache.can_rsync:
            record.update(tool="rsync", **_rsync(cache, item, partial, previous, record, progress))
        else:
            record.update(tool="tar", **_tar(cache, item, found, partial, previous))
        _commit(cache, item, found, partial)
    except BaseException:
        try:
            cache.run(f"rm -rf -- {shlex.quote(partial)}", what="removing a partial copy")
        except TargetError:
            pass
        raise
    seconds = max(time.monotonic() - started, 1e-6)
    record.update(
        state="sent", seconds=round(seconds, 3), rate=round(record["transferred"] / seconds)
    )
    cache.present.add(item.hash)
    progress(item.name, record)
    return record


def _rsync(
    cache: NodeCache,
    item: DataSpec,
    partial: str,
    previous: str | None,
    record: dict[str, Any],
    progress: Progress,
) -> dict[str, Any]:
    q = shlex.quote
    dest = posixpath.join(partial, item.leaf) if item.kind == "dir" else partial
    cache.run(f"mkdir -p {q(partial)}", what="making a folder for a data input")
    argv = ["rsync", "-a", "--stats", "--info=progress2", "--no-inc-recursive", "--protect-args"]
    if previous:
        base = posixpath.join(cache.root, previous)
        argv.append(
            f"--link-dest={posixpath.join(base, item.leaf) if item.kind == 'dir' else base}"
        )
    source = item.path.rstrip("/") + ("/" if item.kind == "dir" else "")
    if cache.rsync_shell is not None:
        argv += ["-e", shlex.join(cache.rsync_shell), source, f"{cache.shell.host}:{dest}/"]
    else:
        argv += [source, dest + "/"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    text = bytearray()
    last = 0.0
    stdout = proc.stdout
    if not isinstance(stdout, io.BufferedReader):  # Popen's pipe, buffered by default
        proc.kill()
        proc.wait()
        raise TargetError(f"{argv[0]} was started without a readable stdout pipe")
    while chunk := stdout.read1(65536):
        text += chunk
        for line in re.split(rb"[\r\n]", chunk):
            match = _PROGRESS.match(line)
            if match and time.monotonic() - last > 0.2:
                last = time.monotonic()
                record.update(
                    bytes=int(match.group(1).replace(b",", b"")), rate_text=match.group(3).decode()
                )
                progress(item.name, record)
    code = proc.wait()
    error = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if code != 0:
        raise TargetError(
            f"node {cache.label}: rsync of data input {item.name} failed "
            f"(exit {code}): {error.strip()[-800:]}"
        )
    stats = {
        name: int(value.replace(",", ""))
        for name, value in _STAT.findall(text.decode(errors="replace"))
    }
    return {
        "sent": stats.get("Total bytes sent", 0),
        "files": stats.get("Number of regular files transferred", 0),
        "transferred": stats.get("Total transferred file size", 0),
        "bytes": item.size,
    }


def _tar(
    cache: NodeCache, item: DataSpec, found: Manifest, partial: str, previous: str | None
) -> dict[str, Any]:
    old: dict[str, tuple[int, str]] = {}
    if previous:
        try:
            text = cache.run(
                f"cat {shlex.quote(posixpath.join(cache.root, previous + '.json'))}",
                what="reading the previous copy's manifest",
            )
            old = {e.path: (e.size, e.sha256) for e in Manifest.from_json(json.loads(text)).entries}
        except (TargetError, ValueError, KeyError):
            previous, old = None, {}
    prefix = item.leaf + "/" if item.kind == "dir" else ""
    local = Path(item.path)
    changed = [e for e in found.entries if old.get(e.path) != (e.size, e.sha256)]
    kept = [prefix + e.path for e in found.entries if old.get(e.path) == (e.size, e.sha256)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for e in changed:
            tar.add(
                local / e.path if item.kind == "dir" else local,
                arcname=prefix + e.path,
                recursive=False,
            )
    payload = (
        json.dumps(
            {
                "dest": partial,
                "base": posixpath.join(cache.root, previous) if previous else None,
                "link": kept,
            }
        ).encode()
        + b"\n"
        + buf.getvalue()
    )
    cache.run(
        shlex.join([cache.python, "-c", rankside.text(_UNPACK)]),
        input=payload,
        what=f"unpacking data input {item.name}",
        timeout=COPY_TIMEOUT_S,
    )
    size = sum(e.size for e in changed)
    return {"sent": len(payload), "files": len(changed), "transferred": size}


def _commit(cache: NodeCache, item: DataSpec, found: Manifest, partial: str) -> None:
    q = shlex.quote
    token = secrets.token_hex(4)
    final, meta = item.hash, f"{item.hash}.json"
    script = (
        f"set -e; cd {q(cache.root)}; cat > .{q(meta)}.{token}; "
        f"mv -T {q(partial)} {q(final)} 2>/dev/null || rm -rf -- {q(partial)}; "
        f"mv .{q(meta)}.{token} {q(meta)}; "
        f"printf %s {q(final)} > names/.{q(item.name)}.{token}; "
        f"mv names/.{q(item.name)}.{token} names/{q(item.name)}"
    )
    cache.run(
        script,
        input=json.dumps(found.to_json()).encode(),
        what=f"putting data input {item.name} in place",
    )


def stage_inputs(
    caches: Sequence[NodeCache],
    inputs: Sequence[DataSpec],
    home: Path,
    report: Callable[[dict[str, Any]], None],
    log: Callable[[str], None],
) -> dict[str, Any]:
    """Every input on every node (nodes in parallel, inputs in turn on each); ``report``
    gets ``{"data": {input: {node: record}}, "done": bool}`` as it goes. Returns that, with
    each node's errors raised as one ``TargetError`` naming every failed node."""
    from concurrent.futures import ThreadPoolExecutor
    from threading import Lock

    from ..core.errors import SpecError
    from ..inputs.inputs import check_unchanged

    try:
        manifests = {d.hash: check_unchanged(d, home) for d in inputs}
    except SpecError as exc:
        raise TargetError(f"{exc}; nothing was launched") from None
    status: dict[str, Any] = {"data": {d.name: {} for d in inputs}, "done": False}
    lock = Lock()

    def progress_on(cache: NodeCache) -> Progress:
        def progress(name: str, record: dict[str, Any]) -> None:
            with lock:
                status["data"][name][cache.label] = dict(record)
                report(json.loads(json.dumps(status)))

        return progress

    def one_node(cache: NodeCache) -> str | None:
        try:
            probe(cache, inputs)
            for item in inputs:
                done = stage(cache, item, manifests[item.hash], progress_on(cache))
                if done["state"] == "sent":
                    log(
                        f"[jt] data {item.name} ({format_bytes(item.size)}, {item.files} files) to "
                        f"{cache.label} with {done['tool']}: {done['files']} file(s), "
                        f"{format_bytes(done['transferred'])} sent in {done['seconds']} s\n"
                    )
                else:
                    log(
                        f"[jt] data {item.name} is in {cache.label}'s cache already "
                        f"({item.hash}): nothing sent\n"
                    )
        except TargetError as exc:
            return str(exc)
        return None

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(caches)))) as pool:
        errors = [e for e in pool.map(one_node, caches) if e]
    status["done"] = True
    report(status)
    if errors:
        raise TargetError(
            "staging the data inputs failed; nothing was launched:\n  " + "\n  ".join(errors)
        )
    return status
