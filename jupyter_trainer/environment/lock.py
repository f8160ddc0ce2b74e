"""Definition -> lock: exact versions with hashes, from ``uv pip compile``, cached in the store.

```
environments/locks/<lock-key>/requirements.in     what the definition asks for
                              requirements.lock   uv's exact pins, with --hash lines
                              lock.json           Python version, inherit, the base it saw
                              constraints.txt     the kernel's torch build, when it is kept
```
The key hashes what the resolution depends on: the requirements, the Python version, and
for a layered (``inherit: true``) definition the base interpreter's installed packages. A
second resolve of the same definition on the same kernel therefore finds the folder and
makes no uv call and no network request.

For a layered definition the base's installed versions are given to uv as *preferences*
(uv reads an existing output file as preferred pins): where a requirement accepts what the
kernel already has, the lock pins that version and the build installs nothing for it;
where it does not, the lock pins what the requirement needs and the environment's copy
wins. A preference never makes resolution fail, unlike a constraint.

The lock folder is the unit a remote node realises (see ``build.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import EnvError
from ..rankside.programs import env_build as builder
from . import torchbuild
from .definition import EnvDefinition
from .places import own_environments


@dataclass(frozen=True)
class Lock:
    """A lock folder in the store."""

    key: str
    path: Path
    meta: dict[str, Any]

    @property
    def text(self) -> str:
        return (self.path / "requirements.lock").read_text()


def kernel_python_version() -> str:
    return "%d.%d.%d" % sys.version_info[:3]


def lock_python(definition: EnvDefinition) -> str:
    """The Python version a definition locks for: its own, else the kernel's X.Y."""
    return definition.python or "%d.%d" % sys.version_info[:2]


def check_python(definition: EnvDefinition) -> None:
    """A layered environment runs the kernel's interpreter, so the versions must agree."""
    if (
        definition.inherit
        and definition.python
        and not builder.version_matches(definition.python, kernel_python_version())
    ):
        raise EnvError(
            f'environment {definition.name!r}: python: "{definition.python}" with inherit: '
            f"true cannot layer on the notebook kernel's Python {kernel_python_version()}; "
            f'drop `python:` (or write "{kernel_python_version()[:4]}"), or set inherit: false '
            "for a separate interpreter"
        )


def lock_key(definition: EnvDefinition, base: dict[str, Any] | None) -> str:
    identity: dict[str, Any] = {
        "format": builder.FORMAT,
        "pip": list(definition.pip),
        "python": lock_python(definition),
        "inherit": definition.inherit,
    }
    if definition.inherit:
        if base is None:
            raise ValueError("a layered definition needs the base description")
        identity["base"] = {k: base[k] for k in ("identity", "version", "packages")}
        kept = torchbuild.resolution(definition.pip, base)
        if kept is not None:  # the index of the kernel's torch build is part of the answer
            identity["torch_index"] = kept["index"]
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def locks_dir(home: Path) -> Path:
    """This user's locks (``places``): in a workspace, theirs alone."""
    return own_environments(home) / "locks"


def find(home: Path, key: str) -> Lock | None:
    path = locks_dir(home) / key
    try:
        meta = json.loads((path / "lock.json").read_text())
    except (OSError, ValueError):
        return None
    return Lock(key, path, meta)


def ensure(
    definition: EnvDefinition,
    home: Path,
    *,
    base: dict[str, Any] | None = None,
    uv: str | None = None,
) -> Lock:
    """The lock of ``definition`` for this kernel, compiled once and then read from the store."""
    check_python(definition)
    if definition.inherit and base is None:
        base = builder.describe_self()
    key = lock_key(definition, base)
    found = find(home, key)
    if found is not None:
        return found
    parent = locks_dir(home)
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}.tmp-", dir=parent))
    try:
        meta = compile_into(tmp, definition, base=base, uv=uv)
        try:
            os.rename(tmp, parent / key)
        except OSError:  # another kernel locked the same definition first: use theirs
            if find(home, key) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return find(home, key) or Lock(key, parent / key, meta)


