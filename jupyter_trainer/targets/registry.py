"""Finding targets: kinds come from entry points, named targets from ``targets.toml``."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from ..errors import TargetError
from ..home import default_home
from .base import Target

ENTRY_POINT_GROUP = "jupyter_trainer.targets"
_BUILTIN = {
    "local": "jupyter_trainer.targets.local:LocalTarget",
    "slurm": "jupyter_trainer.targets.slurm:SlurmTarget",
}


@lru_cache(maxsize=1)
def target_kinds() -> dict[str, str]:
    """Registered target kinds -> ``module:Class``."""
    kinds = dict(_BUILTIN)
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        kinds[ep.name] = ep.value
    return kinds


def _load_kind(kind: str) -> type[Target]:
    kinds = _BUILTIN if kind in _BUILTIN else target_kinds()
    if kind not in kinds:
        raise TargetError(f"unknown target kind {kind!r}; registered kinds: {', '.join(sorted(kinds))}")
    module, _, attr = kinds[kind].partition(":")
    import importlib

    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Target)):
        raise TargetError(f"entry point {kind!r} ({kinds[kind]}) is not a Target subclass")
    return cls


def targets_file(home: Path | None = None) -> Path:
    return (home or default_home()) / "targets.toml"


def configured_targets(home: Path | None = None) -> dict[str, dict[str, Any]]:
    """Every usable target name -> its configuration (``local`` is always there)."""
    targets: dict[str, dict[str, Any]] = {"local": {"kind": "local"}}
    path = targets_file(home)
    if path.exists():
        try:
            data = tomllib.loads(path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise TargetError(f"{path} is not valid TOML: {exc}") from exc
        for name, config in data.get("targets", {}).items():
            if not isinstance(config, dict) or "kind" not in config:
                raise TargetError(f"{path}: [targets.{name}] needs a kind, e.g. kind = \"ssh\"")
            targets[name] = dict(config)
    return targets


def get_target(name: str, home: Path | None = None) -> Target:
    targets = configured_targets(home)
    if name not in targets:
        raise TargetError(
            f"unknown target {name!r}; available: {', '.join(sorted(targets))} "
            f"(define targets in {targets_file(home)})"
        )
    config = dict(targets[name])
    cls = _load_kind(config.pop("kind"))
    return cls(name, config)
