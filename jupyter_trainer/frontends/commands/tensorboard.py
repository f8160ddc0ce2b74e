"""The ``tensorboard`` command of ``jupyter-trainer`` and ``%train``. ``%train tensorboard``
without ``--logdir`` does not block: the magic keeps the server in the kernel
(``background``) and shows it in the notebook."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from typing import Any, TextIO

from ...core.errors import SpecError, StoreError
from ...mirrors.tensorboard.export import Exporter, writable_logdir
from ...mirrors.tensorboard.server import TensorBoardServer, shared_server, stop_shared
from .parser import Subparsers, handles


def define_tensorboard(sub: Subparsers, name: str) -> None:
    board = sub.add_parser(
        name,
        help="runs' metrics in TensorBoard: export them, or serve them",
        description="Write each run's metrics, one folder per rank, as TensorBoard event files, "
        "with its params as hparams. With --logdir, write them there and exit "
        "(--follow: keep appending until the runs end). Without it, write them "
        "into the run store, start TensorBoard over them, print its address and "
        "keep live runs' files growing until Ctrl-C. Exporting again writes only "
        "what is new.",
    )
    board.add_argument("runs", nargs="*", metavar="RUN")
    board.add_argument(
        "--logdir",
        metavar="DIR",
        default=None,
        help="write the event files under DIR/RUN/ and start no TensorBoard",
    )
    board.add_argument(
        "--follow",
        action="store_true",
        help="with --logdir: keep appending live runs' values until they end",
    )
    board.add_argument(
        "--host",
        default="127.0.0.1",
        help="the address TensorBoard listens on (default 127.0.0.1: this machine only)",
    )
    board.add_argument(
        "--port", type=int, default=0, help="TensorBoard's port (default 0: a free one)"
    )
    board.add_argument(
        "--stop",
        action="store_true",
        help="stop the TensorBoard that %%train tensorboard started in this kernel",
    )
    handles(board, cmd_tensorboard)


def cmd_tensorboard(args: argparse.Namespace, out: TextIO) -> int:
    if args.stop:
        print(
            "TensorBoard stopped" if stop_shared() else "no TensorBoard was running here", file=out
        )
        return 0
    if args.logdir is None:
        return _serve(args, out)
    if not args.runs:
        raise SpecError("tensorboard: name at least one RUN (`jupyter-trainer runs` lists them)")
    exporter = Exporter(args.runs, args.logdir)  # each run exists, or nothing is written
    writable_logdir(args.logdir)
    try:
        return _export(exporter, args.follow, out)
    except BrokenPipeError:  # our own output's reader went away: not the folder's fault
        raise
    except OSError as exc:  # the folder went away or filled up while exporting
        raise StoreError(
            f"tensorboard --logdir {exporter.logdir}: writing the event files "
            f"failed ({exc.strerror or exc})"
        ) from None


def _export(exporter: Exporter, follow: bool, out: TextIO) -> int:
    for run_id, count in exporter.export().items():
        print(
            f"{run_id}: {count} values written to {exporter.logdir / run_id}", file=out, flush=True
        )
    if follow and not exporter.finished:
        totals = dict.fromkeys(exporter.runs, 0)
        while not exporter.finished:
            time.sleep(1.0)
            for run_id, count in exporter.export().items():
                totals[run_id] += count
        for run_id, count in totals.items():
            print(f"{run_id} ended: {count} more values written", file=out)
    return 0


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # as Ctrl-C: a kill, a closed terminal


def _serve(args: argparse.Namespace, out: TextIO) -> int:
    """TensorBoard until Ctrl-C, SIGTERM or SIGHUP; then nothing of it is left running (and
    on a SIGKILL of this process, TensorBoard ends itself: see ``tied``)."""
    server = TensorBoardServer(args.runs, host=args.host, port=args.port)
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOP_SIGNALS} if main else {}
    try:
        with server:
            print(
                f"TensorBoard at {server.url} ({len(server.runs)} run"
                f"{'s' if len(server.runs) != 1 else ''}; Ctrl-C stops it)",
                file=out,
                flush=True,
            )
            code = server.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"TensorBoard exited with code {code}", file=out)
    return 1


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def background(args: argparse.Namespace) -> TensorBoardServer:
    """``%train tensorboard RUN...``: the kernel's TensorBoard, with these runs added."""
    return shared_server(args.runs, host=args.host, port=args.port)
