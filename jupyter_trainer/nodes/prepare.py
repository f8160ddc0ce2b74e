"""What a node must have before a run launches there, and what it is sent.

The agent's pre-flight (rankside/agent/preflight.py) answers facts; the functions here decide
which modules a run needs and judge the answer, so a node that cannot run the job stops
the run before anything starts, with a message naming the node and the fix. Also here:
the snapshot tarball and what a node needs to build a run's locked environment.
"""

from __future__ import annotations

import hashlib
import io
import sys
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import TargetError
from ..core.spec import RunSpec


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
    own = {
        p.stem if p.suffix == ".py" else p.name
        for folder in (root, code / "_jt" / "azureml_v1")  # the rank's path gives these
        if folder.is_dir()
        for p in folder.iterdir()
    }
    needed -= own | {"jupyter_trainer", "__main__"} | set(sys.builtin_module_names)
    return sorted(needed), sorted({"torch", *(["horovod"] if launcher == "horovod" else [])})


def judge(host: str, info: Mapping[str, Any], gpus_per_node: int) -> TargetError | None:
    """The pre-flight's verdict on one node: None when it can run the job."""
    problems = []
    if info["missing"]:
        problems.append(
            f"{info['executable']} cannot import {', '.join(info['missing'])} "
            "(install them there, or point `python` at an environment that has "
            "them)"
        )
    for tool, path in info["tools"].items():
        if not path:
            problems.append(f"{tool} was not found on the node's PATH")
    if gpus_per_node and info.get("gpus", 0) < gpus_per_node:
        problems.append(
            f"{info.get('gpus', 0)} GPU(s) found, gpus_per_node is {gpus_per_node}"
            + (f" ({info['gpu_error']})" if info.get("gpu_error") else "")
        )
    if not info.get("writable"):
        problems.append(
            f"workdir {info['workdir']} is not writable "
            f"({info.get('write_error', 'permission denied')})"
        )
    if problems:
        return TargetError(f"node {host} ({info['hostname']}): " + "; ".join(problems))
    return None


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
    from .. import rankside

    files = {"build.py": rankside.source(rankside.ENV_BUILD)}
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
