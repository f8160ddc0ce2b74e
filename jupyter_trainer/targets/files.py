"""Which ``targets.toml`` files a user's targets come from, and whether each may be used.

A target decides what runs as whoever uses it, on which host and with which variables
(``env = {PYTHONPATH = ...}``, an ssh target's ``ssh_options``). So:

- In a personal store there is one file, the store's own ``targets.toml``.
- In a workspace (``core.workspace``) there are two. The team's, ``targets.toml`` at the
  workspace's root, is the administrator's; it is used only when the trust check
  (``core.trust``) passes. A member's own, ``users/<name>/targets.toml``, is theirs alone.
  A name in both means the member's own: they put it there.
- No file redefines the built-in ``local`` target.

In a workspace a file that may not be used is left out with a warning that names it, its
owner and the fix, so that nothing a member writes stops a colleague's runs from working;
asking for a target that only such a file could have defined gives its reason
(``Untrusted``). In a personal store, where every file is the user's, the same problems are
errors.
"""

from __future__ import annotations

import os
import stat
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from ..core.errors import TargetError, Untrusted
from ..core.trust import UntrustedFileWarning, user_name
from ..core.workspace import Settings, settings
from ..rankside.host.home import default_home

NAME = "targets.toml"
LOCAL = {"kind": "local"}


@dataclass(frozen=True)
class TargetsFile:
    path: Path
    team: bool  # the workspace's, written by its administrator; else this user's own

    @property
    def what(self) -> str:
        return "the team's targets file" if self.team else "your targets file"


@dataclass
class Found:
    """The targets a user may use, where each came from, and the files left out (why)."""

    targets: dict[str, dict[str, Any]] = field(default_factory=lambda: {"local": dict(LOCAL)})
    origin: dict[str, Path] = field(default_factory=dict)
    left_out: list[Untrusted] = field(default_factory=list)


def store_settings(home: Path | None) -> Settings:
    return settings(Path(home) if home else default_home())


def own_file(found: Settings) -> Path:
    """Where this user's own targets are kept (``target add`` writes there)."""
    if not found.shared:
        return found.home / NAME
    return found.user_dir() / NAME


def team_file(found: Settings) -> Path:
    return found.home / NAME


def targets_files(found: Settings) -> list[TargetsFile]:
    """The files to read, in order: a later file's target of a name wins."""
    if not found.shared:
        return [TargetsFile(found.home / NAME, team=False)]
    files = [TargetsFile(team_file(found), team=True)]
    try:
        files.append(TargetsFile(own_file(found), team=False))
    except Untrusted as exc:  # someone else made the member's folder: theirs is left out
        files.append(TargetsFile(Path(exc.path) / NAME, team=False))
    return files


def load(home: Path | None = None) -> Found:
    """Every target this user may use, ``local`` first and always."""
    found = store_settings(home)
    result = Found()
    for each in targets_files(found):
        try:
            entries = read(each, found)
        except (Untrusted, TargetError) as exc:
            if not found.shared:
                raise
            reason = exc if isinstance(exc, Untrusted) else Untrusted(str(exc), path=str(each.path))
            result.left_out.append(reason)
            warnings.warn(UntrustedFileWarning(_left_out(reason, each)), stacklevel=3)
            continue
        for name, config in entries.items():
            result.targets[name] = config
            result.origin[name] = each.path
    return result


def read(each: TargetsFile, found: Settings) -> dict[str, dict[str, Any]]:
    """The targets ``each`` defines (none when it does not exist); ``Untrusted`` when it may
    not decide what runs as this user, ``TargetError`` when it is not a valid file."""
    text = read_text(each, found)
    return {} if text is None else parse(text, each.path)


def read_text(each: TargetsFile, found: Settings) -> str | None:
    """The text of ``each`` (None when it does not exist), read as ``read`` reads it."""
    path = each.path
    if not found.shared:
        return path.read_text() if path.exists() else None
    try:
        return found.trust().read_text(path, each.what)
    except PermissionError:
        raise TargetError(_unreadable(each)) from None
    except OSError as exc:
        raise TargetError(f"{each.what} {path} cannot be read: {exc}") from None


def parse(text: str, path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TargetError(f"{path} is not valid TOML: {exc}") from exc
    tables = data.get("targets", {})
    if not isinstance(tables, dict):
        raise TargetError(f"{path}: targets must be tables, e.g. [targets.gpu]")
    if "local" in tables:
        raise TargetError(
            f"{path} defines [targets.local]; the local target is built in and cannot be "
            "redefined: remove that table (and give the target another name)"
        )
    targets: dict[str, dict[str, Any]] = {}
    for name, config in tables.items():
        if not isinstance(config, dict) or "kind" not in config:
            raise TargetError(f'{path}: [targets.{name}] needs a kind, e.g. kind = "ssh"')
        targets[name] = dict(config)
    return targets


def _left_out(reason: Untrusted, each: TargetsFile) -> str:
    text = f"{reason}; its targets are left out"
    if each.team:
        text += (
            " (the team's targets are the administrator's: `jupyter-trainer target add NAME "
            "--team`; a member's own are added without --team)"
        )
    return text


def _unreadable(each: TargetsFile) -> str:
    try:
        found = os.stat(each.path)
    except OSError:
        return f"{each.what} {each.path} cannot be read by you"
    owner = user_name(found.st_uid)
    return (
        f"{each.what} {each.path} cannot be read by you (mode "
        f"{stat.S_IMODE(found.st_mode):04o}, owner {owner}); fix: {owner} runs "
        f"chmod 640 {each.path}"
    )
