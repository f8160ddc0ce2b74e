"""A real PostgreSQL server for the tests: one per test process, on a loopback port it holds
(``port_blocks``), with a private data folder; every test that asks gets a database of its
own. The server runs as the ``postgres`` user (``initdb`` refuses root) and trusts loopback,
as a team's server would trust its cluster's network behind its firewall.
"""

from __future__ import annotations

import itertools
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from support.daemons import die_with_this_process
from support.port_blocks import held_block

_BIN = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name))


def available() -> str | None:
    """None if a server can be started here, else why not."""
    if not _BIN:
        return "PostgreSQL is not installed (apt-get install postgresql)"
    try:
        import pwd

        pwd.getpwnam("postgres")
    except KeyError:
        return "there is no postgres user (apt-get install postgresql makes it)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed (pip install 'jupyter-trainer[postgres]')"
    return None


# what the tests need not pay for: a crash of the test machine may lose their databases
FAST = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "

# ``pg_ctl start`` detaches the server, so it cannot be made to die with the test process as
# the other daemons are: this watcher, which does, stops it when the test process ends
# without tearing its fixtures down (killed by a timeout, by SIGKILL, or by a second Ctrl-C).
WATCHER = """
import signal, subprocess, sys
def stop(*_):
    subprocess.run(["su", "postgres", "-s", "/bin/sh", "-c", sys.argv[1]], capture_output=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.stdout.write("ready\\n")
sys.stdout.flush()
while True:
    signal.pause()
"""


def stop_argv(data: Path) -> list[str]:
    """``pg_ctl``'s command that stops the server of ``data`` at once."""
    return [str(_BIN[-1] / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]


class PgServer:
    """``listen``: more addresses than loopback to answer on, and ``trust`` the networks
    whose clients may connect there (a bridge to network namespaces); ``durable``: commits
    wait for the disk, as on a team's server (the benchmarks)."""

    def __init__(
        self, worker: int, listen: str = "", trust: str = "", durable: bool = False
    ) -> None:
        self.bin = _BIN[-1]
        # 16100-16379: above the Ray clusters' blocks, below the ports procs.free_port draws
        self.port = held_block("postgres", 16100, 2, 140, worker) + (1 if listen else 0)
        self.root = Path(tempfile.mkdtemp(prefix="jt-pg-"))
        self.data = self.root / "data"
        self._names = itertools.count()
        os.chmod(self.root, 0o755)
        shutil.chown(self.root, "postgres")
        self._as_postgres(self.bin / "initdb", "-D", self.data, "-A", "trust", "-U", "jt")
        if trust:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {trust} trust\n")
        self._as_postgres(
            self.bin / "pg_ctl",
            "-D",
            self.data,
            "-o",
            f"-k {self.root} -p {self.port} -c listen_addresses=127.0.0.1{',' + listen if listen else ''} "
            + ("" if durable else FAST)
            + "-c max_connections=200",
            "-l",
            self.root / "log",
            "-w",
            "start",
        )
        self._watcher = subprocess.Popen(
            [sys.executable, "-c", WATCHER, shlex.join(stop_argv(self.data))],
            stdout=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=die_with_this_process(),
        )
        assert self._watcher.stdout is not None
        self._watcher.stdout.readline()  # its handler is in place

    def _as_postgres(self, *argv: object) -> None:
        command = shlex.join(str(a) for a in argv)
        done = subprocess.run(
            ["su", "postgres", "-s", "/bin/sh", "-c", command],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}{done.stderr}")

    def url(self, database: str, host: str = "127.0.0.1") -> str:
        return f"postgresql://jt@{host}:{self.port}/{database}"

    def new_database(self) -> str:
        """The URL of a new, empty database."""
        import psycopg

        name = f"ws{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        try:
            self._as_postgres(*stop_argv(self.data))
        finally:
            self._watcher.kill()
            self._watcher.wait()
            shutil.rmtree(self.root, ignore_errors=True)
