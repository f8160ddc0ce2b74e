"""Which Python runs a run's ranks: resolve a name, prepare it at submit, realise it at launch.

The three steps follow the run's path:

- ``resolve(name)`` (submit, before the snapshot): the definition's latest or pinned
  version and its lock, compiled once per definition and kernel. Unknown names fail here.
- ``prepare(env, code)`` (submit, after the snapshot, before the run exists): build the
  environment from its lock if it is not cached, then run the pre-flight import check with
  its interpreter. A missing import fails here: no run directory, no process.
- ``realize(env, target)`` (the supervisor, before the launcher starts): the interpreter
  on the target, rebuilt from the lock if it went missing since submit, and the record
  the run's state keeps (which version, built or reused, build time, pre-flight result).
  Targets whose nodes have their own filesystems build the same lock on every node
  themselves (the ssh target ships ``build.py`` with it), so for them this only records
  which environment the run asked for.

Without ``--env`` a run uses the kernel's own interpreter as it is, and is checked the same
way.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from ..core.errors import EnvError
from ..core.spec import EnvSpec
from ..rankside.host.home import default_home
from ..rankside.programs import env_build as builder
from . import lock, preflight
from .places import own_environments
from .registry import Registry


class Target(Protocol):
    """What a stage needs to know of the target a run goes to (``targets.Target`` has it)."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def shares_filesystem(self) -> bool: ...


class EnvDriftWarning(UserWarning):
    """The run's environment differs from the notebook's (Python or torch version)."""


@dataclass(frozen=True)
class Realization:
    """The interpreter a run's ranks use, their extra variables, and what to record."""

    python: str | None  # None: the target realises it on its own nodes
    variables: dict[str, str] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def venvs_dir(home: Path) -> Path:
    """This user's built environments (``places``): in a workspace, theirs alone."""
    return own_environments(home) / "venvs"


def current() -> EnvSpec:
    """The kernel's own environment: its interpreter, packages and all."""
    return EnvSpec(name=None, python=sys.executable)


def resolve(name: str | None, *, home: Path | None = None) -> EnvSpec:
    """The environment a new run asks for (``NAME`` or ``NAME@VERSION``), locked."""
    if name is None:
        return current()
    home = Path(home) if home else default_home()
    env_name, _, version = name.partition("@")
    registry = Registry(home)
    record = registry.get(env_name, version or None)
    definition = record.definition
    variables = registry.variables(record)  # with this user's secret values, or refused
    found = lock.ensure(definition, home)
    return EnvSpec(
        name=definition.name,
        version=definition.version,
        lock=found.key,
        variables=variables,
        image=definition.image,
    )


def check_target(env: EnvSpec, target: Target) -> None:
    """Refuse an image on a target that cannot run one, naming both and the fix."""
    if env.image and not getattr(target, "runs_images", False):
        raise EnvError(
            f"environment {env.name!r} asks for the container image {env.image!r}, but target "
            f"{target.name!r} ({target.kind}) starts processes directly on its hosts and cannot "
            "run an image; remove `image:` from the environment, or use a target that runs "
            "containers"
        )


def lock_of(env: EnvSpec, home: Path) -> lock.Lock:
    """The lock ``env`` recorded, from this user's locks. One missing there (a colleague's
    run started again, whose lock is the colleague's own) is made again from the definition
    at the version the run recorded, which its content is checked against."""
    found = lock.find(home, env.lock) if env.lock else None
    if found is None and env.name and env.version and env.lock:
        record = Registry(home).get(env.name, env.version)
        found = lock.ensure(record.definition, home)
        if found.key != env.lock:
            found = None
    if found is None:
        raise EnvError(
            f"the lock {env.lock!r} of environment {env.name!r} is missing from "
            f"{lock.locks_dir(home)}; define the environment again"
        )
    return found


def build_locked(env: EnvSpec, home: Path, base_python: str | None = None) -> dict[str, Any]:
    """Build (or find) the environment of ``env.lock`` on this machine."""
    found = lock_of(env, home)
    try:
        return builder.build(
            str(found.path), str(venvs_dir(home)), base_python=base_python or sys.executable
        )
    except builder.BuildError as exc:
        raise EnvError(
            f"environment {env.name!r} (version {env.version}) could not be built: {exc}"
        ) from None


def prepare(
    env: EnvSpec,
    code_dir: Path,
    entry: str,
    *,
    target: Target,
    launcher: str,
    home: Path | None = None,
) -> EnvSpec:
    """Build if needed and pre-flight check ``env`` for the snapshot in ``code_dir``.

    Raises ``EnvError`` when the check fails. Targets whose nodes do not share this
    machine's filesystem realise the environment on their own nodes, so for them this only
    checks the image.
    """
    check_target(env, target)
    if not target.shares_filesystem:
        return env
    home = Path(home) if home else default_home()
    info: dict[str, Any]
    if env.name is None:
        python, info = env.python or sys.executable, {"built": False}
    else:
        info = build_locked(env, home)
        python = info["python"]
    record = preflight.check(
        python, Path(code_dir), entry, launcher=launcher, variables=env.variables
    )
    if not record["ok"]:
        raise EnvError(
            preflight.failure_message(
                record, env_name=env.name, version=env.version, inherit=bool(info.get("inherit"))
            )
        )
    label = f"environment {env.name!r}" if env.name else "the kernel's Python"
    for difference in record["differences"]:
        warnings.warn(EnvDriftWarning(f"{label}: {difference}"), stacklevel=3)
    prepared = {
        "built": bool(info["built"]),
        "env_id": info.get("env_id"),
        "build_seconds": info.get("build_seconds") if info["built"] else None,
        "built_at": info.get("built_at"),
        "base_python": sys.executable,
        "preflight": record,
    }
    return replace(env, python=python, prepared=prepared)


