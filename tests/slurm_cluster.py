"""A real single-host Slurm (slurmctld + slurmd, auth none) for tests, one per xdist worker.

Each worker gets its own ports, state and spool folders, so workers never share a cluster.
Commands reach it through ``SLURM_CONF``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

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
SchedulerParameters=sched_interval=1
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    procs: list[subprocess.Popen]

    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, check=check,
                              timeout=60)

    def queue(self) -> list[str]:
        return self.run("squeue", "-h", "-o", "%i %T").stdout.split("\n")[:-1]

    def stop(self) -> None:
        self.run("scancel", "--full", "--user", os.environ.get("USER", "root"), check=False)
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def start_cluster(root: Path, worker: int, cpus: int = 2) -> SlurmCluster:
    if not shutil.which("slurmctld"):
        raise RuntimeError("Slurm is not installed: apt-get install slurm-wlm (scripts/setup.sh does)")
    (root / "state").mkdir(parents=True)
    (root / "spool" / "localhost").mkdir(parents=True)
    conf = root / "slurm.conf"
    conf.write_text(CONF.format(root=root, worker=worker, cpus=cpus,
                                ctld_port=16817 + 2 * worker, slurmd_port=16818 + 2 * worker))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    ctld = subprocess.Popen(["slurmctld", "-D", "-i"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, start_new_session=True)
    slurmd = subprocess.Popen(["slurmd", "-D", "-N", "localhost"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                              start_new_session=True)
    cluster = SlurmCluster(root, conf, [slurmd, ctld])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
        if state.stdout.strip() == "idle":
            return cluster
        time.sleep(0.3)
    cluster.stop()
    log = (root / "slurmctld.log").read_text(errors="replace")[-2000:]
    raise RuntimeError(f"Slurm did not become idle in 30 s; slurmctld.log:\n{log}")
