"""The commands of the model registry: ``register RUN NAME PATH`` and ``models [list | show
| download | register | delete]``.

Model names, run ids and paths that start with '-' are checked as ``checks.py`` says."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, TextIO

from ...api import runs as api
from ...api.models import Model, check_owner, delete_model, get_model, models, version_to_delete
from ...core.errors import ModelNotFound, SpecError, StoreError
from ...core.printable import printable
from ...core.units import format_bytes
from ...store.models import ModelStore, parse_ref, versions_in
from ..views.text import columns
from .checks import checked, count
from .options import ParamAction
from .parser import Subparsers, handles, verbs


def _register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run")
    parser.add_argument("name", help="the model's name; each registration is its next version")
    parser.add_argument("path", help="a file or folder of the run's outputs/, relative to it")
    parser.add_argument(
        "--tag",
        action=ParamAction,
        default=[],
        metavar="KEY=VALUE",
        help="a tag of this version (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print the version's record as JSON")


def define_register(sub: Subparsers, name: str) -> None:
    register = checked(
        sub.add_parser(
            name,
            help="copy a file or folder of a run's outputs/ into the model registry",
            description="Copy PATH (a file or folder of the run's outputs/) into the model "
            "registry as version N+1 of NAME, with the run's lineage (params, final metrics, code "
            "hash, environment lock, sweep, files with their sha256).",
        )
    )
    _register_arguments(register)
    handles(register, cmd_register)


def cmd_register(args: argparse.Namespace, out: TextIO) -> int:
    model = api.get_run(args.run).register_model(args.name, args.path, args.tag)
    if args.json:
        print(json.dumps(model.to_dict(), indent=1), file=out)
        return 0
    files = model.files
    print(
        f"registered {printable(model.name)}@{model.version} from run {printable(model.run)}: "
        f"{count(len(files), 'file')}, {format_bytes(sum(f.size for f in files))}, "
        f"in {printable(str(model.path))}",
        file=out,
    )
    return 0


def define_models(sub: Subparsers, name: str) -> None:
    parser = sub.add_parser(
        name,
        help="the model registry: list, show, download, register or delete versions",
    )
    handles(parser, cmd_list)  # no verb: list
    actions = verbs(parser, required=False)
    listing = actions.add_parser("list", help="every model with its latest version (the default)")
    listing.add_argument("--json", action="store_true", help="print JSON rows")
    handles(listing, cmd_list)
    show = checked(actions.add_parser("show", help="a version's lineage and files"))
    show.add_argument("model", metavar="NAME[@V]", help="the latest version unless @V is given")
    show.add_argument("--json", action="store_true", help="print the version's record as JSON")
    handles(show, cmd_show)
    download = checked(actions.add_parser("download", help="copy a version's files into a folder"))
    download.add_argument("model", metavar="NAME[@V]", help="the latest version unless @V is given")
    download.add_argument("dest", help="a folder (made if missing)")
    handles(download, cmd_download_model)
    register = checked(actions.add_parser("register", help="as `register RUN NAME PATH`"))
    _register_arguments(register)
    handles(register, cmd_register)
    delete = checked(
        actions.add_parser(
            "delete",
            help="delete a version (NAME@V) or every version (NAME --all)",
            description="Delete version V of NAME from the registry (its files and index row; its "
            "number is never given again), or with --all every version of NAME, which "
            "frees the name. It cannot be undone, so nothing is deleted without --yes: "
            "without it, the command says what it would delete. The runs the versions "
            "came from are not touched.",
        )
    )
    delete.add_argument("model", metavar="NAME@V|NAME", help="NAME@V, or NAME with --all")
    delete.add_argument(
        "--all",
        action="store_true",
        dest="all_versions",
        help="delete every version of NAME (its next version is 1 again)",
    )
    delete.add_argument("--yes", action="store_true", help="delete: without it, nothing is deleted")
    delete.add_argument(
        "--force", action="store_true", help="also delete versions another user registered"
    )
    delete.add_argument("--json", action="store_true", help="print what was deleted as JSON")
    handles(delete, cmd_delete)


def cmd_list(args: argparse.Namespace, out: TextIO) -> int:
    rows = ModelStore().rows()
    if getattr(args, "json", False):
        print(json.dumps(rows, indent=1), file=out)
    else:
        print(models_table(rows), file=out)
    return 0


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    model = get_model(args.model)
    print(json.dumps(model.to_dict(), indent=1) if args.json else model_text(model), file=out)
    return 0


def cmd_download_model(args: argparse.Namespace, out: TextIO) -> int:
    for path in get_model(args.model).download(args.dest):
        print(printable(str(path)), file=out)
    return 0


def cmd_delete(args: argparse.Namespace, out: TextIO) -> int:
    """``models delete``: what would go, unless ``--yes``; then delete it."""
    name, version = parse_ref(args.model)
    if version is None and args.model.endswith("@latest"):
        version = get_model(name).version
    if version is not None and args.all_versions:
        raise SpecError(f"models delete: give {name}@{version} or {name} --all, not both")
    if version is None and not args.all_versions:
        have = ", ".join(str(m.version) for m in reversed(models(name)))
        raise SpecError(
            f"models delete: say which version of {name} to delete ({name}@N; it "
            f"has {have}), or add --all to delete every version of {name}"
        )
    registry = ModelStore()
    doomed = (
        [version_to_delete(registry, name, version)]
        if version is not None
        else [Model(name, v, registry) for v in registry.versions(name)]
    )
    check_owner(doomed, force=args.force)
    what = (
        f"{name}@{version}"
        if version is not None
        else f"every version of {name} ({', '.join(str(m.version) for m in doomed)})"
    )
    if not args.yes:
        raise SpecError(
            f"models delete: this deletes {what}: {_sizes(doomed)}; it cannot be "
            "undone: add --yes to delete"
        )
    deleted = delete_model(name, version, all_versions=args.all_versions, force=args.force)
    if args.json:
        print(json.dumps({"name": name, "deleted": deleted}), file=out)
    elif version is not None:
        left = versions_in(registry.folder(name))
        print(
            f"deleted {name}@{version}; {name} has "
            f"{'versions ' + ', '.join(map(str, left)) if left else 'no versions'} now",
            file=out,
        )
    else:
        print(f"deleted {what}; {name} is free again (its next version is 1)", file=out)
    return 0


def _sizes(versions: list[Model]) -> str:
    """What each of ``versions`` holds and where it came from, for ``delete``'s question."""
    shown = []
    for model in versions:
        try:
            files = model.files
            shown.append(
                f"{model.name}@{model.version} ({count(len(files), 'file')}, "
                f"{format_bytes(sum(f.size for f in files))}, from run {model.run})"
            )
        except (StoreError, ModelNotFound):
            shown.append(f"{model.name}@{model.version} (its record is damaged or missing)")
    return "; ".join(shown)


