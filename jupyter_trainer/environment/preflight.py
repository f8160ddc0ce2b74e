"""Pre-flight: before any rank starts, can the run's interpreter import what the code imports?

The commonest failure of notebook-to-cluster tools is drift: the cell works in the notebook
and fails on the workers because a package is missing there. This check reads the top-level
imports of the run's entry script (for a cell, ``_jt/cell.py`` also holds the imports of the
carried helpers) and asks the run's own interpreter, in one subprocess with the rank's
``sys.path`` (the snapshot first, then Azure ML SDK v1's script side, the bundled runtime
last), whether each resolves
(``importlib.util.find_spec``: nothing is imported, so it stays fast). Modules of the
snapshot resolve there too. The launcher's own module (``torch`` for torchrun) is checked as
well. Imports inside ``try:`` or functions are optional by construction and not checked.

It also reports, without failing, where the Python or torch version of the environment
differs from the notebook's.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import torchbuild

LAUNCHER_MODULES = {"torchrun": ("torch",), "horovod": ("horovod",)}
RESERVED_DIR = "_jt"
CELL_ENTRY = "_jt/cell.py"
IGNORE_FILE = ".trainignore"  # capture.snapshot.IGNORE_FILE
CELL_MARKER = "# --- cell ---"  # capture.cellscript.CELL_MARKER: the cell follows it verbatim

_CHECK = r"""
import glob, importlib.util, json, os, re, sys
root, shim, names = sys.argv[1], sys.argv[2], sys.argv[3:]
v1 = [os.path.join(shim, "azureml_v1")] if os.path.isdir(os.path.join(shim, "azureml_v1")) else []
sys.path[:] = [root] + v1 + [p for p in sys.path if p not in ("", root)] + [shim]
out = {"python": "%d.%d.%d" % sys.version_info[:3], "executable": sys.executable,
       "missing": [], "errors": {}, "torch": None}
for name in names:
    try:
        if importlib.util.find_spec(name) is None:
            out["missing"].append(name)
    except Exception as exc:
        out["errors"][name] = "%s: %s" % (type(exc).__name__, exc)
for folder in sys.path:  # the first torch-*.dist-info on sys.path (importlib.metadata is slow)
    try:
        found = [n for n in os.listdir(folder or ".")
                 if n.startswith("torch-") and n.endswith(".dist-info")]
    except OSError:
        continue
    if found:
        out["torch"] = found[0][6:-10]
        break
