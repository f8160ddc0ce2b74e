"""``%%train`` and ``%train``: parse the line, call the Python API, display. Nothing else."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import Image, display

from ...api import runs as api
from ...api.dry_run import DryRun
from ...api.sweeps import functions as sweep_api
from ...core.errors import RunCanceled, RunFailed, SpecError
from ..commands.check import check_before
from ..commands.options import (
    HelpRequested,
    cell_parser,
    script_parser,
    split_line,
    submit_kwargs,
)
from ..commands.parser import CommandParser
from ..commands.sweep_options import is_sweep, sweep_kwargs
from ..commands.table import add_commands, is_start, parse_command, run_command, start_command
from ..views.text import source_line
from ..widgets import monitor_mode, show
from ..widgets.check import FoldedCheck
from ..widgets.mode import takes_input
from .debug_offer import wait_offering_debugger
from .session import run_session_cell, session_line

# What a run or sweep canceled by the notebook's Stop button records as its reason.
STOP_REASON = "stopped from the notebook (Stop button)"
# How long an interrupted cell waits for the shutdown request that follows the interrupt
# jupyter_client sends before a restart or shutdown (it comes within milliseconds).
SHUTDOWN_GRACE_S = 2.0

# argparse formats usage with %: "%%" is one "%"
MAGIC_USAGE = """\
%(prog)s COMMAND [options]     (%(prog)s COMMAND --help: a command's options)
       %(prog)s path/to/script.py [options] [-- script args]   run a script as a job
       %%%%train [options]     run the cell as a job (%%%%train --help lists the options)"""


def _management_parser() -> CommandParser:
    """The parser of ``%train``: the command table's commands, and ``attach``, which only a
    notebook has; its help is what ``%train`` alone, ``%train help`` and ``--help`` show."""
    parser = CommandParser(
        prog="%train",
        usage=MAGIC_USAGE,
        description="Manage runs, sweeps and models from the notebook; the same commands as "
        "jupyter-trainer.",
    )
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        metavar="COMMAND",
        parser_class=CommandParser,
        prog=parser.prog,  # a command's prog is "%train COMMAND", not the usage above
    )
    attach = sub.add_parser("attach", help="follow a run or a sweep, live or finished")
    attach.add_argument("run", metavar="RUN|SWEEP")
    add_commands(sub)
    return parser


@magics_class
class TrainMagics(Magics):
    @line_cell_magic
    def train(self, line: str, cell: str | None = None) -> Any:
        try:
            if cell is None:
                return self._line(line)
            return self._cell(line, cell)
        except HelpRequested as shown:
            print(shown.text)
            return None

    def _cell(self, line: str, cell: str) -> Any:
        words, rest = split_line(line)
        if rest:
            raise SpecError("script arguments after `--` only go with %train path/to/script.py")
        opts = cell_parser().parse_args(words)
        mode = monitor_mode()
        shell = self.shell
        if shell is None:  # a magic registered outside a shell: nothing to take the cell from
            raise SpecError("%%train runs a cell of an IPython shell; there is none here")
        code = shell.transform_cell(cell)
        history = list(shell.user_ns.get("In", []))
        origin = {**_origin(shell), "first_line": 2}  # the cell's line 1 is %%train
        if opts.session is not None:
            return run_session_cell(shell, opts, code, origin)
        refuse_debug_without_input(opts.debug)
        if opts.check and not opts.dry_run:
            check_before(opts, sys.stdout, FoldedCheck() if mode == "widget" else None)
        if is_sweep(opts):
            if opts.form:
                raise SpecError(
                    "--form does not go with --sweep: a sweep's values come from "
                    "its search space; leave one of them out"
                )
            sweep = sweep_api.sweep(
                code,
                namespace=shell.user_ns,
                history=history,
                origin=origin,
                **sweep_kwargs(opts),
                **submit_kwargs(opts),
            )
            return self._watch_sweep(sweep, mode, wait=not opts.no_wait)
        if opts.dry_run:  # shown as the cell's value; nothing to wait for or watch
            if opts.form:
                raise SpecError(
                    "--form does not go with --dry-run: leave out --form to see "
                    "what these options would run"
                )
            return api.submit(
                code,
                namespace=shell.user_ns,
                history=history,
                origin=origin,
                dry_run=True,
                **submit_kwargs(opts),
            )
        if opts.form and mode == "widget":
            from ..widgets.form import LaunchForm
            from ..widgets.widget import RunMonitor

            form = LaunchForm(
                code,
                shell.user_ns,
                submit_kwargs(opts),
                history=history,
                origin=origin,
                submit=api.submit,
            )
            display(RunMonitor(launcher=form))
            return None
        run = _run_of(
            api.submit(
                code,
                namespace=shell.user_ns,
                history=history,
                origin=origin,
                **submit_kwargs(opts),
            )
        )
        _say_source(run)
        if opts.no_wait:
            if mode == "widget":
                display(_widget(run))
                self._shown(run)
                return None
            print(f"run {run.id} started; follow it with %train attach {run.id}")
            return run
        return self._watch(run, mode)

    def _watch(self, run: api.Run, mode: str | None = None) -> api.Run | None:
        widget = None
        try:
            if (mode or monitor_mode()) == "widget":
                widget = _widget(run)
                display(widget)
                wait_offering_debugger(run)
                run.wait(raise_on_failure=False)  # its MLflow mirror too, as headless
            else:
                # the raised RunFailed shows a failed rank's traceback: headless (papermill,
                # nbconvert) the error is what a CI log and a failed notebook show first
                show(run, traceback=False)
                run.wait(raise_on_failure=False)  # and its MLflow mirror, with --mlflow
        except KeyboardInterrupt:
            if _kernel_is_shutting_down(self.shell):
                _say_left_running("run", run.id)
                return None
            # The notebook's Stop button: end the run, and fail the cell with one line (the
            # interrupt's own traceback would only show this package's frames).
            print(
                f"Stop button: canceling run {run.id} (a kernel restart or shutdown would "
                "leave it running)",
                file=sys.stderr,
                flush=True,
            )
            run.cancel(wait=True, timeout=15, reason=STOP_REASON)
            raise RunCanceled(
                f"run {run.id} {run.status}: the cell was interrupted (the notebook's Stop button)",
                run_id=run.id,
                status=run.status,
            ) from None
        if widget is not None:
            widget.wait_final(timeout=10)
        try:
            run.raise_for_status()
        except RunFailed as failed:
            failed.traceback_shown = widget is not None  # the widget's banner shows it
            raise
        if widget is None:
            return run
        self._shown(run)
        return None

    def _watch_sweep(self, sweep: Any, mode: str, wait: bool = True, attached: bool = False) -> Any:
        from ..widgets.sweep import show_sweep

        try:
            if mode == "widget":
                from ..widgets.sweep_widget import SweepMonitor

                display(SweepMonitor(sweep))
                if wait:
                    while not sweep.done and sweep.status != "interrupted":
                        time.sleep(0.5)
            elif wait:
                show_sweep(sweep)
            else:
                print(f"sweep {sweep.id} started; follow it with %train attach {sweep.id}")
                return sweep
            if wait and not attached:  # a sweep the cell started fails it when canceled or
                sweep.raise_for_status()  # failed, as a run does
        except KeyboardInterrupt:
            if _kernel_is_shutting_down(self.shell):
                _say_left_running("sweep", sweep.id)
                return None
            print(
                f"Stop button: canceling sweep {sweep.id} and its trials (a kernel restart "
                "or shutdown would leave it running)",
                file=sys.stderr,
                flush=True,
            )
            sweep.cancel(reason=STOP_REASON)
            raise RunCanceled(
                f"sweep {sweep.id} {sweep.status}: the cell was interrupted (the "
                "notebook's Stop button)",
                run_id=sweep.id,
                status=sweep.status,
            ) from None
        if mode != "widget":
            return sweep
        self._shown(sweep)
        return None

    def _shown(self, value: Any) -> None:
        """Make ``value`` (the run or sweep a widget above shows) the cell's value: ``_``,
        ``Out[n]`` and ``_n`` hold it, as they hold any cell's result, in every front end,
        while nothing is echoed under the widget (a ``<Run ...>`` there would say nothing
        more). The widget is shown before the cell's end, so it cannot be the echo itself."""
        hook = getattr(self.shell, "displayhook", None)
        if hook is not None and hasattr(hook, "update_user_ns"):
            hook.update_user_ns(value)

    def _started(self, opts: argparse.Namespace, what: Any) -> Any:
        """Follow what a starting command of the table started, as ``%%train`` would."""
        if isinstance(what, DryRun):
            return what  # shown as the value
        if not isinstance(what, api.Run):
            return self._watch_sweep(what, monitor_mode(), wait=opts.wait is not False)
        if opts.command == "submit":
            _say_source(what)
        if opts.wait is False:
            print(f"run {what.id} started; follow it with %train attach {what.id}")
            return what
        return self._watch(what)

    def _line(self, line: str) -> Any:
        words, rest = split_line(line)
        if not words or words[0] in ("help", "-h", "--help"):
            print(_management_parser().format_help(), end="")
            return None
        if words[0].endswith(".py") or os.path.isfile(os.path.expanduser(words[0])):
            opts = script_parser("%train").parse_args(words)
            refuse_debug_without_input(opts.debug)
            if is_sweep(opts):
                sweep = sweep_api.sweep(
                    script=opts.script,
                    args=rest,
                    origin=_origin(self.shell),
                    **sweep_kwargs(opts),
                    **submit_kwargs(opts),
                )
                return self._watch_sweep(sweep, monitor_mode())
            run = api.submit(
                script=opts.script,
                args=rest,
                origin=_origin(self.shell),
                dry_run=opts.dry_run,
                **submit_kwargs(opts),
            )
            if isinstance(run, DryRun):
                return run  # shown as the value
            _say_source(run)
            return self._watch(run)
        opts = parse_command(_management_parser(), words)
        refuse_debug_without_input(opts.command == "debug" or getattr(opts, "debug", False))
        if is_start(opts):
            return self._started(opts, start_command(opts, rest, _origin(self.shell)))
        if opts.command == "diff" and not opts.json:
            _show_diff(api.diff(opts.a, opts.b))
            return None
        if opts.command == "tensorboard" and opts.logdir is None and not opts.stop:
            _show_tensorboard(opts)
            return None
        if opts.command == "session":
            done, value = session_line(self.shell, opts, _origin(self.shell))
            if done:
                return value
        if opts.command != "attach":
            run_command(opts, sys.stdout)
            return None
        if sweep_api.is_sweep_id(opts.run):
            sweep = sweep_api.get_sweep(opts.run)
            return self._watch_sweep(
                sweep, monitor_mode(), wait=monitor_mode() != "widget", attached=True
            )
        run = api.get_run(opts.run)
        if monitor_mode() == "widget":
            display(_widget(run))  # follows the run in the background
            self._shown(run)
            return None
        show(run)
        return run


def refuse_debug_without_input(debug: bool) -> None:
    """A debugger needs a person to answer it: refuse one where nobody can (papermill)."""
    if debug and not takes_input():
        raise SpecError(
            "--debug and %train debug need a person to answer the debugger, and this "
            "notebook runs without input (papermill, nbconvert): leave out --debug here, and "
            "run the cell in JupyterLab or Notebook, or `jupyter-trainer debug RUN` in a "
            "terminal, to debug it"
        )


def _kernel_is_shutting_down(shell: Any, grace: float = SHUTDOWN_GRACE_S) -> bool:
    """Tell the Stop button from the interrupt that precedes a shutdown.

    jupyter_client interrupts a kernel before every restart and every shutdown (the menu's
    Restart and Shut Down, closing a notebook, the server stopping, idle culling), then sends
    ``shutdown_request`` on the control channel, which ipykernel answers on its control
    thread by setting ``shell.exit_now``. So after an interrupt the cell waits up to
    ``grace`` seconds for that flag: it is a shutdown when the flag is set (or the kernel is
    killed meanwhile), the Stop button otherwise. A second interrupt is the Stop button.
    """
    deadline = time.monotonic() + grace
    try:
        while time.monotonic() < deadline:
            if getattr(shell, "exit_now", False):
                return True
            time.sleep(0.02)
    except KeyboardInterrupt:
        return False
    return bool(getattr(shell, "exit_now", False))


def _say_left_running(kind: str, ident: str) -> None:
    print(
        f"the kernel is shutting down: {kind} {ident} goes on; follow it after the restart "
        f"with %train attach {ident}",
        file=sys.stderr,
        flush=True,
    )


def _show_tensorboard(opts: argparse.Namespace) -> None:
    """The kernel's TensorBoard over the runs: its address, then TensorBoard itself."""
    from IPython.display import IFrame

    from ..commands.tensorboard import background

    server = background(opts)
    print(
        f"TensorBoard at {server.url} with {', '.join(server.runs)} "
        "(`%train tensorboard --stop` ends it)",
        flush=True,
    )
    display(IFrame(server.url, width="100%", height=800))


def _show_diff(found: Any) -> None:
    """The differences as text, then both runs' metrics overlaid, one chart per metric."""
    print(found.text(), flush=True)
    png = found.chart_png()
    if png is not None:
        display(Image(data=png, format="png"))


def _say_source(run: api.Run) -> None:
    line = source_line(run.spec)
    if line:
        print(line, flush=True)


def _run_of(started: api.Run | DryRun) -> api.Run:
    """What ``api.submit`` without ``dry_run`` returns: a run."""
    if isinstance(started, DryRun):
        raise TypeError("submit() without dry_run=True returned a dry run")
    return started


def _widget(run: api.Run) -> Any:
    from ..widgets.widget import RunMonitor

    return RunMonitor(run)


def _origin(shell: Any) -> dict[str, Any]:
    """Where a run comes from: the working directory, the notebook, and the number of the
    cell (its ``In [n]``; tracebacks then cite ``Cell In [n], line m``)."""
    origin: dict[str, Any] = {"cwd": os.getcwd()}
    running = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(running, "execution_count", None)
    if isinstance(count, int):
        origin["cell"] = count  # the shell's own count is already the next
    if os.environ.get("JPY_SESSION_NAME"):
        origin["notebook"] = os.environ["JPY_SESSION_NAME"]
    return origin
