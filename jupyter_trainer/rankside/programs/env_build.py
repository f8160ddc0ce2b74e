"""Lock -> ready virtual environment, on whatever machine runs this file.

    python build.py LOCK_DIR VENVS_DIR [--base-python PYTHON] [--uv UV] [--offline]
    python build.py --describe            # this interpreter's version, site dirs, packages

Standalone on purpose: the standard library and the ``uv`` binary only, no import of
jupyter_trainer, so a target can copy this file and a lock folder to a node that has
neither Jupyter nor this package and realise the same environment there.

A lock folder holds ``requirements.lock`` (exact pins with hashes, from ``uv pip compile``)
and ``lock.json`` (Python version, whether it layers on a base interpreter). The
environment it gives is ``VENVS_DIR/<env-id>/``, where the id hashes the lock, the
interpreter and, for a layered environment, the base's site dirs and which pins the base
already satisfies. So a cached environment is found by computing a hash and checking one
file: no uv call and no network.

Building takes an ``flock`` per environment id, builds in a temporary folder beside the
destination (``uv venv --relocatable``, so it still works after the move) and finishes with
an atomic ``rename``: a reader sees a complete environment or none, two concurrent builders
produce one environment, and a build that fails or is killed leaves only a temporary
folder that the next build removes.

Layering (``inherit``): ``uv venv --system-site-packages`` would expose the *system*
Python's packages, not those of a kernel that itself runs in a virtual environment. Instead
the new environment gets a ``.pth`` file that appends the base interpreter's own site dirs
(processing their ``.pth`` files, so editable installs keep working) after its own
site-packages: the base's packages are visible, and the environment's own win. Pins in the
lock that the base already has at the same version are not installed again.
"""

from __future__ import annotations

import argparse
import fcntl
import glob
import hashlib
import json
import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
import time
from typing import Any

FORMAT = 1
MARKER = "jt-env.json"
INHERIT_PTH = "_jupyter_trainer_inherit.pth"
UV_ENV = "JUPYTER_TRAINER_UV"
_REQ_LINE = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;\\]+)")


class BuildError(RuntimeError):
    """The environment could not be built; the message says why (uv's own error included)."""


# -- interpreters --------------------------------------------------------------------------
def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_dir_name(entry: str) -> tuple[str, str] | None:
    """``numpy-2.4.6.dist-info`` -> ("numpy", "2.4.6"); egg-info too."""
    for suffix in (".dist-info", ".egg-info"):
        if entry.endswith(suffix):
            stem = entry[: -len(suffix)]
            break
    else:
        return None
    match = re.match(r"(.+?)-(\d[^-]*)", stem)
    return (canonical_name(match.group(1)), match.group(2)) if match else None


def describe_self() -> dict[str, Any]:
    """This interpreter: executable, version, the site dirs it reads, installed packages."""
    sites: list[str] = []
    if getattr(site, "ENABLE_USER_SITE", False):
        sites.append(site.getusersitepackages())
    sites += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    sites = [s for i, s in enumerate(sites) if os.path.isdir(s) and s not in sites[:i]]
    packages: dict[str, str] = {}
    for folder in reversed(sites):  # earlier dirs win, as on sys.path
        for entry in os.listdir(folder):
            parsed = _dist_dir_name(entry)
            if parsed:
                packages[parsed[0]] = parsed[1]
    # ``identity`` is the same whichever name (python, python3, a symlink) started it.
    return {
        "executable": sys.executable,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "identity": [os.path.realpath(sys.executable), os.path.realpath(sys.prefix)],
        "sites": sites,
        "packages": dict(sorted(packages.items())),
    }


