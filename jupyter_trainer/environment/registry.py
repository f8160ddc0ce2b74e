"""Durable, versioned environment definitions under ``$JUPYTER_TRAINER_HOME/environments``.

```
environments/definitions/<name>/<version>.json   one file per distinct content, never changed
environments/definitions/<name>/LATEST           the version ``--env NAME`` means now
```
A version is the content hash of a definition, so redefining a name with the same content
is a no-op and with new content adds a version; old versions stay, so a run that recorded
``NAME@VERSION`` can always be resolved again. Every write is an atomic replace, so two
kernels defining at once never leave a torn file.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import EnvError
from ..core.files import write_text_atomic
from .definition import EnvDefinition, validate_name

_VERSION_CHARS = set("0123456789abcdef")


@dataclass(frozen=True)
class EnvRecord:
    """A stored definition: which version of which name, and when it was first defined."""

    definition: EnvDefinition
    created: float

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def version(self) -> str:
        return self.definition.version


class Registry:
    """The definitions in one store. Cheap to create; reads the disk on every call."""

    def __init__(self, home: Path) -> None:
        self.root = Path(home) / "environments" / "definitions"

    def define(self, definition: EnvDefinition) -> tuple[EnvRecord, bool]:
        """Store ``definition`` and make it the name's latest; True when the version is new."""
        folder = self.root / definition.name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{definition.version}.json"
        new = not path.exists()
        if new:
            data = {
                "name": definition.name,
                "version": definition.version,
                "created": time.time(),
                "definition": definition.content(),
                "requirements_file": definition.requirements_file,
            }
            write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        write_text_atomic(folder / "LATEST", definition.version + "\n")
        return self._load(path), new

    def get(self, name: str, version: str | None = None) -> EnvRecord:
        """The latest (or the given) version of ``name``; an unknown one names what exists."""
        validate_name(name)
        folder = self.root / name
        if version is None:
            try:
                version = (folder / "LATEST").read_text().strip()
            except FileNotFoundError:
                known = ", ".join(self.names()) or "none yet"
                raise EnvError(
                    f"unknown environment {name!r}: no environment of that name is defined "
                    f"(defined: {known}); define it with a `%%environment {name}` cell, or "
                    "leave --env out to run with the notebook kernel's own Python"
                ) from None
        if not version or not set(version) <= _VERSION_CHARS:
            raise EnvError(
                f"invalid environment version {version!r}: a version is the hex hash "
                f"that `%environment show {name}` lists"
            )
        matches = sorted(folder.glob(f"{version}*.json")) if folder.is_dir() else []
        if len(matches) != 1:
            listed = ", ".join(r.version for r in self.versions(name)) or "none"
            what = "is ambiguous" if matches else "does not exist"
            raise EnvError(f"environment {name}@{version} {what}; versions of {name!r}: {listed}")
        return self._load(matches[0])

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "LATEST").is_file())

    def versions(self, name: str) -> list[EnvRecord]:
        """Every stored version of ``name``, oldest first."""
        folder = self.root / validate_name(name)
        records = [self._load(p) for p in folder.glob("*.json")] if folder.is_dir() else []
        return sorted(records, key=lambda r: r.created)

    @staticmethod
    def _load(path: Path) -> EnvRecord:
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            content = data["definition"]
            definition = EnvDefinition(
                name=data["name"],
                python=content["python"],
                pip=tuple(content["pip"]),
                env=content["env"],
                inherit=content["inherit"],
                image=content["image"],
                requirements_file=data.get("requirements_file"),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EnvError(
                f"environment definition {path} is unreadable ({exc}); define the environment again"
            ) from None
        if definition.version != data.get("version"):
            raise EnvError(
                f"environment definition {path} does not match its version hash; "
                "it was edited by hand: define the environment again"
            )
        return EnvRecord(definition, float(data.get("created", 0.0)))
