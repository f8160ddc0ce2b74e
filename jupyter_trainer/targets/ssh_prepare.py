"""What a node must have before an ssh run launches, and what it is sent.

The pre-flight asks each node (ssh_node.py ``preflight``) for facts; the functions here
decide what to ask (the modules and tools a run needs) and judge the answers, so a node
that cannot run the job stops the run before anything starts, with a message naming the
node and the fix. Also here: what a node needs to build a run's locked environment, the address other nodes reach a node at (an ssh alias is not
an address), the ``ssh -G`` options a hop between nodes needs, and the snapshot tarball.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import socket
import sys
import tarfile
from pathlib import Path
from typing import Any, Mapping

from ..errors import TargetError
from ..spec import LaunchSpec, RunSpec
from .ssh_commands import HOP_OPTIONS, HostConfig


def is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def required_modules(spec: RunSpec, code: Path) -> tuple[list[str], list[str]]:
    """(modules every node must import, modules whose version is recorded): the launcher's
    and the entry script's top-level imports, less those the snapshot itself provides."""
    from ..environment.preflight import LAUNCHER_MODULES, top_level_imports

    launcher = spec.launch.launcher
    needed = set(LAUNCHER_MODULES.get(launcher, ()))
    if launcher in ("torchrun", "horovod"):
        needed.add("torch")
    try:
        source = (code / spec.code.entry).read_text()
    except (OSError, UnicodeDecodeError):
        source = ""
    needed |= {module for module, _ in top_level_imports(source)}
    root = code if spec.code.entry.startswith("_jt/") else (code / spec.code.entry).parent
    own = {p.stem if p.suffix == ".py" else p.name for p in root.iterdir()} if root.is_dir() else set()
    needed -= own | {"jupyter_trainer", "__main__"} | set(sys.builtin_module_names)
    return sorted(needed), sorted({"torch", *(["horovod"] if launcher == "horovod" else [])})


def launcher_tools(launch: LaunchSpec, index: int) -> list[str]:
    """Programs node ``index`` must find on its PATH for ``launch``."""
    multi = launch.nodes > 1
    if launch.launcher == "mpirun":
        return (["mpirun"] + (["ssh"] if multi else [])) if index == 0 else ["orted"]
    if launch.launcher == "horovod":
        if index:
            return ["orted"] if launch.backend == "mpi" else []
        # horovodrun itself runs as ``python -m horovod.runner.launch``: its module is
        # checked with the imports, not as a program.
        return (["ssh"] if multi else []) + (["mpirun"] if launch.backend == "mpi" else [])
    return []


def judge(host: str, info: Mapping[str, Any], gpus_per_node: int) -> TargetError | None:
    """The pre-flight's verdict on one node: None when it can run the job."""
    problems = []
    if info["missing"]:
        problems.append(f"{info['executable']} cannot import {', '.join(info['missing'])} "
                        "(install them there, or point `python` at an environment that has "
                        "them)")
    for tool, path in info["tools"].items():
        if not path:
            problems.append(f"{tool} was not found on the node's PATH")
    if gpus_per_node and info.get("gpus", 0) < gpus_per_node:
        problems.append(f"{info.get('gpus', 0)} GPU(s) found, gpus_per_node is {gpus_per_node}"
                        + (f" ({info['gpu_error']})" if info.get("gpu_error") else ""))
    if not info.get("writable"):
        problems.append(f"workdir {info['workdir']} is not writable "
                        f"({info.get('write_error', 'permission denied')})")
    if problems:
        return TargetError(f"node {host} ({info['hostname']}): " + "; ".join(problems))
    return None


def node_address(host: HostConfig, options: Mapping[str, list[str]],
                 seen_from_first: Mapping[str, list[str]]) -> str:
    """An address the other nodes can reach ``host`` at. In order: the host's ``address``,
    its ssh HostName when that is an IP, the HostName resolved on node 0 (where it matters;
    a ProxyJump'd private name may not resolve here), then resolved here. Loopback answers
    are skipped (Debian maps its own hostname to 127.0.1.1)."""
    if host.address:
        return host.address
    name = options["hostname"][0]
    if is_ip(name):
        return name
    candidates = list(seen_from_first.get(name, []))
    try:
        candidates += [i[4][0] for i in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)]
    except OSError:
        pass
    usable = [a for a in candidates if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    usable.sort(key=lambda a: ":" in a)  # IPv4 first
    if not usable:
        raise TargetError(f"node {host.host}: its HostName {name!r} does not resolve to a "
                          "non-loopback address; set the host's address in the target, e.g. "
                          f"hosts = [{{host = \"{host.host}\", address = \"10.0.0.5\"}}]")
    return usable[0]


def hop_options(options: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """The ``ssh -G`` options a hop between nodes needs, as ssh printed them (a ``~`` in a
    key's path is the node user's home there, which is where a node keeps its own keys)."""
    return {k: list(dict.fromkeys(options[k])) for k in HOP_OPTIONS if k in options}


def snapshot_tarball(folder: Path) -> bytes:
    """The snapshot as a gzipped tar, files and folders only, in a stable order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for path in sorted(folder.rglob("*")):
            if path.is_file() or path.is_dir():
                tar.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buf.getvalue()


def environment_payload(lock_dir: Path) -> tuple[str, bytes]:
    """(folder name on the node, gzipped tar of ``build.py`` and ``lock/``): all a node
    needs to build a locked environment. The name hashes both, so a node keeps one folder
    per lock and builder version and an unchanged pair is unpacked only once."""
    from ..environment import build as builder

    files = {"build.py": Path(builder.__file__).read_bytes()}
    for path in sorted(lock_dir.iterdir()):
        if path.is_file():
            files[f"lock/{path.name}"] = path.read_bytes()
    digest = hashlib.sha256()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in ("lock", *files):
            info = tarfile.TarInfo(name)
            data = files.get(name)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
            digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return f"{lock_dir.name[:32]}-{digest.hexdigest()[:16]}", buf.getvalue()