def version_py(folder):  # a package's __version__, read without importing it
    try:
        with open(os.path.join(folder, "version.py")) as fh:
            found = re.search(r"^__version__\s*(?::[^=]*)?=\s*['\"]([^'\"]+)", fh.read(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None
def package_dir(name):
    try:
        spec = importlib.util.find_spec(name)
    except Exception:
        return None
    return next(iter(spec.submodule_search_locations or []), None) if spec else None
torch_dir = package_dir("torch")
out["builds"] = {"torch": version_py(torch_dir) if torch_dir else None, "packages": []}
for name in sorted(set(names) | {"torchvision", "torchaudio", "torchtext"}):
    folder = package_dir(name) if torch_dir and name != "torch" else None
    version = folder and version_py(folder)
    if not version:
        continue
    needs = None
    parent = os.path.dirname(folder)
    infos = glob.glob(os.path.join(parent, name + "-*.dist-info"))
    for listing in [] if infos else glob.glob(os.path.join(parent, "*.dist-info", "top_level.txt")):
        try:
            with open(listing) as fh:
                if name in fh.read().split():
                    infos.append(os.path.dirname(listing))
        except OSError:
            pass
    for info in infos:
        try:
            with open(os.path.join(info, "METADATA")) as fh:
                pin = re.search(r"^Requires-Dist:\s*torch\s*\(?\s*==\s*([^\s,;)]+)", fh.read(), re.M)
        except OSError:
            continue
        needs = pin.group(1) if pin else None
        break
    if needs:  # a package built against one torch
        own = os.path.realpath(folder).startswith(os.path.realpath(sys.prefix) + os.sep)
        out["builds"]["packages"].append(
            {"module": name, "version": version, "needs": needs, "own": own, "where": folder})
out["path"] = [p for p in sys.path if p not in [root, shim, *v1]]
print(json.dumps(out))
"""

# Checks that found every module, by (interpreter, environment, snapshot root listing, names):
# a kernel submits run after run with the same imports, and a repeat is answered without
# starting an interpreter while no folder on that interpreter's sys.path has changed (an
# install or removal changes its folder's mtime). A check that found a module missing is
# never reused, so installing the module is seen at once.
_FOUND: dict[tuple[Any, ...], tuple[dict[str, Any], list[tuple[str, float | None]]]] = {}


def _stamps(folders: list[str]) -> list[tuple[str, float | None]]:
    out: list[tuple[str, float | None]] = []
    for folder in folders:
        try:
            out.append((folder, os.stat(folder or ".").st_mtime_ns))
        except OSError:
            out.append((folder, None))
    return out


def _listing(folder: Path) -> tuple[str, ...]:
    try:
        return tuple(sorted(os.listdir(folder)))
    except OSError:
        return ()


def _run_check(
    python: str, root: Path, shim: Path, names: list[str], env: dict[str, str], cwd: str
) -> tuple[dict[str, Any] | None, str | None]:
    """The check's answer (or None and why), from ``_FOUND`` when nothing it saw changed."""
    key = (python, tuple(sorted(env.items())), _listing(root), _listing(shim), tuple(names))
    cached = _FOUND.get(key)
    if cached is not None and _stamps([f for f, _ in cached[1]]) == cached[1]:
        return dict(cached[0]), None
    out = subprocess.run(
        [python, "-c", _CHECK, str(root), str(shim), *names],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
    )
    found = json.loads(out.stdout) if out.returncode == 0 else None
    if found is None:
        return None, out.stderr.strip()[-2000:] or f"exit code {out.returncode}"
    folders = found.pop("path", [])
    if not found["missing"] and not found["errors"] and not mismatches(found):
        _FOUND[key] = (dict(found), _stamps(folders))
    return found, None


def top_level_imports(source: str) -> list[tuple[str, int]]:
    """(top-level module, line) of each import statement at module level, in order."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []  # the rank reports a syntax error with its own traceback
    found: list[tuple[str, int]] = []
    for node in body:
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module != "__future__"
        ):
            found.append((node.module.split(".")[0], node.lineno))
    return found


def search_root(code_dir: Path, entry: str) -> Path:
    """The folder the rank puts first on ``sys.path`` (as ``_jt/boot.py`` does)."""
    parts = Path(entry).parts
    return code_dir if parts and parts[0] == RESERVED_DIR else (code_dir / entry).parent


@functools.lru_cache(maxsize=1)
def _kernel_versions() -> tuple[tuple[str, str | None], ...]:
    """Once per process: reading torch's metadata costs some 5-20 ms (an email parser)."""
    import importlib.metadata  # here: it costs the supervisor's start-up about 15 ms

    try:
        torch = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch = None
    return (("python", platform.python_version()), ("torch", torch), ("executable", sys.executable))


def kernel_versions() -> dict[str, str | None]:
    return dict(_kernel_versions())


def check(
    python: str,
    code_dir: Path,
    entry: str,
    *,
    launcher: str,
    variables: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Run the check with ``python``; return a JSON-able record (``ok``, ``missing``, ...)."""
    start = time.monotonic()
    source_path = Path(code_dir) / entry
    try:
        source = source_path.read_text()
    except (OSError, UnicodeDecodeError):
        source = ""
    lines = source.splitlines()
    imports = top_level_imports(source)
    first: dict[str, int] = {}
    for module, line in imports:
        first.setdefault(module, line)
    required = dict.fromkeys(LAUNCHER_MODULES.get(launcher, ()), f"needed by --launcher {launcher}")
    names = sorted(set(first) | set(required))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JT_")}
    env.update(variables or {})
    try:
        found, problem = _run_check(
            python,
            search_root(Path(code_dir), entry),
            Path(code_dir) / RESERVED_DIR,
            names,
            env,
            str(code_dir),
        )
    except (OSError, subprocess.TimeoutExpired, ValueError) as exc:
        found, problem = None, str(exc)
    kernel = kernel_versions()
    record: dict[str, Any] = {"ok": False, "checked": names, "kernel": kernel, "missing": []}
    if found is None:
        record.update(
            error=f"the interpreter {python} could not run the check: {problem}",
            seconds=round(time.monotonic() - start, 3),
        )
        return record
    for module in found["missing"]:
        found_at = first.get(module)
        record["missing"].append(
            {
                "module": module,
                "line": found_at,
                "source": (
                    lines[found_at - 1].strip() if found_at and found_at <= len(lines) else None
                ),
                "why": required.get(module) or where_imported(entry, lines, found_at),
                "kernel": where_kernel_finds(module),
                "local": local_module(module),
            }
        )
    separate = os.path.realpath(python) != os.path.realpath(sys.executable)
    builds: list[dict[str, Any]] = []
    unused: list[str] = []
    for item in mismatches(found):
        at = first.get(item["module"])
        if at is None and not (item["own"] and separate):
            unused.append(f"{item['why']}; importing it would fail (the run does not)")
            continue
        item["line"] = at
        item["source"] = lines[at - 1].strip() if at and at <= len(lines) else None
        item["where_imported"] = where_imported(entry, lines, at) if at else None
        builds.append(item)
    record.update(
        ok=not record["missing"] and not builds,
        torch_builds=builds,
        python=found["python"],
        torch=found["torch"],
        unchecked=found["errors"],
        differences=differences(kernel, found) + unused,
        seconds=round(time.monotonic() - start, 3),
    )
    return record


def mismatches(found: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The packages on the run's path built against another torch than the run's (another
    version, or another build: ``+cu130`` beside a ``+cpu`` torch), each with why."""
    builds = found.get("builds") or {}
    torch: str | None = builds.get("torch")
    out: list[dict[str, Any]] = []
    for item in builds.get("packages", []) if torch else []:
        assert torch is not None
        why = torchbuild.build_mismatch(torch, item["module"], item["version"], item["needs"])
        if why is not None:
            out.append({**item, "torch": torch, "why": why})
    return out


def where_imported(entry: str, lines: list[str], line: int | None) -> str:
    """Say where an import is in words a notebook user recognises: the cell, or earlier cells."""
    if entry == CELL_ENTRY and CELL_MARKER in lines and line is not None:
        marker = lines.index(CELL_MARKER) + 1
        if line > marker:
            return f"imported by the cell, line {line - marker}"
        return f"imported in an earlier notebook cell that the run carries ({entry} line {line})"
    return f"imported by {entry}, line {line}"


def differences(kernel: Mapping[str, Any], env: Mapping[str, Any]) -> list[str]:
    out = []
    for what in ("python", "torch"):
        mine, theirs = kernel.get(what), env.get(what)
        if mine != theirs:
            out.append(
                f"{what} {mine or 'is not installed'} in the notebook, "
                f"{theirs or 'not installed'} in the run's environment"
            )
    return out


def where_kernel_finds(module: str) -> dict[str, Any] | None:
    """How the notebook kernel gets ``module``: an installed distribution, or a local file."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        return None
    dists = importlib.metadata.packages_distributions().get(module)
    if dists:
        try:
            version = importlib.metadata.version(dists[0])
        except importlib.metadata.PackageNotFoundError:
            version = None
        return {"distribution": dists[0], "version": version}
    origin = spec.origin if spec.origin not in (None, "built-in", "frozen") else None
    location = origin or next(iter(spec.submodule_search_locations or []), None)
    return {"path": location}


def local_module(module: str, folder: Path | None = None) -> str | None:
    """The file or package folder of ``module`` in ``folder`` (default: the current
    directory, where the notebook or the submitting shell is), if there is one: a sibling
    module the snapshot lacks, which ``--source`` would bring along."""
    folder = Path.cwd() if folder is None else Path(folder)
    file, package = folder / f"{module}.py", folder / module
    try:
        if file.is_file():
            return str(file)
        if package.is_dir() and any(p.suffix == ".py" for p in package.iterdir()):
            return str(package)
    except OSError:
        pass
    return None


def failure_message(
    record: Mapping[str, Any], *, env_name: str | None, version: str | None, inherit: bool = False
) -> str:
    """What failed and how to fix it, one paragraph per missing module."""
    where = (
        f"environment {env_name!r} (version {version})"
        if env_name
        else "the notebook kernel's Python"
    )
    if record.get("error"):
        return f"pre-flight check failed for {where}: {record['error']}. Nothing was started."
    if not record["missing"]:
        return builds_message(record, where, env_name)
    lines = [
        f"pre-flight check: {where} cannot import "
        + ", ".join(repr(m["module"]) for m in record["missing"])
        + ". Nothing was started."
    ]
    for item in record["missing"]:
        module, kernel = item["module"], item.get("kernel")
        head = f"- {module!r} ({item['why']}"
        head += f": `{item['source']}`)" if item.get("source") else ")"
        dist = (kernel or {}).get("distribution")
        if item.get("local"):
            folder = shlex.quote(str(Path(item["local"]).parent))
            fix = (
                f"{item['local']} is in the current folder but not in the run's snapshot: "
                f"take that folder along with --source {folder} (if it is the --source "
                f"already, check that its {IGNORE_FILE} does not leave the file out)"
            )
        elif kernel and not dist:
            fix = (
                f"the notebook imports it from {kernel['path']}, which the run does not "
                "have: add its folder to the snapshot with --source DIR"
            )
        elif env_name and dist:
            fix = (
                f"the notebook has it from the package {dist!r} ({kernel.get('version')}); add "
                f"`{dist}` to the pip list of environment {env_name!r} (its %%environment "
                f"cell, or %environment {env_name} --pip {dist} ...) and run that again"
                + ("" if inherit else ", or set inherit: true to use the notebook's packages")
            )
        elif dist:
            fix = (
                f"the notebook finds the package {dist!r} through a sys.path entry the run "
                "does not get; install it into the notebook's Python, or add its folder "
                "with --source DIR"
            )
        elif env_name:
            fix = (
                f"no package installed here provides it; add the package that does to the pip "
                f"list of environment {env_name!r} and define it again"
            )
        else:
            fix = (
                "it is not installed in the notebook's Python either; install the package that "
                "provides it (%pip install ...), or run with --env NAME of an environment "
                "that has it"
            )
        if module == "torch" and "launcher" in item["why"]:
            fix = (
                "torchrun is `python -m torch.distributed.run` of the run's interpreter, which "
                "has no torch: set inherit: true to use the notebook's torch, add torch to "
                "the pip list, or use --launcher python for a single process"
            )
        lines.append(f"{head}: {fix}")
    if record.get("torch_builds"):
        lines.append(builds_message(record, where, env_name))
    return "\n".join(lines)


def builds_message(record: Mapping[str, Any], where: str, env_name: str | None) -> str:
    """A package built for another torch than the run's: which, why it fails, and the build
    to install in its place, from the index of the run's torch build."""
    builds = record.get("torch_builds") or []
    lines = [
        f"pre-flight check: {where} has "
        + ", ".join(f"{b['module']} {b['version']}" for b in builds)
        + f", built for another torch than its own ({builds[0]['torch'] if builds else '?'}):"
        " importing it fails in every rank. Nothing was started."
    ]
    for item in builds:
        torch, module = item["torch"], item["module"]
        label = torchbuild.split(torch)[1]
        wanted = torchbuild.matching_version(module, torch)
        requirement = f"{module}=={wanted}" if wanted else module
        source = f"from {torchbuild.index_url(label)}" if label else "from the default index"
        if env_name:
            fix = (
                f"define environment {env_name!r} again: while it keeps the notebook's torch it "
                f"resolves {module} {source} (set {torchbuild.INDEX_ENV} to a mirror of that "
                "index if this machine cannot reach it), or name the torch it needs in its "
                "pip list"
            )
        else:
            index = f" --index-url {torchbuild.index_url(label)}" if label else ""
            fix = f"run `%pip install '{requirement}'{index}` in the notebook"
        head = (
            f"- {module} ({item['where_imported']}: `{item['source']}`)"
            if item.get("source")
            else f"- {module} (installed in the environment, at {item['where']})"
        )
        lines.append(
            f"{head}: {item['why']}. Install the {module} built for this torch, "
            f"{requirement} {source}: {fix}"
        )
    return "\n".join(lines)