def realize(
    env: EnvSpec,
    target: Target,
    *,
    home: Path | None = None,
    code_dir: Path | None = None,
    entry: str | None = None,
    launcher: str | None = None,
) -> Realization:
    """The interpreter the target's ranks run, ready to use, and the record of how."""
    check_target(env, target)
    home = Path(home) if home else default_home()
    prepared = dict(env.prepared)
    info: dict[str, Any] = {"built": False}
    if env.name is None:
        python = env.python or sys.executable
        if target.shares_filesystem and not os.access(python, os.X_OK):
            raise EnvError(
                f"the run's interpreter {python} is missing or not executable on this machine"
            )
    else:
        if not target.shares_filesystem:
            # Built on each node by the target itself (from the same lock), which records
            # the interpreter and the build there.
            return Realization(
                python=None,
                variables=dict(env.variables),
                record={
                    "name": env.name,
                    "version": env.version,
                    "lock": env.lock,
                    "python": None,
                    "inherit": None,
                    "built": None,
                    "realised_on": "nodes",
                    "variables": sorted(env.variables),
                    "image": env.image,
                    "preflight": None,
                },
            )
        info = build_locked(env, home, prepared.get("base_python"))
        python = info["python"]
    check = prepared.get("preflight")
    if (
        target.shares_filesystem
        and (check is None or python != env.python)
        and code_dir is not None
        and entry
    ):
        check = preflight.check(
            python, Path(code_dir), entry, launcher=launcher or "python", variables=env.variables
        )
        if not check["ok"]:
            raise EnvError(
                preflight.failure_message(
                    check, env_name=env.name, version=env.version, inherit=bool(info.get("inherit"))
                )
            )
    built_now = bool(info["built"])
    built = built_now or bool(prepared.get("built"))
    record = {
        "name": env.name,
        "version": env.version,
        "lock": env.lock,
        "env_id": info.get("env_id", prepared.get("env_id")),
        "python": python,
        "python_version": (check or {}).get("python"),
        "torch": (check or {}).get("torch"),
        "inherit": info.get("inherit", env.name is None),
        "built": built,
        "build_seconds": info.get("build_seconds") if built_now else prepared.get("build_seconds"),
        "built_at": info.get("built_at", prepared.get("built_at")),
        "variables": sorted(env.variables),
        "image": env.image,
        "preflight": check,
    }
    return Realization(python=python, variables=dict(env.variables), record=record)


def preview(
    env: EnvSpec,
    code_dir: Path,
    entry: str,
    *,
    target: Target,
    launcher: str,
    home: Path | None = None,
) -> tuple[EnvSpec, list[str]]:
    """``prepare`` for a dry run: nothing is built. The interpreter the ranks would run and
    what could not be known without a build, in words (``notes``). An environment built
    already, or the kernel's own Python, is pre-flight checked as ``prepare`` checks it; a
    failing check raises the same ``EnvError``."""
    check_target(env, target)
    if not target.shares_filesystem:
        notes = (
            [
                f"environment {env.name!r} is built (or found cached) on the target's nodes "
                "when the run starts; its python there replaces the one shown"
            ]
            if env.name
            else []
        )
        return env, notes
    home = Path(home) if home else default_home()
    inherit = False
    if env.name is None:
        python = env.python or sys.executable
    else:
        found = lock_of(env, home)
        try:
            base = builder.describe_interpreter(sys.executable)
            built = builder.existing(str(found.path), str(venvs_dir(home)), base)
            env_id = builder.plan(str(found.path), base)["env_id"]
        except builder.BuildError as exc:
            raise EnvError(
                f"environment {env.name!r} (version {env.version}) could not be built: {exc}"
            ) from None
        if built is None:
            python = str(venvs_dir(home) / env_id / "bin" / "python")
            return replace(env, python=python), [
                f"environment {env.name!r} is not built yet: a real submit builds it into "
                f"{venvs_dir(home) / env_id} first, then checks the imports with its python"
            ]
        python, inherit = built["python"], bool(built.get("inherit"))
    record = preflight.check(
        python, Path(code_dir), entry, launcher=launcher, variables=env.variables
    )
    if not record["ok"]:
        raise EnvError(
            preflight.failure_message(
                record, env_name=env.name, version=env.version, inherit=inherit
            )
        )
    label = f"environment {env.name!r}" if env.name else "the kernel's Python"
    for difference in record["differences"]:
        warnings.warn(EnvDriftWarning(f"{label}: {difference}"), stacklevel=3)
    return replace(env, python=python, prepared={"built": False, "preflight": record}), []
