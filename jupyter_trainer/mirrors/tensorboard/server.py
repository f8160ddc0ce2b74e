"""A TensorBoard over runs' exports, kept up to date while the runs go on.

``TensorBoardServer`` exports the runs into ``$JUPYTER_TRAINER_HOME/tensorboard/<run-id>``
(the folders every later export continues), serves a temporary folder that links to just
those runs with ``tensorboard --logdir DIR --host 127.0.0.1 --port 0`` (the port the system
gave is read from what TensorBoard prints), and exports live runs' new values every second from
a thread. TensorBoard runs in its own process group, so ``stop()`` ends it with the data server
it starts, and removes the links. It is started through ``tied``, so it also ends, links
removed, within a fraction of a second when the process that started it is killed.

``shared_server`` is the one server a process (a notebook's kernel) keeps for ``%train
tensorboard``: a later call adds runs to it; it is stopped at exit or by ``stop_shared``.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...core.errors import LaunchError, SpecError
from ...store import Store
from .export import Exporter

EXPORT_INTERVAL = 1.0  # seconds between exports of live runs while the server runs
_ADDRESS = re.compile(rb"TensorBoard \S+ at (http://\S+) ")


class TensorBoardServer:
    """TensorBoard over ``run_ids`` on ``host``:``port`` (0: a free port); ``start()`` returns
    its address, ``stop()`` leaves no process behind."""

    def __init__(
        self,
        run_ids: Sequence[str],
        *,
        store: Store | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        if not run_ids:
            raise SpecError(
                "tensorboard: name at least one RUN (`jupyter-trainer runs` lists them)"
            )
        if not 0 <= port < 65536:
            raise SpecError(
                f"tensorboard --port {port}: a port from 1 to 65535, or 0 for a free one"
            )
        self.store = store or Store()
        self.exporter = Exporter(list(run_ids), self.store.home / "tensorboard", self.store)
        self.host, self.port = host, port
        self.url: str | None = None
        self.error: BaseException | None = None
        self.proc: subprocess.Popen | None = None
        self.folder: Path | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def runs(self) -> list[str]:
        return list(self.exporter.runs)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60.0) -> str:
        """Export the runs, start TensorBoard and the export thread; TensorBoard's address."""
        self.exporter.export()
        self.folder = Path(tempfile.mkdtemp(prefix="jt-tensorboard-"))
        self._link(self.runs)
        log = self.folder / "tensorboard.log"
        argv = [
            sys.executable,
            "-m",
            "jupyter_trainer.mirrors.tensorboard.tied",
            str(os.getpid()),
            str(self.folder),
            "--logdir",
            str(self.folder),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--reload_interval",
            "2",
        ]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while self.url is None:
            found = _ADDRESS.search(log.read_bytes())
            if found:
                self.url = found.group(1).decode()
            elif self.proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text(errors="replace")[-2000:]
                self.stop()
                raise LaunchError(f"TensorBoard did not start ({' '.join(argv)}):\n{text}")
            else:
                time.sleep(0.1)
        self._thread = threading.Thread(
            target=self._keep_exporting, name="jt-tensorboard", daemon=True
        )
        self._thread.start()
        return self.url

    def add(self, run_ids: Sequence[str]) -> None:
        """Serve these runs too (exported at once, then kept up to date)."""
        with self._lock:
            self.exporter.add(list(run_ids))
            self.exporter.export()
        self._link(self.runs)

    def wait(self) -> int:
        """Block until TensorBoard exits; its exit code."""
        if self.proc is None:
            raise SpecError("this TensorBoard was not started")
        return self.proc.wait()

    def stop(self) -> None:
        """End the export thread and TensorBoard's process group; remove the links."""
        self._stopping.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        if self.proc is not None:
            end_group(self.proc)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> TensorBoardServer:
        if self.url is None:
            self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _link(self, run_ids: list[str]) -> None:
        for run_id in run_ids:
            link = self.folder / run_id  # type: ignore[operator]
            if not link.is_symlink():
                link.symlink_to(self.exporter.logdir / run_id, target_is_directory=True)

    def _keep_exporting(self) -> None:
        while not self._stopping.wait(EXPORT_INTERVAL):
            try:
                with self._lock:
                    self.exporter.export()
                self.error = None
            except Exception as exc:  # a full disk, say: tried again at the next interval
                self.error = exc


def end_group(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """SIGTERM ``proc``'s process group, SIGKILL whatever of it is left after ``grace`` s."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace
    while group_alive(proc.pid) and time.monotonic() < deadline:
        proc.poll()  # reaps the leader, so only live members keep the group
        time.sleep(0.05)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    deadline = time.monotonic() + 5.0  # killed members stay in the group until they are reaped
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    """Whether any process of group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


_shared: TensorBoardServer | None = None
_at_exit = False


def shared_server(
    run_ids: Sequence[str], *, host: str = "127.0.0.1", port: int = 0
) -> TensorBoardServer:
    """This process's TensorBoard with ``run_ids`` added; started (again) where it is not
    running, serves another run store, or was asked for on another host or port."""
    global _shared, _at_exit
    store = Store()
    current = _shared
    if (
        current is not None
        and current.alive
        and current.store.home == store.home
        and current.host == host
        and port in (0, current.port)
    ):
        current.add(run_ids)
        return current
    server = TensorBoardServer(run_ids, store=store, host=host, port=port)
    stop_shared()
    server.start()
    if not _at_exit:
        atexit.register(stop_shared)
        _at_exit = True
    _shared = server
    return server


def stop_shared() -> bool:
    """Stop this process's TensorBoard; False if none was running."""
    global _shared
    server, _shared = _shared, None
    if server is None:
        return False
    running = server.alive
    server.stop()
    return running
