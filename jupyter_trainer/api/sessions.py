"""Live sessions: ranks that stay alive across cells, each with its own namespace, joined in
one process group. ``start_session``, ``session``, ``sessions`` and the ``Session`` handle.

A session is a run (its name is the session's) whose ranks run the cell loop of
``rankside/rank/session_loop.py`` instead of an entry script, so it starts, is listed,
followed, canceled and cleaned up as any run is, on any target. A cell travels as a run's
code does: capture renders it (``capture/cellscript.py``) into the run's ``session/`` folder,
with the notebook values it reads; its output and metrics come back by the rank logs and
events every view follows. ``Session.save`` writes the cells it ran as a run of their own.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TextIO

from ..core.errors import SessionEnded, SpecError
from ..core.files import write_atomic
from ..core.spec import DEFAULT_STALL_TIMEOUT, DEFAULT_SYSTEM_INTERVAL
from ..store import ACTIVE, TERMINAL, Store
from ..store.owners import Identity
from ..store.sessions import SessionFiles, client_socket
from .runs import Run, submit
from .session_replies import dead_text, raise_failures
from .session_restart import HOLD, check_none_dead, restart_ranks
from .session_save import HELD_SCRIPT_TEXT, SCRIPT, SCRIPT_TEXT, placement

DEFAULT_IDLE = 3600.0  # seconds without a request before a session ends itself
DEFAULT_MAX_BYTES = 64 << 20  # the largest value pull or push sends, pickled
INTERRUPT_GRACE = 10.0  # seconds the ranks get to answer an interrupt
_found: dict[tuple[str, str], Session] = {}  # (home, name) -> the session found there last
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def start_session(
    name: str,
    *,
    procs: int = 1,
    nodes: int = 1,
    target: str = "local",
    launcher: str = "torchrun",
    backend: str | None = None,
    env: str | None = None,
    idle: float = DEFAULT_IDLE,
    hot: bool | None = None,
    system_interval: float = DEFAULT_SYSTEM_INTERVAL,
    stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    stop_on_nan: str | Sequence[str] = (),
    timeout: float = 600.0,
    home: str | os.PathLike | None = None,
    origin: Mapping[str, Any] | None = None,
) -> Session:
    """Start ``procs`` ranks on each of ``nodes`` nodes of ``target`` that stay alive as the
    session ``name``, join their process group, and wait (at most ``timeout`` seconds) until
    every rank is ready. ``idle`` is how long the session waits for a request before it ends
    itself; ``stall_timeout`` names a rank that logs nothing for that long while a cell runs
    (between cells no rank is stalled); a metric of ``stop_on_nan`` that a cell logs as NaN
    or inf ends the session, naming it. A session of that name already running raises
    ``SpecError``."""
    check_name(name)
    if not 0 < idle <= 7 * 86400:
        raise SpecError(f"idle {idle!r}: give the seconds without a cell, from 1 to 604800")
    live = find(name, home)
    if live is not None:
        raise SpecError(
            f"a session named {name!r} is running (run {live.record.id}): attach to it with "
            f"jt.session({name!r}) or %train session stop {name}"
        )
    folder = Path(tempfile.mkdtemp(prefix="jt-session-"))
    try:
        script = folder / SCRIPT
        script.write_text(HELD_SCRIPT_TEXT if target == "local" else SCRIPT_TEXT)
        run = submit(
            script=str(script),
            args=[f"--idle={idle:g}", *([HOLD] if target == "local" else [])],
            name=name,
            target=target,
            nodes=nodes,
            procs=procs,
            launcher=launcher,
            backend=backend,
            env=env,
            hot=hot,
            stall_timeout=stall_timeout,  # judged while a cell runs, not between cells
            stop_on_nan=stop_on_nan,
            system_interval=system_interval,
            home=home,
            origin=origin,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert isinstance(run, Run)
    session = Session(run)
    session.files.create()
    session.wait_ready(timeout)
    return session


def session(name: str, *, home: str | os.PathLike | None = None, **start: Any) -> Session:
    """The running session ``name`` of this user; with start options (``procs=4``, ...) and
    none running, a new one (``start_session``)."""
    check_name(name)
    live = find(name, home)
    if live is not None:
        return live
    if not start:
        raise SpecError(
            f"no session named {name!r} is running: start one with "
            f"jt.session({name!r}, procs=N) or %train session start {name} --procs N"
        )
    return start_session(name, home=home, **start)


def sessions(*, home: str | os.PathLike | None = None, limit: int = 50) -> list[Session]:
    """This user's running sessions, newest first."""
    store = Store(home)
    found = []
    for status in sorted(ACTIVE):
        for row in store.list_runs(status=status, owner=Identity.current(), limit=limit):
            run = Run(row["id"], store)
            if run.path.joinpath("session").is_dir():
                found.append(Session(run))
    return sorted(found, key=lambda s: s.record.id, reverse=True)[:limit]


