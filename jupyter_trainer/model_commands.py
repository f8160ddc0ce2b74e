"""The commands of a run's files and of the model registry, for ``jupyter-trainer`` and
``%train`` (``commands.COMMANDS`` holds them): ``files``, ``download``, ``register`` and
``models [list | show | download | register]``."""

from __future__ import annotations

import argparse
import json
import time
from typing import Any, TextIO

from . import api
from .model_registry import Model, get_model, models
from .monitor.text import columns
from .options import ParamAction
from .printable import printable
from .store.models import ModelStore
from .units import format_bytes


def _define_files(sub: Any) -> None:
    files = sub.add_parser("files", help="the files of a run's outputs/, with their sizes")
    files.add_argument("run")
    files.add_argument("--json", action="store_true", help="print JSON rows (path, size)")


def cmd_files(args: argparse.Namespace, out: TextIO) -> int:
    found = api.get_run(args.run).files()
    if args.json:
        print(json.dumps([f.to_dict() for f in found], indent=1), file=out)
    elif not found:
        print(f"run {args.run} has no outputs", file=out)
    else:
        print(columns(("SIZE", "PATH"), [(format_bytes(f.size), printable(f.path))
                                         for f in found]), file=out)
        print(f"{_count(len(found), 'file')}, {format_bytes(sum(f.size for f in found))}", file=out)
    return 0


def _define_download(sub: Any) -> None:
    download = sub.add_parser(
        "download", help="copy files of a run's outputs/ into a folder",
        description="Copy the files of the run's outputs/ that PATTERN names into DEST, each at "
                    "its path under outputs/. PATTERN is a path relative to outputs/, a folder "
                    "(every file under it) or a glob: '*.pt', 'checkpoints/**/*.pt'. Quote it "
                    "so the shell does not expand it.")
    download.add_argument("run")
    download.add_argument("pattern")
    download.add_argument("dest", help="a folder (made if missing)")


def cmd_download(args: argparse.Namespace, out: TextIO) -> int:
    for path in api.get_run(args.run).download(args.pattern, args.dest):
        print(printable(str(path)), file=out)
    return 0


def _register_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run")
    parser.add_argument("name", help="the model's name; each registration is its next version")
    parser.add_argument("path", help="a file or folder of the run's outputs/, relative to it")
    parser.add_argument("--tag", action=ParamAction, default=[], metavar="KEY=VALUE",
                        help="a tag of this version (repeatable)")
    parser.add_argument("--json", action="store_true", help="print the version's record as JSON")


def _define_register(sub: Any) -> None:
    _register_arguments(sub.add_parser(
        "register", help="copy a file or folder of a run's outputs/ into the model registry",
        description="Copy PATH (a file or folder of the run's outputs/) into the model registry "
                    "as version N+1 of NAME, with the run's lineage (params, final metrics, code "
                    "hash, environment lock, sweep, files with their sha256)."))


def cmd_register(args: argparse.Namespace, out: TextIO) -> int:
    model = api.get_run(args.run).register_model(args.name, args.path, args.tag)
    if args.json:
        print(json.dumps(model.to_dict(), indent=1), file=out)
        return 0
    files = model.files
    print(f"registered {model.name}@{model.version} from run {model.run}: "
          f"{_count(len(files), 'file')}, {format_bytes(sum(f.size for f in files))}, "
          f"in {model.path}", file=out)
    return 0


def _define_models(sub: Any) -> None:
    parser = sub.add_parser(
        "models", help="the model registry: list | show NAME[@V] | download NAME[@V] DEST | "
                       "register RUN NAME PATH",
        usage="%(prog)s [list [--json] | show NAME[@V] [--json] | download NAME[@V] DEST | "
              "register RUN NAME PATH [--tag KEY=VALUE ...]]")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", parser_class=type(parser))
    listing = actions.add_parser("list", help="every model with its latest version (the default)")
    listing.add_argument("--json", action="store_true", help="print JSON rows")
    show = actions.add_parser("show", help="a version's lineage and files")
    show.add_argument("model", metavar="NAME[@V]", help="the latest version unless @V is given")
    show.add_argument("--json", action="store_true", help="print the version's record as JSON")
    download = actions.add_parser("download", help="copy a version's files into a folder")
    download.add_argument("model", metavar="NAME[@V]", help="the latest version unless @V is given")
    download.add_argument("dest", help="a folder (made if missing)")
    _register_arguments(actions.add_parser("register", help="as `register RUN NAME PATH`"))


def cmd_models(args: argparse.Namespace, out: TextIO) -> int:
    action = args.action or "list"
    if action == "register":
        return cmd_register(args, out)
    if action == "list":
        rows = ModelStore().rows()
        if args.action and args.json:
            print(json.dumps(rows, indent=1), file=out)
        else:
            print(models_table(rows), file=out)
        return 0
    model = get_model(args.model)
    if action == "download":
        for path in model.download(args.dest):
            print(path, file=out)
        return 0
    print(json.dumps(model.to_dict(), indent=1) if args.json else model_text(model), file=out)
    return 0


def models_table(rows: list[dict[str, Any]]) -> str:
    """One line per model (its latest version) from index rows, by name."""
    if not rows:
        return "no models yet; register one with `jupyter-trainer register RUN NAME PATH`"
    latest: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    for row in rows:
        latest.setdefault(row["name"], row)
        counts[row["name"]] = counts.get(row["name"], 0) + 1
    body = [(r["name"], r["version"], counts[r["name"]], r["run_id"], r["path"],
             format_bytes(r["bytes"]), _when(r["created"]), _pairs(r["tags"]))
            for r in latest.values()]
    return columns(("MODEL", "LATEST", "VERSIONS", "RUN", "PATH", "SIZE", "REGISTERED", "TAGS"),
                   body)


def model_text(model: Model) -> str:
    """A version's lineage and files, as text."""
    lin = model.lineage
    versions = ", ".join(str(m.version) for m in reversed(models(model.name)))
    env = lin.get("environment") or {}
    environment = (f"{env['name']}@{env.get('version')} (lock {env.get('lock')}, "
                   f"env {env.get('env_id')})" if env.get("name") else
                   f"the kernel's own Python ({env.get('python') or 'unknown'}), no lock")
    sweep = f"{lin['sweep']} trial {lin['trial']}" if lin.get("sweep") else "none"
    rows = [
        ("path", str(model.path)),
        ("run", f"{lin['run_id']} ({lin.get('run_name')}, {lin.get('run_status')} when "
                f"registered), outputs/{lin.get('source')}"),
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
    lines = [f"model {model.name}@{model.version} (versions {versions})",
             *(f"  {k:<12} {v}" for k, v in rows),
             f"  {'files':<12} {_count(len(files), 'file')}, "
             f"{format_bytes(sum(f.size for f in files))}"]
    lines += [f"    {f.sha256}  {format_bytes(f.size):>10}  {f.path}" for f in files]
    return "\n".join(lines)


def _pairs(mapping: dict[str, Any]) -> str:
    return "  ".join(f"{k}={v}" for k, v in mapping.items())


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


MODEL_COMMANDS = {
    "files": (_define_files, cmd_files), "download": (_define_download, cmd_download),
    "register": (_define_register, cmd_register), "models": (_define_models, cmd_models),
}
