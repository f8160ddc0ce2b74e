"""A real single-host Slurm (slurmctld + slurmd, auth none) for tests, one per xdist worker.

Each worker gets its own ports, state and spool folders, so workers never share a cluster.
Commands reach it through ``SLURM_CONF``.

With ``accounting=True`` the cluster also gets job accounting, all of it private to the
cluster's folder: a MariaDB server (its own datadir and socket, TCP on 127.0.0.1 only) and
``slurmdbd`` in front of it, so ``sacct`` answers from the database as on a real site.
Accounting clusters use their own port range, so one worker can run both kinds at once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.daemons import die_with_this_process
from support.port_blocks import held_block

CONF = """\
ClusterName=jt{worker}
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool/%n
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/filetxt
JobCompLoc={root}/jobcomp.txt
AccountingStorageType=accounting_storage/none
MinJobAge=300
KillWait=3
InactiveLimit=0
SchedulerParameters=sched_interval=1,bf_interval=1
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""

ACCOUNTING = """\
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={dbd_port}
JobAcctGatherType=jobacct_gather/none"""

# slurmdbd finds this file next to slurm.conf (the directory of SLURM_CONF); it holds the
# database password, so slurmdbd refuses it unless only its owner can read it.
DBD_CONF = """\
AuthType=auth/none
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={dbd_port}
SlurmUser=root
LogFile={root}/slurmdbd.log
PidFile={root}/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=slurm
StoragePass={db_pass}
StorageLoc=slurm_acct_db
"""