def find(name: str, home: str | os.PathLike | None = None) -> Session | None:
    """This user's running session ``name``, if there is one (the one this process found
    last, while it runs, without a look at the index)."""
    key = (str(Store(home).home), name)
    known = _found.get(key)
    if known is not None and known.status in ACTIVE:
        return known
    _found.pop(key, None)
    for live in sessions(home=home, limit=1000):
        if live.name == name:
            _found[key] = live
            return live
    return None


def check_name(name: object) -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SpecError(
            f"invalid session name {name!r}: use 1-64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return name


class Session:
    """A handle on a running session; any number of them, in any process, can drive it
    (its requests run one after another, in the order they were made)."""

    def __init__(self, run: Run) -> None:
        self.record = run
        self.files = SessionFiles(run.path / "session", run.id)

    def __repr__(self) -> str:
        return f"<Session {self.name!r} run={self.record.id} ranks={self.world_size} {self.status}>"

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def world_size(self) -> int:
        return self.record.spec.launch.world_size

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def ranks(self) -> range:
        return range(self.world_size)

    # -- starting and ending --------------------------------------------------------------
    def wait_ready(self, timeout: float = 600.0) -> Session:
        """Wait until every rank has joined the process group and waits for cells."""
        deadline = time.monotonic() + timeout
        while len(self.files.ready()) < self.world_size:
            self._check_alive()
            if time.monotonic() > deadline:
                missing = sorted(set(self.ranks) - self.files.ready())
                self.record.cancel(reason=f"session: rank(s) {missing} not ready in {timeout:g} s")
                raise SessionEnded(
                    f"session {self.name!r}: rank(s) {', '.join(map(str, missing))} were not "
                    f"ready within {timeout:g} s, so it was stopped; see "
                    f"`jupyter-trainer logs {self.id}`"
                )
            time.sleep(0.05)
        return self

    def stop(self, timeout: float = 30.0) -> str:
        """End the session: every rank leaves its cell loop and exits; a rank still in a
        cell after ``timeout`` seconds is stopped with the rest of the run. The run's status."""
        if self.record.status in TERMINAL:
            return self.record.status
        self.files.stop(f"stopped by {Identity.current().name}", self.ranks)
        try:
            self.record.wait(timeout, raise_on_failure=False)
        except TimeoutError:
            return self.record.cancel(reason="session stopped; a rank was still in a cell")
        return self.record.status

    def restart(
        self,
        timeout: float = 600.0,
        *,
        rank: int | Sequence[int] | None = None,
        stream: TextIO | Literal[False] | None = None,
    ) -> Session:
        """Stop the session and start it again with the same ranks and options; every
        rank's namespace is new. With ``rank``, bring back that rank (or those), which died,
        in a new process group with the others, which keep their namespaces; the restarted
        rank's is empty (``restarts()`` records it)."""
        if rank is not None:
            restart_ranks(self, rank, stream=stream)
            return self
        spec = self.record.spec
        self.stop()
        return start_session(
            self.name,
            **placement(spec),
            hot=spec.launch.hot,
            system_interval=spec.watch.system_interval,
            stall_timeout=spec.watch.stall_timeout,
            stop_on_nan=spec.watch.stop_on_nan,
            idle=_idle_of(spec),
            timeout=timeout,
            home=self.record.store.home,
            origin=dict(spec.origin),
        )

    # -- requests -------------------------------------------------------------------------
    def run(
        self,
        code: str,
        *,
        namespace: Mapping[str, Any] | None = None,
        history: Sequence[str] = (),
        params: Mapping[str, Any] | None = None,
        cell: int | None = None,
        first_line: int = 1,
        stream: TextIO | Literal[False] | None = None,
    ) -> None:
        """Run ``code`` on every rank, in its namespace, and wait until every rank has
        finished it; each rank's output is written to ``stream`` (stdout) as it comes.

        Names the session's earlier cells bound stay the ranks'; other names the code reads
        are taken from ``namespace`` as ``%%train`` takes them (parameters, helpers,
        imports, small objects), ``params`` winning. A rank that raises makes this raise
        ``CellFailed`` with its traceback; the session goes on. ``KeyboardInterrupt``
        here interrupts the cell on every rank, and the session goes on."""
        from ..capture import resolve_cell
        from ..capture.cellscript import cell_parts, render_cell_script
        from ..capture.names import bound_names

        check_none_dead(self, self.ranks, "run a cell")
        bound = self.files.names()
        visible = {k: v for k, v in (namespace or {}).items() if k not in bound}
        context = resolve_cell(
            code, visible, overrides=params, history=history, first_line=first_line
        )
        n, here = self.files.new_request()
        write_atomic(here / "cell.py", render_cell_script(code, context, first_line), mode=0o600)
        write_atomic(here / "cell_parts.json", cell_parts(code, context, first_line), mode=0o600)
        if context.carried:
            write_atomic(here / "carried.pkl", pickle.dumps(dict(context.carried)), mode=0o600)
        results = self._request(n, {"op": "run", "cell": cell, "params": context.params}, stream)
        self.files.add_names(bound_names(code, first_line))
        raise_failures(self.name, results)

    def pull(self, expr: str, rank: int | None = 0, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Any:
        """The value of ``expr`` on rank ``rank`` (tensors moved off any GPU), or with
        ``rank=None`` a list of every rank's value."""
        if not isinstance(expr, str) or not expr.strip():
            raise SpecError("pull takes an expression to evaluate on the ranks, e.g. 'loss'")
        try:
            compile(expr, "<pull>", "eval")
        except SyntaxError as exc:
            raise SpecError(f"pull {expr!r}: not an expression ({exc.msg})") from None
        ranks = self._ranks(rank)
        check_none_dead(self, ranks, f"pull {expr!r}")
        n, _ = self.files.new_request()
        request = {"op": "pull", "expr": expr, "ranks": list(ranks), "max_bytes": max_bytes}
        results = self._request(n, request, None, ranks)
        raise_failures(self.name, results)
        values = [self._pulled(n, r, expr) for r in ranks]
        return values if rank is None else values[0]

    def _pulled(self, n: int, rank: int, expr: str) -> Any:
        try:
            return self.files.value(n, rank)
        except (AttributeError, ImportError) as exc:  # what pickle says of a missing class
            raise SpecError(
                f"pull {expr!r}: rank {rank}'s value needs what this notebook does not have "
                f"({exc}): a class or function a session cell defined is sent by its name "
                "(__main__.Name), so define it in the notebook too, or pull a plain part of "
                "the value (vars(x), a number, a tensor, a state_dict)"
            ) from None

    def push(self, *, max_bytes: int = DEFAULT_MAX_BYTES, **values: Any) -> None:
        """Set ``values`` (``name=value``) in every rank's namespace."""
        import cloudpickle

        if not values:
            raise SpecError("push takes the values to send, e.g. push(lr=0.01)")
        blobs = {}
        for key, value in values.items():
            try:
                blobs[key] = cloudpickle.dumps(value)
            except Exception as exc:
                raise SpecError(
                    f"push {key}: its value cannot be pickled ({type(exc).__name__}: {exc}); "
                    "send something that pickles, or build it in a session cell"
                ) from None
        size = sum(map(len, blobs.values()))
        if size > max_bytes:
            raise SpecError(
                f"push {', '.join(blobs)}: {size} bytes pickled, over the limit of "
                f"{max_bytes}; send less, or load it from a file in a session cell"
            )
        check_none_dead(self, self.ranks, f"push {', '.join(blobs)}")
        n, here = self.files.new_request()
        write_atomic(here / "values.pkl", pickle.dumps(blobs), mode=0o600)
        raise_failures(self.name, self._request(n, {"op": "push"}, None))
        self.files.add_names(set(blobs))

    def interrupt(self) -> None:
        """Interrupt the request the ranks are running (``KeyboardInterrupt`` in its code)."""
        n = self.files.count()
        if n:
            self.files.interrupt(n, self.ranks)

    def dead(self) -> dict[int, dict[str, Any]]:
        """The ranks whose process died and that were not restarted yet: how, and when."""
        return self.files.dead()

    def restarts(self) -> list[dict[str, Any]]:
        """The ranks restarted so far (``restart(rank=R)``) and the names they lost."""
        return self.files.restarts()

    def save(self, name: str | None = None, *, wait: bool = False) -> Run:
        """A run that replays the cells this session ran well and the values pushed to it,
        in order, on the same ranks and environment (``rerun`` it anywhere)."""
        from .session_save import save_session

        return save_session(self.record, self.files, name, wait=wait)

    # -- waiting --------------------------------------------------------------------------
    def _ranks(self, rank: int | None) -> range:
        if rank is None:
            return self.ranks
        if type(rank) is not int or rank not in self.ranks:
            raise SpecError(f"rank {rank!r}: this session has ranks 0 to {self.world_size - 1}")
        return range(rank, rank + 1)

    def _request(
        self,
        n: int,
        request: dict[str, Any],
        stream: TextIO | Literal[False] | None,
        ranks: range | None = None,
    ) -> dict[int, dict[str, Any]]:
        ranks = self.ranks if ranks is None else ranks
        self._check_alive()
        sock, name = client_socket(self.id)
        logs = {r: _size(self.record.store.paths(self.id).log_file(r)) for r in ranks}
        posted = time.time()  # before the post: a rank may take it and die at once
        try:
            self.files.post(n, {**request, "client": name}, self.ranks)
            try:
                return self._wait(n, ranks, sock, logs, stream, posted)
            except KeyboardInterrupt:
                self.files.interrupt(n, self.ranks)
                self._wait(n, ranks, sock, logs, stream, posted, INTERRUPT_GRACE)
                raise
        finally:
            sock.close()

    def _regroup(
        self, n: int, request: dict[str, Any], stream: TextIO | Literal[False] | None
    ) -> None:
        raise_failures(self.name, self._request(n, request, stream))

    def _wait(
        self,
        n: int,
        ranks: range,
        sock: Any,
        logs: dict[int, int],
        stream: TextIO | Literal[False] | None,
        posted: float,
        timeout: float | None = None,
    ) -> dict[int, dict[str, Any]]:
        deadline = None if timeout is None else time.monotonic() + timeout
        results: dict[int, dict[str, Any]] = {}
        checked = time.monotonic()
        sock.settimeout(0.1)
        while True:
            for r in ranks:
                if r not in results and (found := self.files.result(n, r)) is not None:
                    results[r] = found
            self._echo(logs, results, stream)
            if len(results) == len(ranks):
                return results
            if deadline is not None and time.monotonic() > deadline:
                late = [r for r in ranks if r not in results]
                raise SessionEnded(
                    f"session {self.name!r}: rank(s) {late} did not stop within "
                    f"{timeout:g} s of the interrupt (a collective waiting for a peer does not "
                    "see it); the session is still running the cell: stop or restart it"
                )
            if time.monotonic() - checked > 0.5:
                self._check_alive()
                self._note_deaths(ranks, results, posted)
                checked = time.monotonic()
            try:
                sock.recv(256)
            except OSError:
                pass

    def _note_deaths(self, ranks: range, results: dict[int, dict[str, Any]], posted: float) -> None:
        """A rank that died while the request ran answers it as failed, naming its death."""
        for r, info in self.files.dead().items():
            if r in ranks and r not in results and float(info.get("at") or 0) >= posted:
                results[r] = {"ok": False, "died": True, "error": dead_text(self.name, {r: info})}

    def _echo(
        self,
        logs: dict[int, int],
        results: dict[int, dict[str, Any]],
        stream: TextIO | Literal[False] | None,
    ) -> None:
        if stream is False:
            return
        out = stream or sys.stdout
        store = self.record.store
        for r, offset in logs.items():
            done = results.get(r)
            end = (done.get("log") or [0, 0])[1] if done else None
            text, after = store.read_log(self.id, r, offset, ended=done is not None)
            if end is not None and after > end:
                text = text.encode()[: max(0, end - offset)].decode(errors="replace")
                after = end
            logs[r] = after
            if text:
                prefix = f"[rank {r}] " if self.world_size > 1 else ""
                out.write("".join(prefix + line for line in text.splitlines(keepends=True)))
        out.flush()

    def _check_alive(self) -> None:
        state = self.record.store.current_state(self.id) or {}
        status = state.get("status")
        if status in TERMINAL:
            reason = self.files.stopped() or state.get("error") or state.get("reason") or status
            rank = state.get("failed_rank")
            how = "" if status == "completed" else f" ({status})"
            how = f" ({status}, rank {rank} failed first)" if rank is not None else how
            raise SessionEnded(f"session {self.name!r} (run {self.id}) has ended{how}: {reason}")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _idle_of(spec: Any) -> float:
    for arg in spec.code.args:
        if str(arg).startswith("--idle="):
            return float(str(arg).split("=", 1)[1])
    return DEFAULT_IDLE
