"""``jupyter-trainer`` (also ``jupyter trainer``): submit, list, follow and cancel runs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Sequence

from . import api
from .errors import RunFailed, TrainerError
from .monitor import TextMonitor
from .monitor.text import runs_table, source_line, summary_text, targets_table
from .options import add_run_options, add_target_options, parse_with_settings
from .store import STATUSES, Store


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupyter-trainer",
        description="Distributed PyTorch training runs: submit, list, follow, cancel.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    submit = sub.add_parser("submit", help="run a script as a job",
                            usage="jupyter-trainer submit SCRIPT [options] [-- script args]")
    submit.add_argument("script", help="the entry script")
    add_run_options(submit)
    submit.add_argument("--wait", action="store_true",
                        help="follow the run to its end; exit non-zero if it fails")

    runs = sub.add_parser("runs", help="list runs, newest first")
    runs.add_argument("--status", choices=STATUSES)
    runs.add_argument("--name", help="only runs whose name contains this")
    runs.add_argument("--limit", type=int, default=20, help="at most this many (at least 1)")
    runs.add_argument("--offset", type=int, default=0, help="skip this many of the newest")
    runs.add_argument("--json", action="store_true", help="print JSON rows")

    show = sub.add_parser("show", help="a run's spec, state and summary")
    show.add_argument("run")
    show.add_argument("--json", action="store_true", help="print spec and state as JSON")

    logs = sub.add_parser("logs", help="a run's per-rank logs")
    logs.add_argument("run")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing until the run ends")
    logs.add_argument("--rank", type=int, default=None, help="only this rank (default: all)")

    cancel = sub.add_parser("cancel", help="stop every process of a run")
    cancel.add_argument("run")

    doctor = sub.add_parser(
        "doctor", help="check the run store: index, lost runs, changed snapshots",
        description="Report where the index, the runs' states and their snapshots disagree "
                    "with the run folders; change nothing unless --fix is given. Exits 1 "
                    "while problems remain.")
    doctor.add_argument("--fix", action="store_true",
                        help="rebuild a broken index, rewrite stale rows, record lost runs")
    doctor.add_argument("--no-hash", action="store_true",
                        help="do not hash every snapshot (faster on large stores)")
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")

    sub.add_parser("targets", help="list the targets runs can go to")
    target = sub.add_parser("target", help="add a target to targets.toml")
    add_target_options(target.add_subparsers(dest="action", required=True, metavar="ACTION")
                       .add_parser("add", help="validate a target and save it in targets.toml"))

    env = sub.add_parser("env", help="list, show, export, build or prune environments",
                         usage="jupyter-trainer env [list | show NAME | export NAME "
                               "[--requirements] | build NAME | prune [--dry-run]]")
    env.add_argument("action", nargs="?", default="list",
                     choices=("list", "show", "export", "build", "prune"))
    env.add_argument("name", nargs="?", help="NAME or NAME@VERSION")
    env.add_argument("--requirements", action="store_true",
                     help="export: the requirements as defined, not the lock")
    env.add_argument("--dry-run", action="store_true",
                     help="prune: list what would be removed, remove nothing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1:]
    args = parse_with_settings(build_parser(), argv)
    args.script_args = script_args
    try:
        return COMMANDS[args.command](args)
    except RunFailed as exc:
        print(f"jupyter-trainer: {exc}", file=sys.stderr)
        return 1
    except TrainerError as exc:
        print(f"jupyter-trainer: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def cmd_submit(args: argparse.Namespace) -> int:
    from .options import submit_kwargs

    run = api.submit(script=args.script, args=args.script_args, **submit_kwargs(args))
    print(run.id, flush=True)
    source = source_line(run.spec)
    if source:
        print(source, file=sys.stderr, flush=True)
    if not args.wait:
        return 0
    try:
        monitor = TextMonitor(run, out=sys.stderr)
        monitor.follow()
    except KeyboardInterrupt:
        print(f"interrupted: canceling run {run.id}", file=sys.stderr)
        run.cancel(wait=True, timeout=15)
        raise
    print(monitor.summary(), file=sys.stderr)
    run.raise_for_status()
    return 0


def cmd_runs(args: argparse.Namespace) -> int:
    rows = Store().list_runs(status=args.status, name=args.name, limit=args.limit,
                             offset=args.offset)
    print(json.dumps(rows, indent=1) if args.json else runs_table(rows))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    run = api.get_run(args.run)
    if args.json:
        print(json.dumps({"id": run.id, "spec": run.spec.to_dict(), "state": run.state}, indent=1))
        return 0
    follower = run.follower()
    follower.poll()
    print(summary_text(follower, run.spec, run.outputs))
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    run = api.get_run(args.run)
    store = run.store
    offsets: dict[int, int] = {}
    if args.rank is not None:
        run.check_rank(args.rank)
    prefixed = args.rank is None and run.spec.launch.world_size > 1
    while True:
        finished = run.done  # read before the logs, so nothing written after it is missed
        ranks = [args.rank] if args.rank is not None else store.ranks(run.id)
        for rank in ranks:
            text, offsets[rank] = store.read_log(run.id, rank, offsets.get(rank, 0))
            if text:
                prefix = f"[rank {rank}] " if prefixed else ""
                sys.stdout.write("".join(prefix + line for line in text.splitlines(True)))
                sys.stdout.flush()
        if not args.follow or finished:
            return 0
        time.sleep(0.25)


def cmd_cancel(args: argparse.Namespace) -> int:
    run = api.get_run(args.run)
    run.cancel()
    print(f"{run.id} {run.status}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    report = api.doctor(fix=args.fix, hashes=not args.no_hash)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.text())
    return 1 if report.unresolved else 0


def cmd_targets(args: argparse.Namespace) -> int:
    from .targets import configured_targets

    print(targets_table(configured_targets()))
    return 0


def cmd_target(args: argparse.Namespace) -> int:
    from .targets.registry import add_target, parse_settings

    path = add_target(args.name, args.kind, replace=args.replace, **parse_settings(args.settings))
    print(f"target {args.name!r} saved in {path}")
    return 0


def cmd_env(args: argparse.Namespace) -> int:
    from . import environment

    if args.dry_run and args.action != "prune":
        print("jupyter-trainer env: --dry-run goes with prune", file=sys.stderr)
        return 2
    if args.action == "list":
        print(environment.environments_table(environment.list_environments()))
        return 0
    if args.action == "prune":
        if args.name:
            print("jupyter-trainer env prune takes no NAME: it keeps every name's latest "
                  "version and what unfinished runs use", file=sys.stderr)
            return 2
        rows = api.prune_environments(dry_run=args.dry_run)
        print(environment.prune_text(rows, dry_run=args.dry_run))
        return 0
    if not args.name:
        print(f"jupyter-trainer env {args.action}: give the environment's NAME", file=sys.stderr)
        return 2
    if args.requirements and args.action != "export":
        print("jupyter-trainer env: --requirements goes with export", file=sys.stderr)
        return 2
    if args.action == "show":
        print(environment.show_text(args.name))
    elif args.action == "export":
        sys.stdout.write(environment.export_text(args.name, requirements=args.requirements))
    else:
        built = environment.build_environment(args.name)
        print(("built in %.1f s: " % built["build_seconds"] if built["built"] else "already built: ")
              + built["python"])
    return 0


COMMANDS = {"submit": cmd_submit, "runs": cmd_runs, "show": cmd_show, "logs": cmd_logs,
            "cancel": cmd_cancel, "doctor": cmd_doctor, "targets": cmd_targets,
            "target": cmd_target, "env": cmd_env}


if __name__ == "__main__":
    sys.exit(main())
