"""Durable, versioned environment definitions under ``$JUPYTER_TRAINER_HOME/environments``.

```
environments/definitions/<name>/<version>.json   one file per distinct content, never changed
environments/definitions/<name>/LATEST           the version ``--env NAME`` means now
```
A version is the content hash of a definition, so redefining a name with the same content
is a no-op and with new content adds a version; old versions stay, so a run that recorded
``NAME@VERSION`` can always be resolved again. Every write is an atomic replace, so two
kernels defining at once never leave a torn file.

A definition decides what runs as whoever uses it (its packages, its variables), so in a
workspace (``core.workspace``) a name belongs to whoever made its folder first: the folder
is ``rwxr-s---`` and its files ``rw-r-----``, so the team reads them and only the definer
adds versions or moves ``LATEST``. To run a definition by its name alone, its folder must
pass the trust check (``core.trust``: it is this user's or the administrator's, nobody else
may write it, no link). A colleague's is run only at a version this user names in full
(``NAME@VERSION``): its content is checked against that hash, so its definer cannot change
what it means. Reading one to show it needs neither.

A definition records its secret variables redacted (``definition``); their values are the
definer's, kept in a file only they can read (``rankside.rank.run_secrets``, as a run's are):

```
users/<name>/environments/secrets/<name>/<version>/secrets.json   0600, in a folder 0700
```
so the definer's runs get them and a colleague who uses the definition supplies their own.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.errors import EnvError, Untrusted
from ..core.files import private_folder, write_text_atomic
from ..core.modes import make_top
from ..core.trust import Trust, user_name
from ..core.workspace import Settings
from ..rankside.rank import run_secrets
from .definition import EnvDefinition, validate_name
from .places import own_environments, store_settings

_VERSION_CHARS = set("0123456789abcdef")
FULL_VERSION = 12  # hex digits of ``EnvDefinition.version``
SHARED_FILE = 0o640
SHARED_FOLDER = 0o2750


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
        self.home = Path(home)
        self.root = self.home / "environments" / "definitions"
        self._settings: Settings | None = None

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = store_settings(self.home)
        return self._settings

    def define(self, definition: EnvDefinition) -> tuple[EnvRecord, bool]:
        """Store ``definition`` and make it the name's latest; True when the version is new."""
        shared = self.settings.shared
        folder = self.root / definition.name
        if shared:
            self._own_folder(folder, definition.name)
        else:
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
            self._write(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
        self._keep_secrets(definition)
        self._write(folder / "LATEST", definition.version + "\n")
        return self._load_file(path), new

    def variables(self, record: EnvRecord) -> dict[str, str]:
        """The variables a run of ``record`` gets: its secret ones with the values this user
        kept when defining it. ``EnvError`` naming the secret variables this user has no
        value for (a colleague's definition: only its definer can read them)."""
        definition = record.definition
        values = {**self._kept_secrets(definition), **definition.secret_values()}
        missing = [k for k in definition.secrets if k not in values]
        if missing:
            who = self.owner(definition.name) or "its definer"
            names = ", ".join(missing)
            raise EnvError(
                f"environment {definition.name}@{definition.version} sets the secret "
                f"variables {names}, whose values only {who} can read, and nothing was "
                f"started; define an environment of your own with your values for {names} "
                f"(`jupyter-trainer env show {definition.name}@{definition.version}` shows "
                "the rest of it)"
            )
        return {**definition.env, **values}

    def _secrets_folder(self, definition: EnvDefinition) -> Path:
        return own_environments(self.home) / "secrets" / definition.name / definition.version

    def _keep_secrets(self, definition: EnvDefinition) -> None:
        """Keep ``definition``'s secret values for this user alone, replacing older ones."""
        values = definition.secret_values()
        if not values:
            return
        folder = self._secrets_folder(definition)
        for each in (folder.parent.parent, folder.parent, folder):
            private_folder(each)
        try:
            os.unlink(folder / run_secrets.FILE)
        except FileNotFoundError:
            pass
        run_secrets.write(folder, {"variables": values})

    def _kept_secrets(self, definition: EnvDefinition) -> dict[str, str]:
        if not definition.secrets:
            return {}
        kept = run_secrets.read(self._secrets_folder(definition))["variables"]
        return {k: v for k, v in kept.items() if k in definition.secrets and isinstance(v, str)}

    def get(self, name: str, version: str | None = None, *, to_run: bool = True) -> EnvRecord:
        """The latest (or the given) version of ``name``; an unknown one names what exists.

        ``to_run``: the definition will decide what runs as this user, so in a workspace it
        must pass the trust check, or be a colleague's at a version named in full; without
        it (to show one) anything readable is read."""
        validate_name(name)
        folder = self.root / name
        trust = self._trust_for(folder, name, version) if to_run else None
        if version is None:
            try:
                version = self._read(
                    trust, folder / "LATEST", f"the LATEST of environment {name!r}"
                )
                version = version.strip()
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
        path = matches[0]
        try:
            text = self._read(trust, path, f"the definition of environment {name!r}")
        except OSError as exc:
            raise EnvError(
                f"environment definition {path} is unreadable ({exc}); define the environment again"
            ) from None
        record = self._load(path, text)
        if record.name != name:
            raise EnvError(
                f"environment definition {path} is of {record.name!r}, not {name!r}; it was "
                "moved by hand: define the environment again"
            )
        if path.stem != record.version or not record.version.startswith(version):
            raise EnvError(
                f"environment definition {path} holds version {record.version}, not the "
                f"{version} its name says; it was renamed by hand: define the environment again"
            )
        return record

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "LATEST").is_file())

    def owner(self, name: str) -> str | None:
        """Who defined ``name`` (the owner of its folder), None if nobody has."""
        try:
            return user_name(os.lstat(self.root / validate_name(name)).st_uid)
        except FileNotFoundError:
            return None

    def versions(self, name: str) -> list[EnvRecord]:
        """Every stored version of ``name``, oldest first."""
        folder = self.root / validate_name(name)
        found = sorted(folder.glob("*.json")) if folder.is_dir() else []
        return sorted((self._load_file(p) for p in found), key=lambda r: r.created)

    # -- in a workspace --------------------------------------------------------------------
    def _own_folder(self, folder: Path, name: str) -> None:
        """``folder``, made this user's if nobody has it yet; ``Untrusted`` when someone else
        defined ``name`` first (only they add its versions) or the folder is unsafe."""
        make_top(self.home / "environments", True)
        make_top(self.root, True)
        trust = self.settings.trust()
        trust.check_folders_above(folder, f"environment {name!r}")
        try:
            os.mkdir(folder, SHARED_FOLDER)
            os.chmod(folder, SHARED_FOLDER)  # whatever the umask
        except FileExistsError:
            pass
        found = os.lstat(folder)
        if found.st_uid != os.geteuid():
            who = user_name(found.st_uid)
            raise Untrusted(
                f"environment {name!r} belongs to {who}: its folder {folder} is theirs, so only "
                f"they define its versions. Choose another name for yours (or use theirs at a "
                f"version you have looked at: --env {name}@VERSION)",
                path=str(folder),
            )
        problem = trust.refusal(found, folder, f"the folder of environment {name!r}", folder=True)
        if problem:
            raise Untrusted(problem, path=str(folder))
        if stat.S_IMODE(found.st_mode) != SHARED_FOLDER:
            os.chmod(folder, SHARED_FOLDER)
        for entry in os.scandir(folder):  # versions written owner-only by an older release
            if entry.is_file(follow_symlinks=False):
                mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                if (
                    mode != SHARED_FILE
                    and entry.stat(follow_symlinks=False).st_uid == found.st_uid
                    and not self._holds_secret_values(Path(entry.path))
                ):
                    os.chmod(entry.path, SHARED_FILE)

    @classmethod
    def _holds_secret_values(cls, path: Path) -> bool:
        """Whether ``path`` is a version an older release wrote with its secret variables'
        values in it: it stays its definer's alone."""
        if path.suffix != ".json":
            return False
        try:
            return bool(cls._load_file(path).definition.secret_values())
        except EnvError:
            return True

    def _trust_for(self, folder: Path, name: str, version: str | None) -> Trust | None:
        """The trust to read ``name``'s files with before running it (None: a personal store,
        whose files are the user's); ``Untrusted`` when it may not be run as asked."""
        if not self.settings.shared:
            return None
        trust = self.settings.trust()
        what = f"the folder of environment {name!r}"
        trust.check_folders_above(folder, what)
        try:
            found = os.lstat(folder)
        except FileNotFoundError:
            return trust
        if trust.trusts(found.st_uid):
            problem = trust.refusal(found, folder, what, folder=True)
            if problem:
                raise Untrusted(problem, path=str(folder))
            return trust
        # a colleague's: the same checks of links and write bits, whoever owns it, and only
        # at a version named in full, which the content is checked against
        if version is not None and len(version) == FULL_VERSION:
            theirs = dataclasses.replace(trust, me=found.st_uid)
            problem = theirs.refusal(found, folder, what, folder=True)
            if problem:
                raise Untrusted(problem, path=str(folder))
            return theirs
        who = user_name(found.st_uid)
        try:
            latest = (folder / "LATEST").read_text().strip()
        except OSError:
            latest = "VERSION"
        raise Untrusted(
            f"environment {name!r} belongs to {who} ({folder}), not to you "
            f"({user_name(trust.me)}) nor to {trust.admins()}: whoever defines it decides what "
            f"runs as you, and {who} can change what the name means. Use it at a version you "
            f"have looked at (`jupyter-trainer env show {name}` lists them), named in full: "
            f"--env {name}@{latest}; or define one of your own under another name",
            path=str(folder),
        )

    def _read(self, trust: Trust | None, path: Path, what: str) -> str:
        if trust is None:
            return path.read_text()
        text = trust.read_text(path, what)
        if text is None:
            raise FileNotFoundError(path)
        return text

    def _write(self, path: Path, text: str) -> None:
        if not self.settings.shared:
            write_text_atomic(path, text)
            return
        write_text_atomic(path, text, mode=SHARED_FILE)
        os.chmod(path, SHARED_FILE)  # the team reads it, whatever the umask

    @classmethod
    def _load_file(cls, path: Path) -> EnvRecord:
        try:
            text = path.read_text()
        except OSError as exc:
            raise EnvError(
                f"environment definition {path} is unreadable ({exc}); define the environment again"
            ) from None
        return cls._load(path, text)

    @staticmethod
    def _load(path: Path, text: str) -> EnvRecord:
        try:
            data: dict[str, Any] = json.loads(text)
            content = data["definition"]
            definition = EnvDefinition(
                name=data["name"],
                python=content["python"],
                pip=tuple(content["pip"]),
                env=content["env"],
                inherit=content["inherit"],
                image=content["image"],
                requirements_file=data.get("requirements_file"),
                secrets=tuple(content.get("secrets", ())),
            )
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EnvError(
                f"environment definition {path} is unreadable ({exc}); define the environment again"
            ) from None
        if definition.secret_values() and definition.legacy_version() == data.get("version"):
            # an older release's, with its secret values in it (so it is owner-only)
            definition = dataclasses.replace(definition, stored_version=data["version"])
        if definition.version != data.get("version"):
            raise EnvError(
                f"environment definition {path} does not match its version hash; "
                "it was edited by hand: define the environment again"
            )
        return EnvRecord(definition, float(data.get("created", 0.0)))