def models_table(rows: list[dict[str, Any]]) -> str:
    """One line per model (its latest version) from index rows, by name."""
    if not rows:
        return "no models yet; register one with `jupyter-trainer register RUN NAME PATH`"
    latest: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for row in rows:
        latest.setdefault(row["name"], row)
        counts[row["name"]] = counts.get(row["name"], 0) + 1
    body = [
        tuple(
            printable(str(cell))
            for cell in (
                r["name"],
                r["version"],
                counts[r["name"]],
                r["run_id"],
                r["path"],
                format_bytes(r["bytes"]),
                _when(r["created"]),
                _pairs(r["tags"]),
            )
        )
        for r in latest.values()
    ]
    return columns(
        ("MODEL", "LATEST", "VERSIONS", "RUN", "PATH", "SIZE", "REGISTERED", "TAGS"), body
    )


def model_text(model: Model) -> str:
    """A version's lineage and files, as text."""
    lin = model.lineage
    versions = ", ".join(str(m.version) for m in reversed(models(model.name)))
    env = lin.get("environment") or {}
    environment = (
        f"{env['name']}@{env.get('version')} (lock {env.get('lock')}, env {env.get('env_id')})"
        if env.get("name")
        else f"the kernel's own Python ({env.get('python') or 'unknown'}), no lock"
    )
    sweep = f"{lin['sweep']} trial {lin['trial']}" if lin.get("sweep") else "none"
    rows = [
        ("path", str(model.path)),
        (
            "run",
            f"{lin['run_id']} ({lin.get('run_name')}, {lin.get('run_status')} when "
            f"registered), outputs/{lin.get('source')}",
        ),
        ("registered", f"{_when(lin['created'])} by {lin.get('user')}"),
        ("tags", _pairs(lin.get("tags") or {}) or "none"),
        ("params", _pairs(lin.get("params") or {}) or "none"),
        ("metrics", _pairs(lin.get("metrics") or {}) or "none (rank 0 logged none)"),
        ("code", lin.get("code_hash")),
        ("environment", environment),
        ("data", ", ".join(map(str, lin.get("data") or [])) or "none"),
        ("sweep", sweep),
    ]
    files = model.files
    lines = [
        f"model {printable(model.name)}@{model.version} (versions {versions})",
        *(f"  {k:<12} {printable(str(v))}" for k, v in rows),
        f"  {'files':<12} {count(len(files), 'file')}, {format_bytes(sum(f.size for f in files))}",
    ]
    lines += [
        f"    {printable(str(f.sha256))}  {format_bytes(f.size):>10}  {printable(str(f.path))}"
        for f in files
    ]
    return "\n".join(lines)


def _pairs(mapping: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v}" for k, v in mapping.items())


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
