"""The commands of Azure ML SDK v2 users, in ``az ml``'s words:

- ``azure job create --file job.yml [--set KEY=VALUE ...] [--stream]`` runs a v2 command or
  sweep job file as ``az ml job create --file`` does, and prints the job as JSON (``--stream``
  follows its output to the end, as ``az ml job create --stream``);
- ``azure job show|stream|cancel|download --name NAME``, as ``az ml job`` has them;
- ``azure check PATH`` lists every v2 call of a notebook, script, job YAML or folder of them
  and what it will do here (``azure/ai/ml/check.py``), before anything runs; it exits with 1
  when something would be refused or would break.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, TextIO

from ...core.printable import printable
from ..views.text import columns
from .parser import Subparsers, handles, verbs


def define_azure(sub: Subparsers, name: str) -> None:
    noun = sub.add_parser(
        name, help="Azure ML SDK v2 job files and notebooks: run a job YAML, check what will run"
    )
    nouns = verbs(noun, required=True)
    job = nouns.add_parser(
        "job",
        help="v2 jobs, as `az ml job` runs them",
        epilog="create --file FILE [--set KEY=VALUE ...] [--stream]; show, stream, cancel "
        "--name NAME; download --name NAME [--output-name OUTPUT] [--download-path DIR] [--all]",
    )
    actions = verbs(job, required=True)
    create = actions.add_parser("create", help="run a v2 command or sweep job file")
    create.add_argument("--file", "-f", required=True, help="the job's YAML file")
    create.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a key of the file (compute=local, inputs.epochs=2), repeatable",
    )
    create.add_argument("--name", "-n", help="accepted for az's sake: a run here names itself")
    create.add_argument("--stream", action="store_true", help="follow the job's output to the end")
    handles(create, cmd_azure_job_create)
    for verb, text, handler in (
        ("show", "the job as JSON", cmd_azure_job_show),
        ("stream", "follow the job's output to the end", cmd_azure_job_stream),
        ("cancel", "cancel the job", cmd_azure_job_cancel),
        ("download", "download the job's outputs and logs", cmd_azure_job_download),
    ):
        found = actions.add_parser(verb, help=text)
        found.add_argument("--name", "-n", required=True, help="the job's name (its run id)")
        if verb == "download":
            found.add_argument("--output-name", help="one named output only")
            found.add_argument("--download-path", default=".", help="where to (default: .)")
            found.add_argument("--all", action="store_true", help="every output and the logs")
        handles(found, handler)
    check = nouns.add_parser(
        "check", help="every v2 call of a notebook, script or job YAML: works, differs, refused"
    )
    check.add_argument("path", help="a notebook, a Python file, a job YAML, or a folder of them")
    check.add_argument("--json", action="store_true", help="print the findings as JSON")
    handles(check, cmd_azure_check)


def _client() -> Any:
    from ...azure.ai.ml import MLClient

    return MLClient.from_config()


def _as_json(job: Any) -> dict[str, Any]:
    return {
        "name": job.name,
        "type": job.type,
        "status": job.status,
        "display_name": job.display_name,
        "experiment_name": job.experiment_name,
        "compute": job.compute,
        "services": {"Studio": {"endpoint": job.studio_url}},
        "properties": job.properties,
    }


def cmd_azure_job_create(args: argparse.Namespace, out: TextIO) -> int:
    from ...azure.ai.ml import load_job

    client = _client()
    job = client.jobs.create_or_update(load_job(Path(args.file), params_override=args.set))
    print(json.dumps(_as_json(job), indent=2), file=out, flush=True)
    if args.stream:
        client.jobs.stream(job.name, out=out)
    return 0


def cmd_azure_job_show(args: argparse.Namespace, out: TextIO) -> int:
    print(json.dumps(_as_json(_client().jobs.get(args.name)), indent=2), file=out)
    return 0


def cmd_azure_job_stream(args: argparse.Namespace, out: TextIO) -> int:
    _client().jobs.stream(args.name, out=out)
    return 0


def cmd_azure_job_cancel(args: argparse.Namespace, out: TextIO) -> int:
    _client().jobs.cancel(args.name)
    print(f"canceled {args.name}", file=out)
    return 0


def cmd_azure_job_download(args: argparse.Namespace, out: TextIO) -> int:
    _client().jobs.download(
        args.name, download_path=args.download_path, output_name=args.output_name, all=args.all
    )
    print(f"downloaded {args.name} to {args.download_path}", file=out)
    return 0


def cmd_azure_check(args: argparse.Namespace, out: TextIO) -> int:
    from ...azure.ai.ml.check import BREAKS, REFUSED, check_path, summary

    findings = check_path(Path(args.path).expanduser())
    counts = summary(findings)
    bad = counts[REFUSED] + counts[BREAKS]
    if args.json:
        print(
            json.dumps({"findings": [f.as_dict() for f in findings], "summary": counts}, indent=1),
            file=out,
        )
        return 1 if bad else 0
    if not findings:
        print(f"no Azure ML SDK v2 call in {args.path}", file=out)
        return 0
    rows = [
        (f"{printable(f.path)}:{f.line}", printable(f.name), f.verdict, printable(f.note))
        for f in findings
    ]
    print(columns(("where", "v2 call", "here", "what to know"), rows), file=out)
    print(
        f"\n{counts['works']} work, {counts['works differently']} work differently, "
        f"{counts[BREAKS]} will break, {counts[REFUSED]} refused (docs/azure-v2.md)",
        file=out,
    )
    return 1 if bad else 0