def describe_interpreter(python: str | None = None) -> dict[str, Any]:
    """``describe_self()`` of ``python`` (this interpreter when None), asked in a subprocess."""
    if python is None or os.path.abspath(python) == os.path.abspath(sys.executable):
        return describe_self()
    try:
        out = subprocess.run(
            [python, os.path.abspath(__file__), "--describe"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except OSError as exc:
        raise BuildError(f"cannot run the base interpreter {python}: {exc}") from None
    if out.returncode != 0:
        raise BuildError(
            f"the base interpreter {python} failed to describe itself: {out.stderr.strip()[-2000:]}"
        )
    return json.loads(out.stdout)


def version_matches(wanted: str, actual: str) -> bool:
    """ "3.11" matches 3.11.x; "3.11.7" matches only 3.11.7."""
    return actual.split(".")[: len(wanted.split("."))] == wanted.split(".")


def public_version(version: str) -> str:
    return version.split("+", 1)[0]


def same_build(have: str, pinned: str) -> bool:
    """Whether an installed version is the pinned one, build label included: torch
    ``2.13.0+cpu`` is not PyPI's ``2.13.0`` (a CUDA build)."""
    return have.lower() == pinned.lower()


# -- locks ---------------------------------------------------------------------------------
def parse_lock(text: str) -> list[dict[str, Any]]:
    """Logical requirement lines of a lock: name, pinned version (or None), hashes, text."""
    entries = []
    for raw in text.replace("\\\n", " ").splitlines():
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        match = _REQ_LINE.match(line)
        entries.append(
            {
                "name": canonical_name(match.group(1)) if match else None,
                "version": match.group(3) if match else None,
                "hashed": "--hash=" in line,
                "line": line,
            }
        )
    return entries


def read_lock(lock_dir: str) -> tuple[dict[str, Any], str]:
    try:
        with open(os.path.join(lock_dir, "lock.json")) as fh:
            meta = json.load(fh)
        with open(os.path.join(lock_dir, "requirements.lock")) as fh:
            text = fh.read()
    except (OSError, ValueError) as exc:
        raise BuildError(f"{lock_dir} is not a usable lock folder: {exc}") from None
    if meta.get("format") != FORMAT:
        raise BuildError(
            f"{lock_dir}: lock format {meta.get('format')!r}, this builder reads {FORMAT}"
        )
    return meta, text


def plan(lock_dir: str, base: dict[str, Any]) -> dict[str, Any]:
    """What building ``lock_dir`` on top of ``base`` means, and the id of the result."""
    meta, text = read_lock(lock_dir)
    python = meta["python"]
    inherit = bool(meta.get("inherit"))
    entries = parse_lock(text)
    matches = version_matches(python, base["version"])
    if inherit and not matches:
        raise BuildError(
            f"the lock layers on Python {python} but the base interpreter "
            f"{base['executable']} is Python {base['version']}"
        )
    have = base["packages"]
    skipped = sorted(
        f"{e['name']}=={e['version']}"
        for e in entries
        if inherit and e["name"] and same_build(have.get(e["name"], ""), e["version"])
    )
    interpreter = base["executable"] if matches else python
    identity = {
        "format": FORMAT,
        "lock": hashlib.sha256(text.encode()).hexdigest(),
        "python": python,
        "inherit": inherit,
        "interpreter": base["identity"] if matches else python,
        "sites": base["sites"] if inherit else [],
        "skipped": skipped,
    }
    env_id = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    install = [e for e in entries if f"{e['name']}=={e['version']}" not in skipped]
    return {
        "env_id": env_id,
        "meta": meta,
        "interpreter": interpreter,
        "inherit": inherit,
        "base_version": base["version"],
        "sites": base["sites"],
        "skipped": skipped,
        "install": install,
    }


# -- building ------------------------------------------------------------------------------
def find_uv(explicit: str | None = None) -> str:
    """``$JUPYTER_TRAINER_UV``, else ``explicit``, else the ``uv`` package's binary, else PATH."""
    found = os.environ.get(UV_ENV) or explicit
    if not found:
        try:
            import uv

            found = uv.find_uv_bin()
        except (ImportError, FileNotFoundError):
            found = shutil.which("uv")
    if not found:
        raise BuildError(
            f"uv was not found: install it (pip install uv) or set {UV_ENV} to its path"
        )
    return found


def run_uv(uv: str, args: list[str], cwd: str | None = None) -> str:
    env = {**os.environ, "NO_COLOR": "1", "UV_NO_PROGRESS": "1"}
    env.pop("VIRTUAL_ENV", None)  # every call names its interpreter explicitly
    try:
        out = subprocess.run(
            [uv, *args], capture_output=True, text=True, cwd=cwd, env=env, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        raise BuildError(f"cannot run uv ({uv}): {exc}") from None
    if out.returncode != 0:
        raise BuildError(
            f"`uv {args[0]} {args[1] if len(args) > 1 else ''}` failed:\n"
            f"{out.stderr.strip()[-4000:]}"
        )
    return out.stdout


def ready(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MARKER)) and os.path.exists(
        os.path.join(path, "bin", "python")
    )


def existing(lock_dir: str, venvs_dir: str, base: dict[str, Any]) -> dict[str, Any] | None:
    """The record of the built environment for this lock and base, or None. No uv call."""
    p = plan(lock_dir, base)
    dest = os.path.join(venvs_dir, p["env_id"])
    return _record(dest, built=False) if ready(dest) else None


def _record(dest: str, built: bool) -> dict[str, Any]:
    with open(os.path.join(dest, MARKER)) as fh:
        marker = json.load(fh)
    return {**marker, "path": dest, "python": os.path.join(dest, "bin", "python"), "built": built}


def build(
    lock_dir: str,
    venvs_dir: str,
    *,
    base_python: str | None = None,
    uv: str | None = None,
    offline: bool | None = None,
) -> dict[str, Any]:
    """The environment of ``lock_dir`` under ``venvs_dir``, built unless it already is.

    ``base_python``: the interpreter a layered lock builds on (default: the one running
    this). ``offline``: True never touches the network, False always may, None tries the uv
    cache first and goes online only if that fails. Returns the environment's record:
    ``python``, ``env_id``, ``built`` (False when reused), ``build_seconds``, ...
    """
    base = describe_interpreter(base_python)
    p = plan(lock_dir, base)
    dest = os.path.join(venvs_dir, p["env_id"])
    if ready(dest):
        return _record(dest, built=False)
    os.makedirs(venvs_dir, exist_ok=True)
    with open(os.path.join(venvs_dir, f".{p['env_id']}.lock"), "a") as lock_fh:
        fcntl.flock(lock_fh, fcntl.LOCK_EX)
        if ready(dest):  # another process built it while we waited
            return _record(dest, built=False)
        for stale in glob.glob(os.path.join(venvs_dir, f".{p['env_id']}.tmp-*")):
            shutil.rmtree(stale, ignore_errors=True)  # left by a killed build; we hold the lock
        if os.path.lexists(dest):
            shutil.rmtree(dest, ignore_errors=True)  # incomplete: no marker
        tmp = tempfile.mkdtemp(prefix=f".{p['env_id']}.tmp-", dir=venvs_dir)
        try:
            _build_into(os.path.join(tmp, "env"), tmp, p, find_uv(uv), offline)
            os.rename(os.path.join(tmp, "env"), dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return _record(dest, built=True)


def remove(venvs_dir: str, env_id: str) -> bool:
    """Remove the environment ``env_id`` under the lock its build takes; False (and nothing
    removed) while it is being built. It leaves by an atomic rename first, so a reader
    never sees it half deleted."""
    dest = os.path.join(venvs_dir, env_id)
    with open(os.path.join(venvs_dir, f".{env_id}.lock"), "a") as lock_fh:
        try:
            fcntl.flock(lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        if os.path.lexists(dest):
            doomed = tempfile.mkdtemp(prefix=f".{env_id}.tmp-", dir=venvs_dir)
            os.rename(dest, os.path.join(doomed, "env"))
            shutil.rmtree(doomed, ignore_errors=True)
    return True  # the empty lock file stays: a builder may be about to open it


def _build_into(venv: str, work: str, p: dict[str, Any], uv: str, offline: bool | None) -> None:
    start = time.monotonic()
    try:
        run_uv(uv, ["venv", "--relocatable", "--quiet", "--python", p["interpreter"], venv])
    except BuildError as exc:
        if p["interpreter"] != p["meta"]["python"]:
            raise
        raise BuildError(
            f"no Python {p['interpreter']} was found on this machine (the base "
            f"interpreter is {p['base_version']}) and uv could not get one: install "
            f"Python {p['interpreter']} (`uv python install {p['interpreter']}` where "
            "it can download), or choose the base's version with `python:`.\n"
            f"{exc}"
        ) from None
    if p["inherit"]:
        purelib = glob.glob(os.path.join(venv, "lib", "python*", "site-packages"))
        if len(purelib) != 1:
            raise BuildError(f"cannot find the site-packages of the new environment in {venv}")
        with open(os.path.join(purelib[0], INHERIT_PTH), "w") as fh:
            fh.write(
                "# Added by jupyter_trainer: the base interpreter's packages, after this "
                "environment's own\n"
            )
            fh.writelines(f"import site; site.addsitedir({s!r})\n" for s in p["sites"])
    if p["install"]:
        listing = os.path.join(work, "install.txt")
        with open(listing, "w") as fh:
            fh.writelines(e["line"] + "\n" for e in p["install"])
        args = [
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--python",
            os.path.join(venv, "bin", "python"),
            "-r",
            listing,
        ]
        if all(e["hashed"] for e in p["install"] if not e["line"].startswith("-")):
            args.append("--require-hashes")
        for index in p["meta"].get("index", []):  # a torch build's own index (lock.json)
            args += ["--index", index, "--index-strategy", "unsafe-best-match"]
        if offline is None:
            try:
                run_uv(uv, [*args, "--offline"])
            except BuildError:
                run_uv(uv, args)
        else:
            run_uv(uv, [*args, "--offline"] if offline else args)
    marker = {
        "format": FORMAT,
        "env_id": p["env_id"],
        "lock_python": p["meta"]["python"],
        "interpreter": p["interpreter"],
        "inherit": p["inherit"],
        "base_sites": p["sites"] if p["inherit"] else [],
        "skipped": p["skipped"],
        "installed": [e["line"].split(" ", 1)[0] for e in p["install"]],
        "built_at": time.time(),
        "build_seconds": round(time.monotonic() - start, 3),
    }
    with open(os.path.join(venv, MARKER), "w") as fh:
        json.dump(marker, fh, indent=1, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("lock_dir", nargs="?")
    parser.add_argument("venvs_dir", nargs="?")
    parser.add_argument("--base-python", default=None)
    parser.add_argument("--uv", default=None)
    parser.add_argument("--offline", action="store_true", default=None)
    parser.add_argument("--describe", action="store_true")
    args = parser.parse_args(argv)
    if args.describe:
        print(json.dumps(describe_self()))
        return 0
    if not (args.lock_dir and args.venvs_dir):
        parser.error("LOCK_DIR and VENVS_DIR are required")
    try:
        record = build(
            args.lock_dir,
            args.venvs_dir,
            base_python=args.base_python,
            uv=args.uv,
            offline=args.offline,
        )
    except BuildError as exc:
        print(f"build.py: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
