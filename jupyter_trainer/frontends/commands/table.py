"""The management commands ``runs``, ``show``, ``logs``, ``cancel``, ``diff``, ``stack``,
``doctor``, ``targets`` and ``target add`` (with the sweep commands of ``tuning.commands``,
those of run files and models of ``model_commands`` and ``pools``), and the commands that
start a run again (``rerun``, ``resume``): one definition, used by ``jupyter-trainer`` and by
``%train``.

Each command has one argparse definition (``add_commands``) and one function that writes its
text to a given stream and returns an exit code (``run_command``), so a flag, an output and an
error message are the same in both front ends. Bad input raises ``SpecError`` (a one-line
message); the CLI prints it and exits 2, the magic shows it without leaving the kernel.
"""

from __future__ import annotations

import argparse
import json
import shlex
import time
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from ...api import runs as api
from ...core.errors import SpecError
from ...store import STATUSES, TERMINAL, Store
from ..views.health import stalled_of
from ..views.text import runs_table, summary_text, targets_table
from .mlflow import MLFLOW_COMMANDS
from .models import MODEL_COMMANDS
from .options import OptionParser, ParamAction, add_target_options, explain
from .pools import POOL_COMMANDS
from .sweeps import SWEEP_COMMANDS
from .tensorboard import TENSORBOARD_COMMANDS


class CommandParser(OptionParser):
    """A subcommand's parser: an error is one line that says how to see the options.

    ``word_checks`` maps a positional's ``dest`` to a check of the word given for it: a
    word that starts with '-' and is no option of the command is put to the check of the
    positional whose place it takes, so ``register RUN -m x.pt`` says what is wrong with the
    name ``-m`` instead of argparse's "the following arguments are required: path"."""

    word_checks: dict[str, Callable[[str], object]] = {}

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SpecError(
            f"{self.command_prefix()}{explain(self, message)} (add --help to see every option)"
        )

    def command_prefix(self) -> str:
        command = self.prog.partition(" ")[2]  # "runs" of "jupyter-trainer runs" or "%train runs"
        return f"{command}: " if command else ""

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if args is not None and self.word_checks:
            self._check_dashed_words(list(args))
        return super().parse_known_args(args, namespace)

    def _check_dashed_words(self, words: list[str]) -> None:
        places = [a for a in self._actions if not a.option_strings]
        given, skip = 0, False
        for word in words:
            if skip:
                skip = False
                continue
            if (
                word in ("-h", "--help")
                or not word.startswith("-")
                or word == "-"
                or self._negative_number_matcher.match(word)
            ):
                given += 1
                continue
            flag = word.partition("=")[0]
            known = [o for o in self._option_string_actions if o == flag] or [
                o for o in self._option_string_actions if o.startswith(flag) and len(flag) > 2
            ]
            if len(known) == 1:
                skip = "=" not in word and self._option_string_actions[known[0]].nargs is None
                continue
            check = self.word_checks.get(places[given].dest) if given < len(places) else None
            if check is not None:
                try:
                    check(word)
                except SpecError as exc:
                    raise SpecError(f"{self.command_prefix()}{exc}") from None


