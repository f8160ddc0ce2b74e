"""Finding targets: kinds come from entry points, named targets from ``targets.toml``
files (which ones, and whether each may be used: ``files``); ``add_target`` validates a new
one and saves it in this user's own file, or the administrator's in the team's."""

from __future__ import annotations

import datetime
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from ..core.errors import SpecError, TargetError, Untrusted
from ..core.files import write_text_atomic
from ..core.spec import TargetSpec
from ..core.trust import user_name
from ..core.workspace import Settings
from . import files
from .base import Target
from .pricing import split_price

ENTRY_POINT_GROUP = "jupyter_trainer.targets"
_BUILTIN = {
    "kubernetes": "jupyter_trainer.targets.kubernetes:KubernetesTarget",
    "local": "jupyter_trainer.targets.local:LocalTarget",
    "ray": "jupyter_trainer.targets.ray:RayTarget",
    "slurm": "jupyter_trainer.targets.slurm:SlurmTarget",
    "ssh": "jupyter_trainer.targets.ssh:SshTarget",
}


@lru_cache(maxsize=1)
def target_kinds() -> dict[str, str]:
    """Registered target kinds -> ``module:Class``."""
    from importlib.metadata import entry_points  # here: 15-30 ms a run's supervisor skips

    kinds = dict(_BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        kinds[ep.name] = ep.value
    return kinds


def _load_kind(kind: str) -> type[Target]:
    kinds = _BUILTIN if kind in _BUILTIN else target_kinds()
    if kind not in kinds:
        raise TargetError(
            f"unknown target kind {kind!r}; registered kinds: {', '.join(sorted(kinds))}"
        )
    module, _, attr = kinds[kind].partition(":")
    import importlib

    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Target)):
        raise TargetError(f"entry point {kind!r} ({kinds[kind]}) is not a Target subclass")
    return cls


def targets_file(home: Path | None = None) -> Path:
    """This user's own ``targets.toml``: the store's in a personal store, the member's own
    (``users/<name>/``) in a workspace."""
    return files.own_file(files.store_settings(home))


