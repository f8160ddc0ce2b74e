"""Define, list, show, export, build and prune environments: what ``%environment`` and
``jupyter-trainer env`` call. Returns data and text; front ends only print it."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import EnvError
from ..core.spec import EnvSpec
from ..core.units import format_bytes
from ..rankside.host.home import default_home
from ..rankside.programs import env_build as builder
from . import lock
from .definition import EnvDefinition, parse_assignment
from .registry import EnvRecord, Registry
from .stages import build_locked, venvs_dir


def _home(home: Path | None) -> Path:
    return Path(home) if home else default_home()


def define(
    definition: EnvDefinition, *, home: Path | None = None, build: bool = False
) -> dict[str, Any]:
    """Lock ``definition`` (so a bad requirement fails now) and store it as the latest.

    Nothing is stored when locking fails. With ``build`` the environment is built too,
    so the first run reuses it.
    """
    home = _home(home)
    found = lock.ensure(definition, home)
    record, new = Registry(home).define(definition)
    info: dict[str, Any] = {
        "name": record.name,
        "version": record.version,
        "new": new,
        "lock": found.key,
        "pins": len(builder.parse_lock(found.text)),
    }
    if build:
        info["build"] = build_locked(_spec(record, found.key), home)
    return info


def _spec(record: EnvRecord, lock_key: str) -> EnvSpec:
    return EnvSpec(
        name=record.name,
        version=record.version,
        lock=lock_key,
        variables=record.definition.env,
        image=record.definition.image,
    )


def built_record(home: Path, found: lock.Lock) -> dict[str, Any] | None:
    """The built environment of ``found`` on this machine, if there is one (no uv call)."""
    try:
        return builder.existing(str(found.path), str(venvs_dir(home)), builder.describe_self())
    except builder.BuildError:
        return None


def _lock_for(record: EnvRecord, home: Path, *, create: bool) -> lock.Lock | None:
    definition = record.definition
    if create:
        return lock.ensure(definition, home)
    base = builder.describe_self() if definition.inherit else None
    try:
        return lock.find(home, lock.lock_key(definition, base))
    except ValueError:
        return None


def list_environments(*, home: Path | None = None) -> list[dict[str, Any]]:
    """One row per name: latest version, how many versions, and its state on this kernel."""
    home = _home(home)
    registry = Registry(home)
    rows = []
    for name in registry.names():
        record = registry.get(name, to_run=False)
        d = record.definition
        found = _lock_for(record, home, create=False)
        state = "defined" if found is None else "built" if built_record(home, found) else "locked"
        rows.append(
            {
                "name": name,
                "version": record.version,
                "versions": len(registry.versions(name)),
                "python": d.python or "kernel's",
                "inherit": d.inherit,
                "pip": len(d.pip),
                "state": state,
                "created": record.created,
                "owner": registry.owner(name) if registry.settings.shared else None,
            }
        )
    return rows


def environments_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no environments yet; define one with a `%%environment NAME` cell"
    header: tuple[str, ...] = (
        "NAME", "VERSION", "VERSIONS", "PYTHON", "INHERIT", "PIP", "STATE", "DEFINED",
    )  # fmt: skip
    owners = any(r.get("owner") for r in rows)  # a workspace: a name is its definer's
    if owners:
        header += ("OWNER",)
    body = [
        (
            r["name"],
            r["version"],
            str(r["versions"]),
            r["python"],
            "yes" if r["inherit"] else "no",
            str(r["pip"]),
            r["state"],
            time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"])),
            *((r.get("owner") or "",) if owners else ()),
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in [header, *body]
    )


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def show_text(name: str, *, home: Path | None = None) -> str:
    """A definition (as YAML), its versions, its lock and its build on this machine."""
    home = _home(home)
    env_name, _, version = name.partition("@")
    registry = Registry(home)
    record = registry.get(env_name, version or None, to_run=False)
    d = record.definition
    versions = registry.versions(env_name)
    owner = registry.owner(env_name) if registry.settings.shared else None
    lines = [
        f"environment {d.name} version {d.version} (defined "
        + (f"by {owner} " if owner else "")
        + f"{_when(record.created)}; "
        f"{len(versions)} version{'s' if len(versions) != 1 else ''}: "
        + ", ".join(r.version for r in versions)
        + ")"
    ]
    if d.requirements_file:
        lines.append(f"pip requirements read from {d.requirements_file}")
    lines += ["", d.to_yaml().rstrip()]
    found = _lock_for(record, home, create=False)
    if found is None:
        lines += ["", "not locked for this kernel yet (a run or `%environment export` locks it)"]
        return "\n".join(lines)
    meta = found.meta
    kind = f"layered on {meta['base']['executable']}" if meta.get("inherit") else "standalone"
    lines += [
        "",
        f"lock {found.key}: Python {meta['python']}, {kind}, created {_when(meta['created'])}",
    ]
    lines += [
        f"  {e['name']}=={e['version']}" if e["version"] else f"  {e['line']}"
        for e in builder.parse_lock(found.text)
    ] or ["  (no packages)"]
    built = built_record(home, found)
    if built:
        lines += [
            "",
            f"built {built['env_id']} in {built['build_seconds']:.1f} s at "
            f"{_when(built['built_at'])}: "
            f"{built['python']}",
        ]
        if built.get("skipped"):
            lines.append("  from the base interpreter: " + ", ".join(built["skipped"]))
    else:
        lines += ["", "not built on this machine yet (the first run builds it)"]
    return "\n".join(lines)


def export_text(name: str, *, requirements: bool = False, home: Path | None = None) -> str:
    """The lock (exact pins with hashes, for ``uv pip install --require-hashes -r``), or
    with ``requirements`` the requirement lines as defined."""
    home = _home(home)
    env_name, _, version = name.partition("@")
    record = Registry(home).get(env_name, version or None)
    d = record.definition
    if requirements:
        return "".join(f"{r}\n" for r in d.pip)
    found = lock.ensure(d, home)
    head = (
        f"# environment {d.name} version {d.version}, lock {found.key}: Python "
        f"{found.meta['python']}, platform {found.meta.get('platform', sys.platform)}\n"
    )
    if d.inherit:
        head += (
            "# inherit: true -- layered on the kernel's packages; pins the base already "
            "has are not reinstalled\n"
        )
    return head + found.text


def build_environment(name: str, *, home: Path | None = None) -> dict[str, Any]:
    """Lock and build ``NAME[@VERSION]`` on this machine now (a run would do it otherwise)."""
    home = _home(home)
    env_name, _, version = name.partition("@")
    record = Registry(home).get(env_name, version or None)
    found = lock.ensure(record.definition, home)
    return build_locked(_spec(record, found.key), home)


def prune(
    *, keep: Mapping[str, str] = {}, dry_run: bool = False, home: Path | None = None
) -> list[dict[str, Any]]:
    """Remove the built environments on this machine that nothing needs any more: those that
    are not the build of a name's latest version and not in ``keep`` ({env_id: why}, e.g.
    the environments of unfinished runs). Definitions and locks stay, so a removed one is
    built again when it is next used. One row per built environment, with ``removed``
    (or, with ``dry_run``, what would be removed), ``bytes``, ``why`` it is kept and which
    ``NAME@VERSION`` it is ``of``, when that is known here."""
    home = _home(home)
    kept = dict(keep)
    labels: dict[str, str] = {}  # env_id -> NAME@VERSION, for the versions built for this kernel
    registry = Registry(home)
    for name in registry.names():
        latest = registry.get(name, to_run=False).version
        for record in registry.versions(name):
            found = _lock_for(record, home, create=False)
            built = built_record(home, found) if found else None
            if built:
                labels.setdefault(built["env_id"], f"{name}@{record.version}")
                if record.version == latest:
                    kept.setdefault(built["env_id"], f"the latest version of {name}")
    folder = venvs_dir(home)
    entries = (
        sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.is_dir() else []
    )
    rows = []
    for path in entries:
        why = kept.get(path.name)
        row = {
            "env_id": path.name,
            "of": labels.get(path.name),
            "path": str(path),
            "bytes": _disk_bytes(path),
            "why": why,
            "removed": False,
        }
        if why is None:
            row["removed"] = dry_run or builder.remove(str(folder), path.name)
            if not row["removed"]:
                row["why"] = "being built"
        rows.append(row)
    return rows


def _disk_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


def prune_text(rows: list[dict[str, Any]], *, dry_run: bool = False) -> str:
    """What ``prune`` did (or would do), for the CLI and ``%environment prune``."""
    gone = [r for r in rows if r["removed"]]
    verb = "would remove" if dry_run else "removed"

    def label(row: dict[str, Any]) -> str:
        of = f"{row['of']}, " if row["of"] else ""
        return f"{row['env_id']} ({of}{format_bytes(row['bytes'])})"

    lines = [f"{verb} {label(r)}" for r in gone]
    lines += [f"kept {label(r)}: {r['why']}" for r in rows if not r["removed"]]
    total = format_bytes(sum(r["bytes"] for r in gone))
    lines.append(
        f"{verb} {len(gone)} built environment{'s' if len(gone) != 1 else ''}, "
        f"{total}; definitions and locks are kept, so any of them is built again "
        "when a run needs it"
        if gone
        else "nothing to remove"
    )
    return "\n".join(lines)


def from_line(
    name: str,
    *,
    pip: list[str] | None = None,
    requirements: str | None = None,
    python: str | None = None,
    variables: list[str] | None = None,
    inherit: bool = False,
    image: str | None = None,
    base_dir: Path | None = None,
) -> EnvDefinition:
    """The definition of the line form ``%environment NAME --pip A B --python 3.11 ...``."""
    if pip and requirements:
        raise EnvError(f"environment {name!r}: give --pip or --requirements, not both")
    data: dict[str, Any] = {"inherit": inherit}
    if pip:
        data["pip"] = list(pip)
    if requirements:
        data["pip"] = {"requirements": requirements}
    if python is not None:
        data["python"] = python
    if variables:
        data["env"] = dict(parse_assignment(name, v) for v in variables)
    if image is not None:
        data["image"] = image
    return EnvDefinition.from_mapping(name, data, base_dir)