# A throwaway database: small files, no fsync. (slurmdbd logs that these are below its
# recommended production values; that is expected here.)
MARIADB_OPTS = [
    "--innodb-log-file-size=8M",
    "--innodb-buffer-pool-size=32M",
    "--innodb-flush-log-at-trx-commit=0",
    "--innodb-flush-method=nosync",
    "--innodb-doublewrite=0",
    "--innodb-lock-wait-timeout=900",
    "--skip-name-resolve",
]
DB_PASS = "jt-test-only"


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    procs: list[subprocess.Popen]  # in the order stop() ends them
    accounting: bool = False
    name: str = ""

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, check=check, timeout=60
        )

    def queue(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i %T").stdout.split("\n")[:-1]

    def sacct(self, job_id: str) -> str:
        """``State|ExitCode`` of the job as the accounting database has it ("" if unknown)."""
        return self.run(
            "sacct", "-n", "-P", "-X", "-j", job_id, "-o", "State,ExitCode", check=False
        ).stdout.strip()

    def stop(self) -> None:
        """Cancel every job, then end every daemon (slurmd, slurmctld, slurmdbd, MariaDB),
        each in turn; safe to call on a half-started cluster and more than once."""
        if any(p.poll() is None and p.args[0] == "slurmctld" for p in self.procs):
            try:
                subprocess.run(
                    ["scancel", "--full", "--user", os.environ.get("USER", "root")],
                    env=self.env,
                    capture_output=True,
                    timeout=15,
                )
            except subprocess.TimeoutExpired:
                pass
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10 if proc.args[0] != "mariadbd" else 30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _wait(what: str, ready, cluster: SlurmCluster, log: Path, timeout: float = 30.0) -> None:
    deadline, died = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        if ready():
            return
        died = [p.args[0] for p in cluster.procs if p.poll() is not None]
        if died:
            break
        time.sleep(0.1)
    cluster.stop()
    text = log.read_text(errors="replace")[-2000:] if log.exists() else "(no log)"
    why = f"{', '.join(died)} exited" if died else f"not ready in {timeout:.0f} s"
    raise RuntimeError(f"{what} did not come up ({why}); {log.name}:\n{text}")


def _start_accounting(root: Path, cluster: SlurmCluster, db_port: int, dbd_port: int) -> None:
    """MariaDB in ``root/mysql`` on 127.0.0.1:db_port, the accounting database, slurmdbd."""
    for program, package in (("mariadbd", "mariadb-server"), ("slurmdbd", "slurmdbd")):
        if not shutil.which(program):
            raise RuntimeError(
                f"{program} is not installed: apt-get install {package} (scripts/setup.sh does)"
            )
    data, sock = root / "mysql", root / "mysql.sock"
    init = subprocess.run(
        [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={data}",
            "--user=root",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *MARIADB_OPTS,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if init.returncode != 0:
        raise RuntimeError(
            f"mariadb-install-db failed:\n{init.stdout[-1500:]}{init.stderr[-1500:]}"
        )
    cluster.procs.append(
        subprocess.Popen(
            [
                "mariadbd",
                "--no-defaults",
                f"--datadir={data}",
                "--user=root",
                f"--socket={sock}",
                f"--pid-file={root}/mysql.pid",
                f"--log-error={root}/mysql.err",
                "--skip-networking=0",
                "--bind-address=127.0.0.1",
                f"--port={db_port}",
                *MARIADB_OPTS,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_this_process(),
        )
    )
    client = ["mariadb", "--no-defaults", f"--socket={sock}", "-uroot"]
    _wait(
        "MariaDB",
        lambda: (
            subprocess.run([*client, "-e", "SELECT 1"], capture_output=True, timeout=10).returncode
            == 0
        ),
        cluster,
        root / "mysql.err",
    )
    subprocess.run(
        [
            *client,
            "-e",
            "CREATE DATABASE slurm_acct_db; "
            f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{DB_PASS}'; "
            "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    dbd_conf = root / "slurmdbd.conf"
    dbd_conf.write_text(
        DBD_CONF.format(root=root, dbd_port=dbd_port, db_port=db_port, db_pass=DB_PASS)
    )
    dbd_conf.chmod(0o600)
    cluster.procs.append(
        subprocess.Popen(
            ["slurmdbd", "-D"],
            env=cluster.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_this_process(),
        )
    )
    # slurmdbd answers once it has created its tables; then register the cluster (slurmctld
    # would add itself too, but explicitly is deterministic).
    _wait(
        "slurmdbd",
        lambda: cluster.run("sacctmgr", "-n", "show", "cluster", check=False).returncode == 0,
        cluster,
        root / "slurmdbd.log",
    )
    cluster.run("sacctmgr", "-i", "add", "cluster", cluster.name)


def start_cluster(
    root: Path,
    worker: int,
    cpus: int = 2,
    *,
    accounting: bool = False,
    port_base: int | None = None,
) -> SlurmCluster:
    """Start slurmctld + slurmd (and, with ``accounting``, MariaDB + slurmdbd) under ``root``.

    Ports: a block of 8 that the xdist worker holds (``port_blocks``: never one another test
    session holds), in which a cluster without accounting takes the first four and one with
    it the next four (slurmctld, slurmd, slurmdbd, MariaDB); all of them in 9200-9999,
    below the Ray clusters' blocks and out of 20000-31999, where the Slurm target picks a
    run's rendezvous port (a daemon of another session there could take the port a held
    allocation chose), and of what ``procs.free_port`` draws from. ``port_base`` overrides both (four ports from it).
    """
    if not shutil.which("slurmctld"):
        raise RuntimeError(
            "Slurm is not installed: apt-get install slurm-wlm (scripts/setup.sh does)"
        )
    if port_base is None:
        port_base = held_block("slurm", 9200, 8, 100, worker) + (4 if accounting else 0)
    ctld_port, slurmd_port, dbd_port, db_port = (port_base + i for i in range(4))
    (root / "state").mkdir(parents=True)
    (root / "spool" / "localhost").mkdir(parents=True)
    conf = root / "slurm.conf"
    text = CONF.format(
        root=root, worker=worker, cpus=cpus, ctld_port=ctld_port, slurmd_port=slurmd_port
    )
    if accounting:
        text = text.replace(
            "AccountingStorageType=accounting_storage/none", ACCOUNTING.format(dbd_port=dbd_port)
        )
    conf.write_text(text)
    cluster = SlurmCluster(root, conf, [], accounting=accounting, name=f"jt{worker}")
    env = cluster.env
    try:
        if accounting:
            _start_accounting(root, cluster, db_port, dbd_port)
        ctld = subprocess.Popen(
            ["slurmctld", "-D", "-i"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_this_process(),
        )
        cluster.procs.insert(0, ctld)
        slurmd = subprocess.Popen(
            ["slurmd", "-D", "-N", "localhost"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_this_process(),
        )
        cluster.procs.insert(0, slurmd)
    except BaseException:
        cluster.stop()
        raise

    def idle() -> bool:
        state = subprocess.run(
            ["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True, timeout=30
        )
        return state.stdout.strip() == "idle"

    def registered() -> bool:  # slurmctld has told slurmdbd where it listens
        out = cluster.run(
            "sacctmgr", "-n", "-P", "show", "cluster", "format=Cluster,ControlPort", check=False
        ).stdout.split()
        return f"{cluster.name}|{ctld_port}" in out

    try:
        _wait("Slurm (an idle node)", idle, cluster, root / "slurmctld.log")
        if accounting:
            _wait(
                "slurmctld's registration with slurmdbd",
                registered,
                cluster,
                root / "slurmctld.log",
            )
    except BaseException:
        cluster.stop()
        raise
    return cluster


def worker_index(worker_id: str) -> int:
    """0 without xdist, else 1 + the worker's number: each worker gets its own cluster."""
    return 0 if worker_id == "master" else int(worker_id.removeprefix("gw")) + 1


@contextmanager
def as_target(cluster: SlurmCluster, home: Path, monkeypatch) -> Iterator[SlurmCluster]:
    """``cluster`` as the target named 'cluster' of the test's run store; its queue is
    emptied afterwards, so the next test starts with an idle node."""
    from conftest import wait_for

    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    home.mkdir(parents=True, exist_ok=True)
    (home / "targets.toml").write_text(
        '[targets.cluster]\nkind = "slurm"\npartition = "debug"\ntime = "10:00"\n'
    )
    yield cluster
    cluster.run("scancel", "--user", os.environ.get("USER", "root"), check=False)
    wait_for(lambda: cluster.queue() == [], timeout=30, what="an empty queue")


def target(home, name: str, **keys) -> None:
    """Write the Slurm target NAME (partition debug, 10 minutes) with KEYS to the store."""
    lines = [f"[targets.{name}]", 'kind = "slurm"', 'partition = "debug"', 'time = "10:00"']
    lines += [
        f"{k} = {json.dumps(v) if not isinstance(v, dict) else _table(v)}" for k, v in keys.items()
    ]
    home.mkdir(parents=True, exist_ok=True)
    (home / "targets.toml").write_text("\n".join(lines) + "\n")


def _table(value: dict) -> str:
    return "{ " + ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items()) + " }"


@pytest.fixture
def login(slurm, cluster, ssh_pair, user_home, home, tmp_path):
    """A target 'hpc' whose Slurm commands run over ssh on n1; the cluster's slurm.conf is
    given to them with login_env, as on a site with several clusters."""
    from jupyter_trainer.nodes.ssh import close_masters, control_dir

    if "127.0.0.2" not in ssh_pair.daemons:
        ssh_pair.start_node("127.0.0.2")
    target(
        home,
        "hpc",
        login="n1",
        workdir=str(tmp_path / "shared"),
        connect_timeout=5,
        login_env={"SLURM_CONF": str(slurm.conf)},
    )
    yield slurm
    close_masters(control_dir(home))
