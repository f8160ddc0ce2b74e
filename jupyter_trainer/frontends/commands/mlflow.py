"""The ``mlflow`` command of ``jupyter-trainer`` and ``%train``: ``mlflow sync RUN [--uri URI]
[--experiment NAME] [--json]``."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from ...core.errors import SpecError
from ...mirrors.mlflow.sync import sync
from .parser import Subparsers, handles, verbs


def define_mlflow(sub: Subparsers, name: str) -> None:
    parser = sub.add_parser(
        name,
        help="mirror a run to an MLflow tracking server: mlflow sync RUN [--uri URI]",
        description="Write the run into one MLflow run (made by the first sync, updated by "
        "the next): params, every rank's metrics with their steps, tags, outputs/ "
        "as artifacts and the run's registered models. A run submitted with "
        "--mlflow URI is mirrored when it ends; this does it again, and records the "
        "result in the run's state.",
    )
    handles(parser, cmd_mlflow)  # no verb: says which
    actions = verbs(parser, required=False)
    sync_parser = actions.add_parser("sync", help="mirror RUN to MLflow now")
    sync_parser.add_argument("run")
    sync_parser.add_argument(
        "--uri",
        default=None,
        help="the tracking URI (default: the run's --mlflow, else $MLFLOW_TRACKING_URI)",
    )
    sync_parser.add_argument(
        "--experiment",
        default=None,
        metavar="NAME",
        help="the MLflow experiment of a first sync (default: the run's "
        "name; unnamed runs: $MLFLOW_EXPERIMENT_NAME, else "
        "jupyter_trainer)",
    )
    sync_parser.add_argument("--json", action="store_true", help="print the record as JSON")
    handles(sync_parser, cmd_mlflow)


def cmd_mlflow(args: argparse.Namespace, out: TextIO) -> int:
    if args.action != "sync":
        raise SpecError("mlflow: say what to do: `mlflow sync RUN [--uri URI]`")
    found = sync(args.run, args.uri, experiment=args.experiment)
    if args.json:
        print(json.dumps(found, indent=1), file=out)
    elif found["status"] == "synced":
        models = ", ".join(found.get("models") or []) or "none"
        print(
            f"{args.run} -> MLflow run {found['mlflow_run_id']} in experiment "
            f"{found['experiment']!r} at {found['uri']}: {found.get('params', 0)} params, "
            f"{found.get('metrics', 0)} metric values, {found.get('artifacts', 0)} output "
            f"files, models {models}",
            file=out,
        )
    else:
        print(
            f"{args.run}: mirroring to MLflow at {found['uri']} failed: {found['error']}", file=out
        )
    return 0 if found["status"] == "synced" else 1