def at_least(low: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``low``."""

    def whole(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    return whole


def _define_runs(sub: Any) -> None:
    runs = sub.add_parser("runs", help="list runs, newest first")
    runs.add_argument("--status", choices=STATUSES)
    runs.add_argument("--name", help="only runs whose name contains this")
    runs.add_argument("--limit", type=int, default=20, help="at most this many (at least 1)")
    runs.add_argument("--offset", type=int, default=0, help="skip this many of the newest")
    runs.add_argument("--json", action="store_true", help="print JSON rows")


def cmd_runs(args: argparse.Namespace, out: TextIO) -> int:
    store = Store()
    rows = store.list_runs(status=args.status, name=args.name, limit=args.limit, offset=args.offset)
    if args.json:
        print(json.dumps(rows, indent=1), file=out)
    elif rows:
        print(runs_table(rows), file=out)
        for row in rows:  # a run whose state is damaged is listed as its index row has it
            if row.get("damaged"):
                print(row["damaged"], file=out)
    else:
        print(no_runs(store, args), file=out)
    return 0


def no_runs(store: Store, args: argparse.Namespace) -> str:
    """What an empty list means: an empty store, or filters that leave nothing out of it."""
    total = len(store.run_ids_on_disk())
    filters = [
        f"--status {args.status}" if args.status else "",
        f"--name {shlex.quote(args.name)}" if args.name else "",
        f"--offset {args.offset}" if args.offset else "",
    ]
    filters = [f for f in filters if f]
    if not total or not filters:
        return "no runs yet"
    which = "that filter" if len(filters) == 1 else "those filters"
    return (
        f"no runs match {' '.join(filters)} (the store {store.home} holds {total} "
        f"run{'s' * (total != 1)}; leave out {which} to list them)"
    )


def _define_show(sub: Any) -> None:
    show = sub.add_parser("show", help="a run's spec, state and summary")
    show.add_argument("run")
    show.add_argument("--json", action="store_true", help="print spec and state as JSON")


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    state = run.state  # a damaged record says so here, naming its file
    if args.json:
        stalled = [
            {"rank": e["rank"], "seconds": round(e["seconds"], 1), "last_step": e.get("last_step")}
            for e in stalled_of(state, time.time())
        ]
        print(
            json.dumps(
                {
                    "id": run.id,
                    "spec": run.spec.to_dict(),
                    "state": state,
                    **({"stalled": stalled} if stalled else {}),
                },
                indent=1,
            ),
            file=out,
        )
        return 0
    follower = run.follower()
    follower.poll()
    print(summary_text(follower, run.spec, run.outputs), file=out)
    return 0


def _define_logs(sub: Any) -> None:
    logs = sub.add_parser("logs", help="a run's per-rank logs")
    logs.add_argument("run")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the run ends"
    )
    logs.add_argument("--rank", type=int, default=None, help="only this rank (default: all)")
    logs.add_argument(
        "--tail",
        type=at_least(0),
        default=None,
        metavar="N",
        help="start with the last N lines of each rank (default: all)",
    )


def cmd_logs(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    store = run.store
    offsets: dict[int, int] = {}
    if args.rank is not None:
        run.check_rank(args.rank)
    prefixed = args.rank is None and run.spec.launch.world_size > 1
    while True:
        # read before the logs, so nothing written after it is missed; only when following,
        # so that a run whose state is damaged still shows its logs (and while following, a
        # state its supervisor is writing again reads as unfinished)
        finished = (
            not args.follow or (run.store.current_state(run.id) or {}).get("status") in TERMINAL
        )
        ranks = [args.rank] if args.rank is not None else store.ranks(run.id)
        for rank in ranks:
            first = rank not in offsets
            text, offsets[rank] = store.read_log(run.id, rank, offsets.get(rank, 0))
            lines = text.splitlines(True)
            if first and args.tail is not None:
                lines = lines[len(lines) - args.tail :] if args.tail else []
            if lines:
                prefix = f"[rank {rank}] " if prefixed else ""
                out.write("".join(prefix + line for line in lines))
                out.flush()
        if not args.follow or finished:
            return 0
        time.sleep(0.25)


def _define_cancel(sub: Any) -> None:
    sub.add_parser("cancel", help="stop every process of a run").add_argument("run")


def cmd_cancel(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    status = run.cancel()
    if status == "lost":
        print(
            f"run {run.id} lost: its supervisor was gone, and what was left of its processes "
            "was ended; `jupyter-trainer doctor --fix` records it as lost",
            file=out,
        )
    else:
        print(f"run {run.id} {status}", file=out)
    return 0


def _define_diff(sub: Any) -> None:
    diff = sub.add_parser(
        "diff",
        help="what differs between two runs",
        description="Params, launch and target, environment packages, code (a unified diff "
        "of the snapshots) and each metric's final, min and max, side by side.",
    )
    diff.add_argument("a", metavar="RUN_A")
    diff.add_argument("b", metavar="RUN_B")
    diff.add_argument("--json", action="store_true", help="print the differences as JSON")


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    found = api.diff(args.a, args.b)
    print(json.dumps(found.to_dict(), indent=1) if args.json else found.text(), file=out)
    return 0


def _define_stack(sub: Any) -> None:
    stack = sub.add_parser("stack", help="the Python stack of each rank of a running run")
    stack.add_argument("run")
    stack.add_argument("--rank", type=int, default=None, help="only this rank (default: all)")


def cmd_stack(args: argparse.Namespace, out: TextIO) -> int:
    run = api.get_run(args.run)
    if args.rank is not None:
        run.check_rank(args.rank)
    records = run.store.rank_records(run.id)
    for rank, text in sorted(run.stacks(rank=args.rank).items()):
        record = records.get(rank, {})
        print(
            f"rank {rank} ({record.get('host', 'host unknown')}, pid "
            f"{record.get('pid', 'unknown')}):",
            file=out,
        )
        print(text.rstrip("\n"), file=out)
    return 0


def _define_doctor(sub: Any) -> None:
    doctor = sub.add_parser(
        "doctor",
        help="check the run store: index, lost runs, changed snapshots, the model "
        "registry and the data caches",
        description="Report where the index, the runs' states and their snapshots disagree "
        "with the run folders, where models.db and the versions' lineage.json "
        "disagree with the model folders or their files, and what is broken in "
        "the data input caches; change nothing unless --fix is given. Exits 1 "
        "while problems remain.",
    )
    doctor.add_argument(
        "--fix",
        action="store_true",
        help="rebuild a broken index, rewrite stale rows, record lost runs, "
        "remove what a cut-short registration, deletion or download left "
        "and broken data cache entries",
    )
    doctor.add_argument(
        "--no-hash",
        action="store_true",
        help="do not hash every snapshot and model file (faster on large stores)",
    )
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")


def cmd_doctor(args: argparse.Namespace, out: TextIO) -> int:
    report = api.doctor(fix=args.fix, hashes=not args.no_hash)
    print(json.dumps(report.to_dict(), indent=1) if args.json else report.text(), file=out)
    return 1 if report.unresolved else 0


def _define_targets(sub: Any) -> None:
    sub.add_parser("targets", help="list the targets runs can go to")


def cmd_targets(args: argparse.Namespace, out: TextIO) -> int:
    from ...targets import configured_targets

    print(targets_table(configured_targets()), file=out)
    return 0


def _define_target(sub: Any) -> None:
    target = sub.add_parser("target", help="add a target to targets.toml")
    add_target_options(
        target.add_subparsers(
            dest="action", required=True, metavar="ACTION", parser_class=CommandParser
        ).add_parser("add", help="validate a target and save it in targets.toml")
    )


def cmd_target(args: argparse.Namespace, out: TextIO) -> int:
    from ...targets.registry import add_target, parse_settings

    path = add_target(args.name, args.kind, replace=args.replace, **parse_settings(args.settings))
    print(f"target {args.name!r} saved in {path}", file=out)
    return 0


COMMANDS: dict[str, tuple[Callable[[Any], None], Callable[[argparse.Namespace, TextIO], int]]] = {
    "runs": (_define_runs, cmd_runs),
    "show": (_define_show, cmd_show),
    "logs": (_define_logs, cmd_logs),
    "cancel": (_define_cancel, cmd_cancel),
    "diff": (_define_diff, cmd_diff),
    "stack": (_define_stack, cmd_stack),
    "doctor": (_define_doctor, cmd_doctor),
    "targets": (_define_targets, cmd_targets),
    "target": (_define_target, cmd_target),
    **SWEEP_COMMANDS,
    **MODEL_COMMANDS,
    **TENSORBOARD_COMMANDS,
    **MLFLOW_COMMANDS,
    **POOL_COMMANDS,
}


# Commands that start a run: each front end follows the new run its own way (the CLI like
# ``submit``, the magic like ``%%train``).
STARTERS = {
    "rerun": "start a run again: its snapshot, environment, params and launch",
    "resume": "start a run again from its latest checkpoint",
}


def _define_again(sub: Any, name: str) -> None:
    again = sub.add_parser(name, help=STARTERS[name])
    again.add_argument("run")
    again.add_argument(
        "-p",
        "--param",
        action=ParamAction,
        default=[],
        metavar="KEY=VALUE",
        help="change one of the run's params (repeatable)",
    )
    again.add_argument(
        "--target", default=None, help="where to run it (default: where the run ran)"
    )
    wait = again.add_mutually_exclusive_group()
    wait.add_argument(
        "--wait",
        action="store_true",
        default=None,
        help="follow the new run to its end (the default of %%train); fail if it fails",
    )
    wait.add_argument(
        "--no-wait",
        dest="wait",
        action="store_false",
        help="return once the new run has started (the default of jupyter-trainer)",
    )


def start_again(args: argparse.Namespace, script_args: Sequence[str] = ()) -> api.Run:
    """Start the run that parsed ``rerun`` or ``resume`` arguments ask for."""
    if script_args:
        raise SpecError(
            f"{args.command} takes no script arguments after `--`: the run's own "
            "arguments are part of its snapshot"
        )
    again = api.resume if args.command == "resume" else api.rerun
    return again(args.run, args.param, args.target)


def add_commands(sub: Any) -> None:
    """Add every command to ``sub`` (an ``add_subparsers()`` of ``CommandParser``)."""
    for define, _ in COMMANDS.values():
        define(sub)
    for name in STARTERS:
        _define_again(sub, name)


def run_command(args: argparse.Namespace, out: TextIO) -> int:
    """Run the parsed management command ``args.command``, writing its text to ``out``."""
    return COMMANDS[args.command][1](args, out)