def compile_into(
    folder: Path, definition: EnvDefinition, *, base: dict[str, Any] | None, uv: str | None = None
) -> dict[str, Any]:
    """Run ``uv pip compile`` for ``definition`` in ``folder``; write the three lock files.

    Reproducible: the same definition and base give the same ``requirements.lock`` text
    (no header, fixed relative file names in uv's ``# via`` annotations). A layered
    definition that keeps a kernel's labelled torch (``2.13.0+cpu``) and needs torch is
    resolved a second time against that exact build and its index (``torchbuild``).
    """
    python = lock_python(definition)
    (folder / "requirements.in").write_text("".join(f"{r}\n" for r in definition.pip))
    kept = torchbuild.resolution(definition.pip, base) if definition.inherit else None
    meta: dict[str, Any] = {}
    try:
        uv_bin = builder.find_uv(uv)
        if definition.pip:
            labelled = kept is not None and any("+" in r for r in definition.pip)
            if labelled:  # a pin like torchvision==0.28.0+cpu is on the torch index alone
                needs_torch = True
            else:
                _compile(folder, uv_bin, python, base if definition.inherit else None)
                needs_torch = any(
                    e["name"] == "torch"
                    for e in builder.parse_lock((folder / "requirements.lock").read_text())
                )
            if kept is not None and needs_torch:
                meta["torch"] = kept
                _compile(folder, uv_bin, python, base, kept)
        else:
            (folder / "requirements.lock").write_text("")
    except builder.BuildError as exc:
        raise EnvError(_unresolved(definition, python, meta.get("torch"), exc)) from None
    meta.update(
        {
            "format": builder.FORMAT,
            "python": python,
            "inherit": definition.inherit,
            "requirements": list(definition.pip),
            "created": time.time(),
            "platform": sys.platform,
            "resolver": "uv pip compile --generate-hashes",
        }
    )
    if "torch" in meta:
        meta["index"] = [meta["torch"]["index"]]  # where the builder finds the pinned builds
    if definition.inherit and base is not None:
        meta["base"] = {k: base[k] for k in ("executable", "version", "packages")}
    (folder / "lock.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return meta


def _compile(
    folder: Path,
    uv_bin: str,
    python: str,
    base: dict[str, Any] | None,
    torch: dict[str, str] | None = None,
) -> None:
    """One ``uv pip compile`` into ``folder/requirements.lock``: the base's versions as
    preferences; with ``torch``, its exact build as a constraint and its index beside the
    default one (the best match of both, as pip's ``--extra-index-url`` does, so a package
    the default index also has keeps the kernel's version)."""
    label = torchbuild.split(torch["torch"])[1] if torch else None
    preferred = []
    for name, version in (base or {}).get("packages", {}).items():
        exact = label is not None and torchbuild.split(version)[1] == label
        preferred.append(f"{name}=={version if exact else builder.public_version(version)}\n")
    (folder / "requirements.lock").write_text("".join(preferred))
    args = [
        "pip",
        "compile",
        "requirements.in",
        "-o",
        "requirements.lock",
        "--generate-hashes",
        "--no-header",
        "--quiet",
        "--python",
        sys.executable,
        "--python-version",
        python,
    ]
    if torch is not None:
        (folder / "constraints.txt").write_text(f"torch=={torch['torch']}\n")
        args += ["-c", "constraints.txt", "--index", torch["index"]]
        args += ["--index-strategy", "unsafe-best-match"]
    builder.run_uv(uv_bin, args, cwd=str(folder))


def _unresolved(
    definition: EnvDefinition, python: str, torch: dict[str, str] | None, exc: Exception
) -> str:
    if torch is not None:
        return (
            f"environment {definition.name!r}: uv could not resolve its requirements against "
            f"the kernel's torch {torch['torch']}, which a layered environment keeps, from "
            f"the PyTorch index of that build ({torch['index']}) and the default index; "
            "nothing was stored. Ask for versions made for this torch (torchvision, "
            "torchaudio: the release that goes with it), or, if that index cannot be reached "
            f"from here, set {torchbuild.INDEX_ENV} to a mirror of it (a folder laid out as a "
            "simple index works) and define it again; to use another torch instead, name "
            f"its version in the pip list.\n{exc}"
        )
    return (
        f"environment {definition.name!r}: uv could not resolve its requirements "
        f"for Python {python}; nothing was stored. Fix the pip list (a version "
        "that does not exist, a misspelt name) and define it again, or, if uv "
        f"could not reach the package index, check the network and UV_INDEX_URL."
        f"\n{exc}"
    )
