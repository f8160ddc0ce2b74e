"""A run's secret values: the params, environment variables and script arguments its
``spec.json`` records redacted (``***``, or ``${{secret.N}}`` for argument N), kept in ``secrets.json`` in the run's folder, mode 0600, readable by the
run's owner only (as ``~/.netrc`` or ``~/.pgpass`` keep a password).

The store writes it when the run is made; each rank reads it when ``jt.params`` is first
asked for, and boot puts the secret variables into the rank's environment before the code
runs, so the cell reading ``hf_token`` and a library reading ``$DATABASE_URL`` get the real
values. A rerun by the owner reads it too; anyone else gives the values again. A file that
is not a plain file of this user's, or that others may read or write, is ignored: nobody
else can hand a rank its params. Standard library only: copied into every snapshot.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import Any

FILE = "secrets.json"
KINDS = ("params", "variables", "args")


def write(run_dir: str | os.PathLike[str], values: dict[str, dict[str, Any]]) -> None:
    """Create ``run_dir/secrets.json`` (mode 0600, never through a link) holding
    ``{"params": {...}, "variables": {...}}``; nothing when both are empty."""
    if not any(values.get(kind) for kind in KINDS):
        return
    path = os.path.join(os.fspath(run_dir), FILE)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)  # whatever the umask
        json.dump({kind: dict(values.get(kind) or {}) for kind in KINDS}, f)


def read(run_dir: str | os.PathLike[str] | None) -> dict[str, dict[str, Any]]:
    """``{"params": {...}, "variables": {...}}`` from the run's ``secrets.json``; empty when
    there is none, when this user cannot read it (a colleague's run), or when it is not a
    plain file of this user's that only this user can read (then a line on stderr says so)."""
    empty: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
    if run_dir is None:
        return empty
    path = os.path.join(os.fspath(run_dir), FILE)
    try:
        fd = os.open(
            path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except (FileNotFoundError, PermissionError):
        return empty
    except OSError as exc:  # a link (ELOOP), say
        print(f"jupyter_trainer: {path} is not used: {exc}", file=sys.stderr)
        return empty
    with os.fdopen(fd, "rb") as f:
        found = os.fstat(f.fileno())
        if (
            not stat.S_ISREG(found.st_mode)
            or found.st_uid != os.getuid()
            or stat.S_IMODE(found.st_mode) & 0o077
        ):
            print(
                f"jupyter_trainer: {path} is not used: it must be a plain file of this user's "
                "with mode 0600",
                file=sys.stderr,
            )
            return empty
        try:
            record = json.loads(f.read(16 * 1024 * 1024))
        except ValueError:
            return empty
    if not isinstance(record, dict):
        return empty
    return {k: dict(v) if isinstance(v := record.get(k), dict) else {} for k in KINDS}


def files(run_dir: str | os.PathLike[str]) -> dict[str, str]:
    """``{"secrets.json": text}`` for a node that makes its own copy of the run folder (an
    ssh host, a Slurm cluster's login node): written there 0600 too. Empty without one."""
    values = read(run_dir)
    return {FILE: json.dumps(values)} if any(values.values()) else {}


def into_environment(run_dir: str | None) -> None:
    """Put the run's secret environment variables into this process's environment (a
    rank's, before its code runs); its children inherit them."""
    for name, value in read(run_dir)["variables"].items():
        if isinstance(name, str) and isinstance(value, str):
            os.environ[name] = value
