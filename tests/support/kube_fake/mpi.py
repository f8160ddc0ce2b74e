"""The Kubeflow Trainer v2 MPI plugin (pkg/runtime/framework/plugins/mpi): for a runtime with an
``mpi`` ML policy it counts the node job's pods, mounts an SSH key Secret into the launcher and
node pods, mounts a hostfile ConfigMap into the launcher (/etc/mpi/hostfile) and gives the
launcher's ``node`` container Open MPI's environment, as the real plugin does."""

from __future__ import annotations

import base64
import subprocess
import tempfile
from pathlib import Path

LAUNCHER, NODE = "launcher", "node"
SSH_SECRET_SUFFIX = "-mpi-ssh-auth"
SSH_VOLUME = "mpi-ssh-auth"
HOSTFILE_SUFFIX = "-mpi-hostfile"
HOSTFILE_VOLUME = "mpi-hostfile"
HOSTFILE_DIR = "/etc/mpi"
RESERVED_ENV = (
    "OMPI_MCA_orte_default_hostfile",
    "OMPI_MCA_plm_rsh_args",
    "OMPI_MCA_orte_keep_fqdn_hostnames",
    "OMPI_MCA_orte_set_default_slots",
)


def policy(runtime: dict) -> dict | None:
    return ((runtime.get("spec") or {}).get("mlPolicy") or {}).get("mpi")


def launcher_as_node(mpi: dict) -> bool:
    return bool(mpi.get("runLauncherAsNode"))


def node_count(mpi: dict, num_nodes: int) -> int:
    """The node job's pods: numNodes, one fewer when the launcher is a node too."""
    return max(num_nodes - 1, 1) if launcher_as_node(mpi) else num_nodes


def slots(mpi: dict, trainer: dict) -> int:
    return int(trainer.get("numProcPerNode") or mpi.get("numProcPerNode") or 1)


def validate(mpi: dict, trainjob: dict) -> list[str]:
    """What the plugin's webhook refuses: reserved Open MPI variables in trainer.env."""
    names = sorted(
        {
            e["name"]
            for e in ((trainjob.get("spec") or {}).get("trainer") or {}).get("env") or []
            if e["name"] in RESERVED_ENV
        }
    )
    return (
        [
            f"spec.trainer.env: Invalid value: must not have reserved envs, invalid envs "
            f"configured: [{' '.join(names)}]"
        ]
        if names
        else []
    )


def enforce(mpi: dict, rjob: dict, pod: dict, trainjob: dict, trainer: dict) -> None:
    """The volumes, mounts and environment the plugin puts into one replicated job's pods."""
    name = trainjob["metadata"]["name"]
    if rjob["name"] not in (LAUNCHER, NODE):
        return
    volumes = [
        {
            "name": SSH_VOLUME,
            "secret": {
                "secretName": name + SSH_SECRET_SUFFIX,
                "defaultMode": 0o400,
                "items": [
                    {"key": "ssh-privatekey", "path": "id_rsa", "mode": 0o640},
                    {"key": "ssh-publickey", "path": "id_rsa.pub", "mode": 0o644},
                    {"key": "ssh-publickey", "path": "authorized_keys", "mode": 0o644},
                ],
            },
        }
    ]
    if rjob["name"] == LAUNCHER:
        volumes.append(
            {
                "name": HOSTFILE_VOLUME,
                "configMap": {
                    "name": name + HOSTFILE_SUFFIX,
                    "items": [{"key": "hostfile", "path": "hostfile", "mode": 0o444}],
                },
            }
        )
    _upsert(pod.setdefault("volumes", []), volumes)
    for c in pod["containers"]:
        if c["name"] != NODE:
            continue
        mounts = [{"name": SSH_VOLUME, "mountPath": mpi.get("sshAuthMountPath", "/root/.ssh")}]
        if rjob["name"] == LAUNCHER:
            mounts.append({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR})
            _upsert(
                c.setdefault("env", []),
                [
                    {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{HOSTFILE_DIR}/hostfile"},
                    {"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                    {"name": "OMPI_MCA_orte_set_default_slots", "value": str(slots(mpi, trainer))},
                    {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                ],
            )
        _upsert(c.setdefault("volumeMounts", []), mounts)


def _upsert(items: list[dict], new: list[dict]) -> None:
    for item in new:
        at = next((i for i, old in enumerate(items) if old["name"] == item["name"]), None)
        if at is None:
            items.append(item)
        else:
            items[at] = item


def hostfile(mpi: dict, trainjob: dict, trainer: dict, counts: dict[str, int]) -> str:
    """One line per node pod's DNS name (the launcher's first when it is a node), with its
    slots: ``<trainjob>-<job>-0-<i>.<trainjob> slots=N``."""
    name = trainjob["metadata"]["name"]
    jobs = [j for j in counts if j == NODE or (j == LAUNCHER and launcher_as_node(mpi))]
    return "".join(
        f"{name}-{job}-0-{i}.{name} slots={slots(mpi, trainer)}\n"
        for job in jobs
        for i in range(counts[job])
    )


def ssh_key_pair() -> tuple[bytes, bytes]:
    """An ECDSA P-521 key pair: the private key as PEM (EC PRIVATE KEY), the public key in
    authorized_keys form, as the plugin makes them."""
    with tempfile.TemporaryDirectory() as tmp:
        key = Path(tmp) / "id"
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ecdsa",
                "-b",
                "521",
                "-m",
                "PEM",
                "-N",
                "",
                "-C",
                "",
                "-f",
                str(key),
            ],
            check=True,
            capture_output=True,
        )
        return key.read_bytes(), key.with_suffix(".pub").read_bytes()


def objects(
    mpi: dict, trainjob: dict, trainer: dict, counts: dict[str, int], owner: list[dict]
) -> list[tuple[str, dict]]:
    """The Secret (plural, object) and ConfigMap the plugin builds for a TrainJob."""
    meta = trainjob["metadata"]
    private, public = ssh_key_pair()
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/ssh-auth",
        "immutable": True,
        "metadata": {
            "name": meta["name"] + SSH_SECRET_SUFFIX,
            "namespace": meta["namespace"],
            "ownerReferences": owner,
        },
        "data": {
            "ssh-privatekey": base64.b64encode(private).decode(),
            "ssh-publickey": base64.b64encode(public).decode(),
        },
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": meta["name"] + HOSTFILE_SUFFIX,
            "namespace": meta["namespace"],
            "ownerReferences": owner,
        },
        "data": {"hostfile": hostfile(mpi, trainjob, trainer, counts)},
    }
    return [("secrets", secret), ("configmaps", config)]