def configured_targets(home: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every target name this user may use -> its configuration (``local`` is always
    there); in a workspace, a file that may not be used is left out with a warning
    (``files``)."""
    return files.load(home).targets


def get_target(name: str, home: Path | None = None) -> Target:
    found = files.load(home)
    targets = found.targets
    if name not in targets:
        if found.left_out:
            raise Untrusted(
                f"target {name!r} is not defined in any targets file you may use: "
                + "; ".join(str(reason) for reason in found.left_out),
                path=found.left_out[0].path,
            )
        raise TargetError(
            f"unknown target {name!r}; available: {', '.join(sorted(targets))} "
            f"(add one with `jupyter-trainer target add {name} --kind KIND`, or define it "
            f"in {targets_file(home)})"
        )
    config = dict(targets[name])
    cls = _load_kind(config.pop("kind"))
    storage = config.pop("storage", None)
    if storage is not None and (not isinstance(storage, str) or "://" not in storage):
        raise TargetError(
            f"target {name!r}: storage must be a URL such as s3://bucket/runs, got {storage!r}"
        )
    price, rest = split_price(name, config)
    target = cls(name, rest)
    target.price = price
    target.storage = storage
    return target


# -- adding targets ----------------------------------------------------------------------
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_HEADER = re.compile(r"\s*\[\[?(?P<key>[^\]]+)\]\]?\s*(#.*)?")


def add_target(
    name: str,
    kind: str,
    *,
    home: Path | None = None,
    replace: bool = False,
    team: bool = False,
    **config: Any,
) -> Path:
    """Validate a target and save it in this user's ``targets.toml`` (``targets_file``), or
    with ``team`` in a workspace's team file, which only its administrator writes; returns
    the file's path.

    The target class validates ``config`` (by being built from it, exactly as a run would
    build it), so a typo fails here and not at the first run. The file is rewritten
    atomically (a temporary file, then one rename); other targets, and comments outside the
    replaced entry, are kept. An existing ``name`` (in the file, or for a member's own, in
    the team's, which it would take the place of) is replaced only with ``replace=True``.
    """
    try:
        TargetSpec(name)
    except SpecError as exc:
        raise TargetError(str(exc)) from None
    if name == "local":
        raise TargetError("the local target is built in and cannot be redefined")
    entry = {"kind": kind, **{k: v for k, v in config.items() if v is not None}}
    _load_kind(kind)(name, split_price(name, {k: v for k, v in entry.items() if k != "kind"})[1])
    found = files.store_settings(home)
    each = _file_to_write(found, team)
    path = each.path
    old = files.read_text(each, found) or ""
    existing = files.parse(old, path)
    if name in existing and not replace:
        raise TargetError(
            f"target {name!r} already exists in {path}; replace it explicitly "
            "(--replace in `target add`, replace=True in Python) or choose another name"
        )
    if found.shared and not team and not replace:
        shared = files.load(home).origin.get(name)
        if shared is not None and shared != path:
            raise TargetError(
                f"target {name!r} is the team's (in {shared}); one of your own by that name "
                "would take its place for you: pass --replace (replace=True in Python) to "
                "add it anyway, or choose another name"
            )
    section = f"[targets.{_toml_key(name)}]\n" + "".join(
        f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in entry.items()
    )
    kept = _without_target(old, name).rstrip()
    text = (kept + "\n\n" if kept else "") + section
    try:
        parsed = tomllib.loads(text)["targets"]
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise TargetError(f"could not write target {name!r} into {path}: {exc}") from exc
    others = {k: v for k, v in existing.items() if k != name}
    if parsed.get(name) != _toml_roundtrip(entry) or any(
        parsed.get(k) != v for k, v in others.items()
    ):
        raise TargetError(
            f"could not update {path} without changing other targets; edit it by hand"
        )
    write_text_atomic(path, text, mode=0o640 if each.team else 0o600)
    if each.team:  # every member reads it, whatever the administrator's umask
        os.chmod(path, 0o640)
    return path


def _file_to_write(found: Settings, team: bool) -> files.TargetsFile:
    if not team:
        return files.TargetsFile(files.own_file(found), team=False)
    if not found.shared:
        raise TargetError(
            "--team is for a workspace (a store whose index is on PostgreSQL); in a "
            "personal store leave it out"
        )
    me = os.geteuid()
    if not found.trust().administers(me):
        raise TargetError(
            f"only the workspace's administrator ({found.trust().admins()}) writes the team's "
            f"targets file {files.team_file(found)}; you ({user_name(me)}) can add the target "
            "as your own: leave out --team"
        )
    return files.TargetsFile(files.team_file(found), team=True)


def _without_target(text: str, name: str) -> str:
    """``text`` without the tables of target ``name`` (``[targets.name]`` and its subtables)."""
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        header = _HEADER.fullmatch(line.rstrip("\n"))
        if header:
            parts = [p.strip().strip('"').strip("'") for p in header.group("key").split(".")]
            skipping = parts[:2] == ["targets", name]
        if not skipping:
            out.append(line)
    return "".join(out)


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_string(value: str) -> str:
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise TargetError(f"{value!r} cannot be stored in targets.toml")
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{ "
            + ", ".join(
                f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items() if v is not None
            )
            + " }"
        )
    raise TargetError(f"a {type(value).__name__} cannot be stored in targets.toml ({value!r})")


def _toml_roundtrip(value: Any) -> Any:
    """``value`` as TOML gives it back (tuples become lists, None entries disappear)."""
    if isinstance(value, (list, tuple)):
        return [_toml_roundtrip(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _toml_roundtrip(v) for k, v in value.items() if v is not None}
    return value


def parse_settings(items: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``KEY=VALUE`` words (``%train target add``, the CLI) -> a target's config. VALUE is a
    TOML value when it reads as one (``8``, ``["gpu1", "gpu2"]``, ``{ A = "b" }``, ``true``),
    a list or table of bare words as a shell leaves them once it has taken the quotes
    away (``[gpu1,gpu2]``, ``{NCCL_SOCKET_IFNAME=eth0}``), otherwise the text itself
    (``workdir=/scratch/jt``, ``time=02:00:00``)."""
    config: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not _BARE_KEY.fullmatch(key):
            raise TargetError(
                f"invalid setting {item!r}: write KEY=VALUE, e.g. "
                "hosts=[gpu1,gpu2] or workdir=/scratch/jt"
            )
        config[key] = _setting_value(raw, item)
    return config


def _setting_value(raw: str, item: str) -> Any:
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return _bare_collection(raw.strip(), item)
    return raw if isinstance(value, (datetime.date, datetime.time)) else value  # time=02:00:00


def _bare_collection(text: str, item: str) -> Any:
    if text[:1] == "[" and text[-1:] == "]":
        return [
            _setting_value(word.strip(), item) for word in text[1:-1].split(",") if word.strip()
        ]
    if text[:1] == "{" and text[-1:] == "}":
        table: dict[str, Any] = {}
        for pair in filter(str.strip, text[1:-1].split(",")):
            key, sep, value = pair.partition("=")
            if not sep or not _BARE_KEY.fullmatch(key.strip()):
                raise TargetError(
                    f"invalid setting {item!r}: a table is {{KEY=VALUE,...}}, "
                    "e.g. env={NCCL_SOCKET_IFNAME=eth0}"
                )
            table[key.strip()] = _setting_value(value.strip(), item)
        return table
    return text
